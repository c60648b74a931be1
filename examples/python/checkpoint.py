#!/usr/bin/env python3
"""A training checkpoint (a model's state dict and its optimizer's) saved and loaded with
nvmeio_torch.save / nvmeio_torch.load, in torch's own format: torch.load reads what nvmeio
writes, nvmeio reads what torch.save writes. Every tensor is checked after each trip.

    PYTHONPATH=build/python examples/python/checkpoint.py [--folder DIR] [--size 256M]

bench/torch_checkpoint_compare.py measures the same against torch.save/torch.load and fio.
"""

import argparse
import os
import tempfile
import time

import torch

import nvmeio_torch


def training_state(size):
    """A GPT-style model of about `size` bytes and an Adam optimizer after one step."""
    hidden = 1024
    layers = max(1, size // (12 * hidden * hidden * 4 * 3))  # weights, exp_avg, exp_avg_sq
    blocks = [torch.nn.TransformerEncoderLayer(hidden, 16, 4 * hidden) for _ in range(layers)]
    model = torch.nn.Sequential(*blocks)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randn(2, 8, hidden)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}


def tensors(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from tensors(v, f"{prefix}/{i}")


def check(expected, got, what):
    pairs = list(zip(tensors(expected), tensors(got)))
    assert len(pairs) == len(list(tensors(got))), f"{what}: tensors missing"
    for (name, a), (other, b) in pairs:
        assert name == other and a.dtype == b.dtype and torch.equal(a, b), f"{what}: {name}"
    return sum(a.numel() * a.element_size() for (_, a), _ in pairs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", default=tempfile.gettempdir())
    p.add_argument("--size", default="256M", help="bytes of model and optimizer (K, M, G)")
    args = p.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    size = int(float(args.size[:-1]) * units[args.size[-1]]) if args.size[-1] in units \
        else int(args.size)
    state = training_state(size)
    ours, theirs = (os.path.join(args.folder, name) for name in ("nvmeio.pt", "torch.pt"))

    start = time.perf_counter()
    nvmeio_torch.save(state, ours)  # atomic and durable: temporary, fdatasync, rename
    saved = time.perf_counter() - start
    nbytes = check(state, torch.load(ours), "torch.load of nvmeio_torch.save's file")

    torch.save(state, theirs)
    start = time.perf_counter()
    loaded = nvmeio_torch.load(theirs)  # weights_only=True: tensors and plain values only
    took = time.perf_counter() - start
    check(state, loaded, "nvmeio_torch.load of torch.save's file")
    check(state, nvmeio_torch.load(ours), "nvmeio_torch.load of its own file")

    print(f"checkpoint: {nbytes / (1 << 20):.0f} MiB of tensors; nvmeio_torch.save "
          f"{saved:.2f} s, nvmeio_torch.load (of torch.save's file, warm) {took:.2f} s; "
          "every tensor equal both ways")
    os.remove(ours)
    os.remove(theirs)


if __name__ == "__main__":
    main()

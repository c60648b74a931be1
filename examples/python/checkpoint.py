#!/usr/bin/env python3
"""A model checkpoint written and read back three ways, cold, interleaved, every byte checked:

  nvmeio_torch  DeepSpeed's handle interface on nvmeio: one async_pwrite per tensor at 4 KiB
                aligned offsets of one file; read back with one pread into a locked arena that
                the tensors then view (what FastPersist-style writers and loaders do)
  deepspeed     the same code on DeepSpeed's own handle (AsyncIOBuilder().load(): an installed
                DeepSpeed, or python/deepspeed_compat's stand-ins with DS_AIO_EXTENSION)
  torch         torch.save / torch.load

The state dict is a GPT-style model's (per layer: attention and MLP weights and biases, layer
norms; bf16 by default) of about --size bytes. Each write and each read runs in a fresh process
(first use: fresh buffers, as a training job resuming pays), the page cache dropped before
every read; the time inside the process (the operation alone) and the whole process are both
reported, as medians over --rounds rounds in a shuffled order, with ratios taken per round.

    examples/python/checkpoint.py --folder /nvme/ckpt [--size 4G] [--rounds 3]
        [--methods nvmeio_torch deepspeed torch]
"""

import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from measure import drop_caches, median_ratio  # noqa: E402

ALIGN = 4096
MAGIC = b"NVMEIOCK"
GiB = 1 << 30


def state_dict(size, hidden, dtype, seed):
    """A deterministic GPT-style state dict of about `size` bytes."""
    g = torch.Generator().manual_seed(seed)
    item = torch.empty(0, dtype=dtype).element_size()
    per_layer = (12 * hidden * hidden + 13 * hidden) * item
    sd = {}
    for layer in range(max(1, size // per_layer)):
        p = f"transformer.h.{layer}."
        for name, shape in (("ln_1.weight", (hidden,)), ("ln_1.bias", (hidden,)),
                            ("attn.c_attn.weight", (3 * hidden, hidden)),
                            ("attn.c_attn.bias", (3 * hidden,)),
                            ("attn.c_proj.weight", (hidden, hidden)), ("attn.c_proj.bias", (hidden,)),
                            ("ln_2.weight", (hidden,)), ("ln_2.bias", (hidden,)),
                            ("mlp.c_fc.weight", (4 * hidden, hidden)), ("mlp.c_fc.bias", (4 * hidden,)),
                            ("mlp.c_proj.weight", (hidden, 4 * hidden)),
                            ("mlp.c_proj.bias", (hidden,))):
            sd[p + name] = torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
    return sd


def layout(sd):
    """Header (JSON) and the aligned offset of every tensor."""
    entries, offset = [], 0
    for name, t in sd.items():
        entries.append({"name": name, "dtype": str(t.dtype).split(".")[1], "shape": list(t.shape),
                        "offset": offset, "bytes": t.numel() * t.element_size()})
        offset += (entries[-1]["bytes"] + ALIGN - 1) // ALIGN * ALIGN
    header = json.dumps(entries).encode()
    data_start = (len(MAGIC) + 8 + len(header) + ALIGN - 1) // ALIGN * ALIGN
    return header, data_start, offset, entries


def handle_module(method):
    if method == "nvmeio_torch":
        import nvmeio_torch
        return nvmeio_torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    return AsyncIOBuilder().load()


def write_with_handle(module, sd, path, args):
    h = module.aio_handle(args.block_size, args.queue_depth, False, True, args.parallelism)
    header, data_start, _, entries = layout(sd)
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
    for e, t in zip(entries, sd.values()):
        assert h.async_pwrite(t.view(-1), path, data_start + e["offset"]) == 0
    assert h.wait() == len(entries)


def read_with_handle(module, path, args):
    h = module.aio_handle(args.block_size, args.queue_depth, False, True, args.parallelism)
    with open(path, "rb") as f:
        prefix = f.read(len(MAGIC) + 8)
        assert prefix[:len(MAGIC)] == MAGIC, f"{path} is not a checkpoint of this example"
        entries = json.loads(f.read(struct.unpack("<Q", prefix[len(MAGIC):])[0]))
    data_start = (len(MAGIC) + 8 + len(json.dumps(entries).encode()) + ALIGN - 1) // ALIGN * ALIGN
    end = entries[-1]["offset"] + entries[-1]["bytes"]
    arena = h.new_cpu_locked_tensor(end, torch.empty(0, dtype=torch.uint8))
    assert h.sync_pread(arena, path, data_start) == 1
    return {e["name"]: arena[e["offset"]:e["offset"] + e["bytes"]]
            .view(getattr(torch, e["dtype"])).view(e["shape"]) for e in entries}


def child(args):
    """One write or read in this process; prints seconds of the operation alone."""
    path = os.path.join(args.folder, f"checkpoint.{args.method}")
    dtype = getattr(torch, args.dtype)
    if args.child == "write":
        sd = state_dict(args.size, args.hidden, dtype, args.seed)
        if os.path.exists(path):
            os.remove(path)
        start = time.perf_counter()
        if args.method == "torch":
            torch.save(sd, path)
        else:
            write_with_handle(handle_module(args.method), sd, path, args)
        os.sync() if args.method == "torch" else None  # O_DIRECT bytes are on the device already
        seconds = time.perf_counter() - start
    else:
        start = time.perf_counter()
        if args.method == "torch":
            loaded = torch.load(path)
        else:
            loaded = read_with_handle(handle_module(args.method), path, args)
        seconds = time.perf_counter() - start
        expected = state_dict(args.size, args.hidden, dtype, args.seed)
        assert list(loaded) == list(expected), "tensor names differ"
        for name, t in expected.items():
            assert torch.equal(loaded[name], t), f"{name} differs after reading {path}"
    print(json.dumps({"seconds": seconds, "bytes": os.path.getsize(path)}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--size", default="2G", help="bytes of tensors (K, M, G suffixes)")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=["nvmeio_torch", "deepspeed", "torch"])
    p.add_argument("--block-size", type=int, default=1 << 20)
    p.add_argument("--queue-depth", type=int, default=32)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--child", choices=["write", "read"], help=argparse.SUPPRESS)
    p.add_argument("--method", help=argparse.SUPPRESS)
    args = p.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    args.size = int(float(args.size[:-1]) * units[args.size[-1]]) if args.size[-1] in units \
        else int(args.size)
    os.makedirs(args.folder, exist_ok=True)
    if args.child:
        return child(args)

    runs, cold = [], True
    for round_ in range(args.rounds):
        order = args.methods[:]
        random.shuffle(order)
        for op in ("write", "read"):
            for method in order:
                if op == "read":
                    cold = drop_caches() and cold
                command = [sys.executable, os.path.abspath(__file__), "--child", op, "--method",
                           method] + [a for a in sys.argv[1:]]
                start = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True)
                whole = time.perf_counter() - start
                if done.returncode != 0:
                    sys.exit(f"checkpoint: {method} {op} failed:\n{done.stderr[-3000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                runs.append(dict(round=round_, op=op, method=method, seconds=r["seconds"],
                                 whole=whole, bytes=r["bytes"]))
    report(args, runs, cold)
    for method in args.methods:
        os.remove(os.path.join(args.folder, f"checkpoint.{method}"))


def report(args, runs, cold):
    print(f"checkpoint: {args.size / GiB:.2f} GiB of {args.dtype} tensors (hidden {args.hidden}), "
          f"handles at {args.block_size >> 10} KiB x {args.queue_depth}, parallelism "
          f"{args.parallelism}, {args.rounds} rounds; every byte checked")
    print("page cache dropped before every read" if cold else
          "WARNING: the page cache could not be dropped (not root): reads were not cold")
    base = args.methods[-1]
    print(f"{'op':6}{'method':14}{'GiB/s':>8}{'op s':>8}{'process s':>11}   ratio of time to {base}")
    for op in ("write", "read"):
        for method in args.methods:
            mine = {r["round"]: r for r in runs if r["op"] == op and r["method"] == method}
            ref = {r["round"]: r for r in runs if r["op"] == op and r["method"] == base}
            seconds = statistics.median(r["seconds"] for r in mine.values())
            whole = statistics.median(r["whole"] for r in mine.values())
            size = statistics.median(r["bytes"] for r in mine.values())
            ratio = median_ratio({i: r["seconds"] for i, r in mine.items()},
                                 {i: r["seconds"] for i, r in ref.items()})
            print(f"{op:6}{method:14}{size / GiB / seconds:8.2f}{seconds:8.2f}{whole:11.2f}"
                  f"{ratio:10.2f}")


if __name__ == "__main__":
    main()

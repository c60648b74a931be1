#!/usr/bin/env python3
"""A GPT-style state dict saved and loaded in torch's checkpoint format: nvmeio_torch.save /
nvmeio_torch.load against torch.save + os.fsync / torch.load, and fio writing and reading the
same number of bytes with O_DIRECT (what the device gives). Method nvmeio_aligned (save only:
its file is the nvmeio method's, byte for byte) saves the same state dict built in nvmeio's
page-aligned memory, as DeepSpeed's pinned tensors are. On a device whose O_DIRECT takes only
512-byte aligned memory (loop, virtio), torch's 64-byte aligned tensors are copied through an
aligned arena and these are not; where the kernel reports 4-byte memory alignment (NVMe, Linux
6.1+), torch's tensors need no copy either (not measured here).

Each run is a fresh process, the page cache dropped before it; within a round each method
saves, then loads (cold) its own file, which is then removed, the methods in an order shuffled
per round. Seconds are the operation's alone (the state dict is built before the clock starts;
fio's own runtime); medians over the rounds and ratios taken within each round.

    bench/torch_checkpoint_compare.py --folder DIR [--size 2G] [--rounds 5] [--hidden 2048]
        [--build build-test-g++-17] [--fio /usr/bin/fio] [--methods nvmeio nvmeio_aligned torch fio]
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "support"))
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

GiB = 1 << 30
METHODS = ("nvmeio", "nvmeio_aligned", "torch", "fio")

# Runs one save or load in a fresh process; prints {"seconds", "bytes"} as JSON.
CHILD = r"""
import json, os, sys, time, torch
sys.path.insert(0, sys.argv[5])
from torch_checkpoint_compare import gpt_state_dict, check
method, op, path, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
hidden = int(sys.argv[6])
import nvmeio_torch
if op == "save":
    sd = gpt_state_dict(size, hidden, aligned=method == "nvmeio_aligned")
    start = time.perf_counter()
    if method.startswith("nvmeio"):
        nvmeio_torch.save(sd, path)
    else:
        torch.save(sd, path)
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    seconds = time.perf_counter() - start
else:
    start = time.perf_counter()
    sd = nvmeio_torch.load(path) if method.startswith("nvmeio") else torch.load(path)
    seconds = time.perf_counter() - start
    check(sd, size, hidden)
print(json.dumps({"seconds": seconds,
                  "bytes": sum(t.numel() * t.element_size() for t in sd.values())}))
"""


def gpt_shapes(size, hidden):
    """A GPT-2-style model's tensors, at least `size` bytes of them: (name, shape, dtype,
    bytes) with fp16 embeddings and weight matrices, fp32 layer norms and biases."""
    import torch

    half, single = torch.float16, torch.float32
    per_layer = [("ln_1.weight", (hidden,), single), ("ln_1.bias", (hidden,), single),
                 ("attn.c_attn.weight", (hidden, 3 * hidden), half),
                 ("attn.c_attn.bias", (3 * hidden,), single),
                 ("attn.c_proj.weight", (hidden, hidden), half),
                 ("attn.c_proj.bias", (hidden,), single),
                 ("ln_2.weight", (hidden,), single), ("ln_2.bias", (hidden,), single),
                 ("mlp.c_fc.weight", (hidden, 4 * hidden), half),
                 ("mlp.c_fc.bias", (4 * hidden,), single),
                 ("mlp.c_proj.weight", (4 * hidden, hidden), half),
                 ("mlp.c_proj.bias", (hidden,), single)]
    shapes = [("transformer.wte.weight", (50257, hidden), half),
              ("transformer.wpe.weight", (2048, hidden), half)]

    def nbytes(shape, dtype):
        n = 2 if dtype == half else 4
        for d in shape:
            n *= d
        return n

    total = sum(nbytes(s, d) for _, s, d in shapes)
    layer = 0
    while total < size:
        for name, shape, dtype in per_layer:
            shapes.append((f"transformer.h.{layer}.{name}", shape, dtype))
            total += nbytes(shape, dtype)
        layer += 1
    shapes += [("transformer.ln_f.weight", (hidden,), single),
               ("transformer.ln_f.bias", (hidden,), single)]
    return [(name, shape, dtype, nbytes(shape, dtype)) for name, shape, dtype in shapes]


def gpt_state_dict(size, hidden, aligned=False):
    """The state dict of gpt_shapes, each tensor filled with its index (mod 1000); with
    `aligned`, each tensor over its own page-aligned memory from nvmeio_torch."""
    import torch

    def tensor(shape, dtype, nbytes):
        if not aligned:
            return torch.empty(shape, dtype=dtype)
        from nvmeio_torch import _C
        return _C.aligned_tensor(nbytes).view(dtype).view(shape)

    return {name: tensor(shape, dtype, nbytes).fill_(float(i % 1000))
            for i, (name, shape, dtype, nbytes) in enumerate(gpt_shapes(size, hidden))}


def check(sd, size, hidden):
    """Every tensor is there and holds what gpt_state_dict put in it."""
    names = [name for name, _, _, _ in gpt_shapes(size, hidden)]
    if list(sd) != names:
        raise SystemExit("torch_checkpoint_compare: the loaded tensors' names differ")
    for i, (name, t) in enumerate(sd.items()):
        if not bool((t == float(i % 1000)).all()):
            raise SystemExit(f"torch_checkpoint_compare: {name} read back wrong")


def fio_run(fio, op, path, size, jobs=1):
    """fio writing (save) or reading (load) `size` bytes with O_DIRECT: one file at `path`, or
    with `jobs` > 1 that many jobs, each with its own file in the folder `path`."""
    where = [f"--filename={path}"] if jobs == 1 else \
        [f"--directory={path}", f"--numjobs={jobs}", "--group_reporting"]
    job = [fio, "--name=checkpoint", *where, f"--rw={'write' if op == 'save' else 'read'}",
           "--bs=1M", "--iodepth=32", "--ioengine=io_uring", "--direct=1",
           f"--size={size // jobs}", "--output-format=json"]
    if op == "save":
        job.append("--end_fsync=1")
    done = subprocess.run(job, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"fio failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0]
    side = result["write" if op == "save" else "read"]
    return {"seconds": side["io_bytes"] / side["bw_bytes"], "bytes": side["io_bytes"]}


def run(args, method, op, path, size):
    start = time.perf_counter()
    if method == "fio":
        result = fio_run(args.fio, op, path, size)
    else:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(os.path.abspath(args.build), "python") + \
            (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        done = subprocess.run([sys.executable, "-c", CHILD, method, op, path, str(size), HERE,
                               str(args.hidden)], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"torch_checkpoint_compare: {method} {op} failed:\n"
                             f"{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


def options(doc):
    """The options this benchmark and dcp_compare.py share, on a parser described by `doc`."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--size", type=size_arg, default="2G",
                   help="bytes of tensors, at least (K, M, G)")
    p.add_argument("--rounds", type=count_arg, default=5)
    p.add_argument("--hidden", type=count_arg, default=2048)
    p.add_argument("--build", default=os.path.join(ROOT, "build-test-g++-17"))
    p.add_argument("--fio", default="/usr/bin/fio")
    p.add_argument("--seed", type=int, default=1)
    return p


def main():
    p = options(__doc__)
    p.add_argument("--methods", nargs="+", choices=METHODS, default=["nvmeio", "torch", "fio"])
    args = p.parse_args()
    if not {"torch", "fio"} <= set(args.methods):
        p.error("--methods must include torch and fio, the references every ratio needs")
    if len(set(args.methods)) != len(args.methods):
        p.error("--methods names a method twice")
    size = args.size
    if not drop_caches():
        sys.exit("torch_checkpoint_compare: cannot drop the page cache (run as root); "
                 "no cold figures")
    os.makedirs(args.folder, exist_ok=True)
    rng = random.Random(args.seed)
    nbytes = sum(n for _, _, _, n in gpt_shapes(size, args.hidden))  # what fio moves too
    runs = []
    for round_ in range(args.rounds):
        order = list(args.methods)
        rng.shuffle(order)
        for method in order:
            path = os.path.join(args.folder, f"checkpoint.{method}")
            for op in ("save",) if method == "nvmeio_aligned" else ("save", "load"):
                if not drop_caches():
                    sys.exit("torch_checkpoint_compare: dropping the page cache failed")
                r = run(args, method, op, path, nbytes if method == "fio" else size)
                r.update(round=round_, method=method, op=op)
                runs.append(r)
                print(json.dumps(r), flush=True)
            os.remove(path)
    report(args, runs)


def report(args, runs):
    nbytes = runs[0]["bytes"]
    print(f"\ntorch_checkpoint_compare: {nbytes / GiB:.2f} GiB GPT-style state dict (hidden "
          f"{args.hidden}, fp16 weights, fp32 norms and biases), {args.rounds} rounds, folder "
          f"{args.folder}")
    print_table(runs, args.methods, "1 MiB blocks")


def print_table(runs, methods, fio_setup):
    """The machine, then per op and method the median rate and seconds, and the medians of the
    per-round ratios to torch's and fio's rates (with each round's)."""
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                   platform.processor())
    nbytes = runs[0]["bytes"]
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, kernel {platform.release()}; page cache "
          f"dropped before every run; fio: {fio_setup}, io_uring, depth 32, O_DIRECT "
          "(writes with end_fsync)")
    width = max(9, 1 + max(len(m) for m in methods))
    print(f"{'op':6}{'method':{width}}{'GiB/s':>8}{'seconds':>9}{'process s':>11}"
          f"{'x torch':>9}{'x fio':>8}   per-round x torch / x fio")
    for op in ("save", "load"):
        by = {m: {r["round"]: r for r in runs if r["op"] == op and r["method"] == m}
              for m in methods}
        for m in (m for m in methods if by[m]):
            seconds = statistics.median(r["seconds"] for r in by[m].values())
            process = statistics.median(r["process"] for r in by[m].values())
            rate = {i: r["bytes"] / r["seconds"] for i, r in by[m].items()}
            vs = {ref: median_ratio(rate, {i: r["bytes"] / r["seconds"]
                                           for i, r in by[ref].items()})
                  for ref in ("torch", "fio")}
            per_round = " ".join(
                f"{rate[i] / (by['torch'][i]['bytes'] / by['torch'][i]['seconds']):.2f}/"
                f"{rate[i] / (by['fio'][i]['bytes'] / by['fio'][i]['seconds']):.2f}"
                for i in sorted(rate))
            print(f"{op:6}{m:{width}}{nbytes / GiB / seconds:8.2f}{seconds:9.2f}{process:11.2f}"
                  f"{vs['torch']:9.2f}{vs['fio']:8.2f}   {per_round}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Loads of one tree's nvmeio_torch against another's (before and after a change), cold, in
fresh processes, interleaved A B A B ...: a sharded safetensors model through load_files, one
shard through safe_open.get_tensor of every tensor, a 2-shard stream under a cap, and a torch
format checkpoint through nvmeio_torch.load. Prints each run's load time (imports left out) and
the median per-round ratio A/B.

    ab_loads.py --a BUILD_A/python --b BUILD_B/python --folder DIR [--size 1G] [--rounds 7]
"""

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "support"))
from measure import count_arg, drop_caches, size_arg  # noqa: E402

MAKE = r"""
import os, sys, torch, nvmeio_torch, nvmeio_torch.safetensors as st
folder, size = sys.argv[1], int(sys.argv[2])
per = size // 16 // 4  # float32 elements per tensor: 4 shards of 4 tensors
g = torch.Generator().manual_seed(0)
model = {}
for s in range(4):
    part = {f"s{s}.t{k}": torch.randn(per, generator=g) for k in range(4)}
    st.save_file(part, os.path.join(folder, f"shard{s}.safetensors"))
    model.update(part)
nvmeio_torch.save(model, os.path.join(folder, "ckpt.pt"))
"""

LOAD = r"""
import glob, os, sys, time, torch, nvmeio_torch, nvmeio_torch.safetensors as st
job, folder = sys.argv[1], sys.argv[2]
shards = sorted(glob.glob(os.path.join(folder, "shard*.safetensors")))
start = time.perf_counter()
if job == "load_files":
    loaded = st.load_files(shards)
elif job == "safe_open":
    with st.safe_open(shards[0]) as f:
        loaded = {name: f.get_tensor(name) for name in f.keys()}
elif job == "stream":
    loaded = dict(st.stream(shards[:2], max_bytes=128 << 20))
else:
    loaded = nvmeio_torch.load(os.path.join(folder, "ckpt.pt"))
elapsed = time.perf_counter() - start
print(elapsed, sum(t.numel() * t.element_size() for t in loaded.values()))
"""


def run(python_path, job, folder):
    if not drop_caches():
        sys.exit("ab_loads: cannot drop the page cache (run as root): no cold figures")
    env = dict(os.environ, PYTHONPATH=python_path)
    out = subprocess.run([sys.executable, "-c", LOAD, job, folder], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="the python/ folder of build A (the change)")
    p.add_argument("--b", required=True, help="the python/ folder of build B (the baseline)")
    p.add_argument("--folder", required=True)
    p.add_argument("--size", type=size_arg, default=1 << 30)
    p.add_argument("--rounds", type=count_arg, default=7)
    args = p.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    subprocess.run([sys.executable, "-c", MAKE, args.folder, str(args.size)], check=True,
                   env=dict(os.environ, PYTHONPATH=args.b))
    print(f"# {args.size} bytes in 4 shards (and one .pt); {args.rounds} rounds, cold, A then B")
    for job in ("load_files", "safe_open", "stream", "torch_load"):
        times = {"A": [], "B": []}
        for _ in range(args.rounds):
            for name, path in (("A", args.a), ("B", args.b)):
                seconds, loaded = run(path, job, args.folder)
                times[name].append(seconds)
                print(f"{job} {name} {seconds:.4f} s {loaded} bytes", flush=True)
        ratios = [a / b for a, b in zip(times["A"], times["B"])]
        print(f"{job}: median A {statistics.median(times['A']):.4f} s, B "
              f"{statistics.median(times['B']):.4f} s, median A/B {statistics.median(ratios):.3f}"
              f" (min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""KV-cache blocks scattered over one file: one batch call (sync_pread_batch /
sync_pwrite_batch) against the same blocks as one handle call each (async_pread / async_pwrite,
then one wait(): DeepSpeed's way), on the same handle settings. Interleaved, each run a fresh
process, the page cache dropped before every run; GiB/s of the first call to the end of the
wait, medians and per-round ratios.

    bench/kv_batch_compare.py --folder DIR [--blocks 1024] [--block-size 64K,4K]
        [--rounds 7] [--build build-test-g++-17] [--backend io_uring]
"""

import argparse
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "support"))
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

CHILD = r"""
import os, random, sys, time, torch, nvmeio_torch
method, op, path, count, size, backend = sys.argv[1:7]
count, size = int(count), int(size)
slots = os.path.getsize(path) // size
offsets = [s * size for s in random.Random(1).sample(range(slots), count)]  # scattered blocks
blocks = [torch.full((size,), 7, dtype=torch.uint8) for _ in range(count)]  # as a KV cache holds them
h = nvmeio_torch.aio_handle(1 << 20, 32, False, True, 2, backend=backend)
start = time.perf_counter()
if method == "batch":
    call = h.sync_pread_batch if op == "read" else h.sync_pwrite_batch
    assert call(blocks, path, offsets) == 1
else:
    call = h.async_pread if op == "read" else h.async_pwrite
    for b, o in zip(blocks, offsets):
        assert call(b, path, o) == 0
    assert h.wait() == count
print(time.perf_counter() - start)
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build-test-g++-17"))
    p.add_argument("--blocks", type=count_arg, default=1024)
    p.add_argument("--block-size", type=lambda text: [size_arg(t) for t in text.split(",")],
                   default="64K,4K")
    p.add_argument("--rounds", type=count_arg, default=7)
    p.add_argument("--backend", default="io_uring")
    args = p.parse_args()
    if not drop_caches():
        sys.exit("kv_batch_compare: cannot drop the page cache (run as root); no cold figures")
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    os.makedirs(args.folder, exist_ok=True)
    print(f"{args.blocks} blocks per call, {args.backend}, handle (1 MiB, queue 32, overlapped, "
          f"P=2), {args.rounds} interleaved rounds, cold, fresh process per run; folder "
          f"{args.folder}")
    print("| block | op | one batch call GiB/s | one call per block GiB/s | ratio (median per round) |")
    print("|---|---|---:|---:|---:|")
    for size in args.block_size:
        path = os.path.join(args.folder, f"kv-{size}.bin")
        with open(path, "wb") as f:  # 8 slots per block moved: the blocks lie scattered
            f.truncate(8 * args.blocks * size)
        with open(path, "r+b") as f:
            f.write(os.urandom(8 * args.blocks * size))
        for op in ("read", "write"):
            rates = {"batch": {}, "calls": {}}
            for round_ in range(args.rounds):
                order = ["batch", "calls"]
                random.Random(round_).shuffle(order)
                for method in order:
                    drop_caches()
                    out = subprocess.run(
                        [sys.executable, "-c", CHILD, method, op, path, str(args.blocks),
                         str(size), args.backend],
                        env=env, check=True, capture_output=True, text=True).stdout
                    rates[method][round_] = args.blocks * size / float(out) / (1 << 30)
            print(f"| {size >> 10} KiB | {op} | {statistics.median(rates['batch'].values()):.2f} | "
                  f"{statistics.median(rates['calls'].values()):.2f} | "
                  f"{median_ratio(rates['batch'], rates['calls']):.2f}x |", flush=True)
        os.unlink(path)


if __name__ == "__main__":
    main()

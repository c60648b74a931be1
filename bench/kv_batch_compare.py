#!/usr/bin/env python3
"""KV-cache blocks scattered over one file, beside fio on the same pattern: N blocks at every
other block-sized slot of a file holding real data (fio's --rw=read:SIZE / write:SIZE), moved

  - by fio (bs = the block, iodepth 32, one job, direct, the backend's engine);
  - from Python: one sync_pread_batch / sync_pwrite_batch of ordinary torch tensors, and the same
    blocks as one async_pread / async_pwrite each and one wait() (DeepSpeed's way), on
    aio_handle(1 MiB, 32, False, True, 1);
  - from C++ (bench/kv_blocks): one read_batch / write_batch of blocks in one slab 64 bytes off
    the alignment (where torch puts a tensor) and 4 KiB-aligned, and one transfer per aligned
    block, on one context (1 MiB, queue 32).

Each run is a fresh process, the page cache dropped before it; a run makes --min-bytes of passes
over the blocks (fio: --loops) so that fio's millisecond clock measures it. Rounds interleave
the variants in a shuffled order; the table shows medians of GiB/s and of per-round ratios.

    bench/kv_batch_compare.py --folder DIR [--blocks 1024,8192] [--block-size 64K,4K]
        [--backend libaio,io_uring] [--rounds 5] [--min-bytes 256M] [--build build]
"""

import argparse
import json
import math
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
import sys, time, torch, nvmeio_torch
method, op, path, count, size, backend, loops = sys.argv[1:8]
count, size, loops = int(count), int(size), int(loops)
offsets = [2 * i * size for i in range(count)]  # every other slot
blocks = [torch.full((size,), 7, dtype=torch.uint8) for _ in range(count)]  # as a KV cache holds them
h = nvmeio_torch.aio_handle(1 << 20, 32, False, True, 1, backend=backend)
start = time.perf_counter()
for _ in range(loops):
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

VARIANTS = ("fio", "py batch", "py calls", "C++ batch", "C++ batch aligned", "C++ calls")


def seconds(variant, args, op, path, blocks, size, backend, loops):
    if variant == "fio":
        out = subprocess.run(
            [args.fio, "--name=kv", f"--filename={path}", f"--rw={op}:{size}", f"--bs={size}",
             "--iodepth=32", f"--ioengine={backend}", "--direct=1",
             f"--size={2 * blocks * size}", f"--io_size={blocks * size}", f"--loops={loops}",
             "--output-format=json"], check=True, capture_output=True, text=True).stdout
        job = json.loads(out)["jobs"][0][op]
        if job["io_bytes"] != loops * blocks * size:
            sys.exit(f"kv_batch_compare: fio moved {job['io_bytes']} bytes, not "
                     f"{loops * blocks * size}")
        return job["runtime"] / 1000
    if variant.startswith("py"):
        command = [sys.executable, "-c", CHILD, variant.split()[1], op, path, str(blocks),
                   str(size), backend, str(loops)]
        env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    else:
        command = [os.path.join(args.build, "bench", "kv_blocks"), "--file", path, "--op", op,
                   "--blocks", str(blocks), "--block-size", str(size), "--backend", backend,
                   "--loops", str(loops),
                   "--method", "calls" if variant == "C++ calls" else "batch",
                   "--memory", "unaligned" if variant == "C++ batch" else "aligned"]
        env = None
    return float(subprocess.run(command, env=env, check=True, capture_output=True,
                                text=True).stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--fio", default="fio")
    p.add_argument("--blocks", type=lambda t: [count_arg(x) for x in t.split(",")],
                   default="1024,8192")
    p.add_argument("--block-size", type=lambda t: [size_arg(x) for x in t.split(",")],
                   default="64K,4K")
    p.add_argument("--backend", type=lambda t: t.split(","), default="libaio,io_uring")
    p.add_argument("--rounds", type=count_arg, default=5)
    p.add_argument("--min-bytes", type=size_arg, default="256M")
    args = p.parse_args()
    if any(b not in ("libaio", "io_uring") for b in args.backend):
        p.error(f"--backend: {args.backend!r} names neither libaio nor io_uring")
    if not drop_caches():
        sys.exit("kv_batch_compare: cannot drop the page cache (run as root); no cold figures")
    os.makedirs(args.folder, exist_ok=True)
    print(f"every other slot of a file of real data; {args.rounds} interleaved rounds, cold, fresh "
          f"process per run, >= {args.min_bytes >> 20} MiB per run; folder {args.folder}")
    print("| backend | blocks | op | fio | py batch | py calls | C++ batch | C++ batch aligned "
          "| C++ calls | py batch/fio | py batch/calls | C++ batch/fio | C++ aligned/fio "
          "| C++ aligned/calls |")
    print("|---|---|---|" + "---:|" * 12)
    for size in args.block_size:
        for blocks in args.blocks:
            path = os.path.join(args.folder, f"kv-{size}.bin")
            with open(path, "wb") as f:  # real, allocated data
                for _ in range(2 * blocks):
                    f.write(os.urandom(size))
            loops = max(1, math.ceil(args.min_bytes / (blocks * size)))
            for backend in args.backend:
                for op in ("read", "write"):
                    rates = {v: {} for v in VARIANTS}
                    for round_ in range(args.rounds):
                        order = list(VARIANTS)
                        random.Random(round_).shuffle(order)
                        for v in order:
                            drop_caches()
                            t = seconds(v, args, op, path, blocks, size, backend, loops)
                            rates[v][round_] = loops * blocks * size / t / (1 << 30)
                    med = {v: statistics.median(rates[v].values()) for v in VARIANTS}
                    ratio = lambda a, b: f"{median_ratio(rates[a], rates[b]):.2f}x"  # noqa: E731
                    print(f"| {backend} | {blocks} x {size >> 10} KiB | {op} | "
                          + " | ".join(f"{med[v]:.2f}" for v in VARIANTS) + " | "
                          + " | ".join([ratio("py batch", "fio"), ratio("py batch", "py calls"),
                                        ratio("C++ batch", "fio"),
                                        ratio("C++ batch aligned", "fio"),
                                        ratio("C++ batch aligned", "C++ calls")]) + " |",
                          flush=True)
            os.unlink(path)
    print("(GiB/s, medians; ratios: medians of per-round ratios)")


if __name__ == "__main__":
    main()

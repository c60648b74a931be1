#!/usr/bin/env python3
"""KV-cache blocks scattered over one file, beside fio on the same pattern: N blocks at every
other block-sized slot of a file holding real data (fio's --rw=read:SIZE / write:SIZE), moved

  - by fio (bs = the block, iodepth 32, one job, direct, the backend's engine);
  - from Python: one sync_pread_batch / sync_pwrite_batch of ordinary torch tensors, and the same
    blocks as one async_pread / async_pwrite each and one wait() (DeepSpeed's way), on
    aio_handle(1 MiB, 32, False, True, 1);
  - from C++ (bench/kv_blocks): one read_batch / write_batch of blocks in one slab 64 bytes off
    the alignment (where torch puts a tensor) and 4 KiB-aligned, and one transfer per aligned
    block, on one context (1 MiB, queue 32); with --baseline BUILD, the first of those from
    another build too ("C++ batch baseline": the same job before a change).

Destinations are touched (a KV pool in use: torch.full, a slab written before the clock starts)
or fresh (memory just made and never touched: torch.empty, a slab mapped anew for each pass);
--destination picks which, fio's buffers being its own either way. --variants picks the
variants (default: all but the baseline, which --baseline adds); --raw FILE keeps every run's
GiB/s as JSON lines.

Each run is a fresh process, the page cache dropped before it; a run makes --min-bytes of passes
over the blocks (fio: --loops) so that fio's millisecond clock measures it. Rounds interleave
the variants in a shuffled order; the table shows medians of GiB/s and of per-round ratios.

    bench/kv_batch_compare.py --folder DIR [--blocks 1024,8192] [--block-size 64K,4K]
        [--backend libaio,io_uring] [--destination touched,fresh] [--rounds 5]
        [--min-bytes 256M] [--build build] [--baseline BUILD] [--variants fio,C++ batch,...]
        [--raw FILE]
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
method, op, path, count, size, backend, loops, destination = sys.argv[1:9]
count, size, loops = int(count), int(size), int(loops)
offsets = [2 * i * size for i in range(count)]  # every other slot
def make():
    if destination == "fresh":  # memory just made, never touched
        return [torch.empty((size,), dtype=torch.uint8) for _ in range(count)]
    return [torch.full((size,), 7, dtype=torch.uint8) for _ in range(count)]  # a KV cache's
h = nvmeio_torch.aio_handle(1 << 20, 32, False, True, 1, backend=backend)
elapsed = 0.0
for _ in range(loops):
    blocks = make()
    start = time.perf_counter()
    if method == "batch":
        call = h.sync_pread_batch if op == "read" else h.sync_pwrite_batch
        assert call(blocks, path, offsets) == 1
    else:
        call = h.async_pread if op == "read" else h.async_pwrite
        for b, o in zip(blocks, offsets):
            assert call(b, path, o) == 0
        assert h.wait() == count
    elapsed += time.perf_counter() - start
    del blocks
print(elapsed)
"""

VARIANTS = ("fio", "py batch", "py calls", "C++ batch", "C++ batch aligned", "C++ calls",
            "C++ batch baseline")
# Ratios shown where both variants ran: (mine, reference).
RATIOS = (("py batch", "fio"), ("py batch", "py calls"), ("C++ batch", "fio"),
          ("C++ batch baseline", "fio"), ("C++ batch", "C++ batch baseline"),
          ("C++ batch", "C++ calls"), ("C++ batch aligned", "fio"),
          ("C++ batch aligned", "C++ calls"))


def seconds(variant, args, op, path, blocks, size, backend, loops, destination):
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
                   str(size), backend, str(loops), destination]
        env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    else:
        build = args.baseline if variant == "C++ batch baseline" else args.build
        command = [os.path.join(build, "bench", "kv_blocks"), "--file", path, "--op", op,
                   "--blocks", str(blocks), "--block-size", str(size), "--backend", backend,
                   "--loops", str(loops), "--destination", destination,
                   "--method", "calls" if variant == "C++ calls" else "batch",
                   "--memory", "aligned" if variant in ("C++ batch aligned", "C++ calls")
                   else "unaligned"]
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
    p.add_argument("--destination", type=lambda t: t.split(","), default="touched,fresh")
    p.add_argument("--baseline", help="another build whose C++ batch runs beside this one's")
    p.add_argument("--variants", type=lambda t: t.split(","))
    p.add_argument("--raw", help="append every run's GiB/s here, as JSON lines")
    p.add_argument("--rounds", type=count_arg, default=5)
    p.add_argument("--min-bytes", type=size_arg, default="256M")
    args = p.parse_args()
    if any(b not in ("libaio", "io_uring") for b in args.backend):
        p.error(f"--backend: {args.backend!r} names neither libaio nor io_uring")
    if any(d not in ("touched", "fresh") for d in args.destination):
        p.error(f"--destination: {args.destination!r} names neither touched nor fresh")
    variants = args.variants or [v for v in VARIANTS if v != "C++ batch baseline"
                                 or args.baseline]
    if any(v not in VARIANTS for v in variants):
        p.error(f"--variants: {variants!r} names one not in {VARIANTS!r}")
    if "C++ batch baseline" in variants and not args.baseline:
        p.error("--variants: 'C++ batch baseline' needs --baseline")
    if not drop_caches():
        sys.exit("kv_batch_compare: cannot drop the page cache (run as root); no cold figures")
    os.makedirs(args.folder, exist_ok=True)
    ratios = [r for r in RATIOS if r[0] in variants and r[1] in variants]
    print(f"every other slot of a file of real data; {args.rounds} interleaved rounds, cold, fresh "
          f"process per run, >= {args.min_bytes >> 20} MiB per run; folder {args.folder}; "
          f"build {args.build}" + (f", baseline {args.baseline}" if args.baseline else ""))
    print("| backend | blocks | op | destination | " + " | ".join(variants) + " | "
          + " | ".join(f"{a}/{b}" for a, b in ratios) + " |")
    print("|---|---|---|---|" + "---:|" * (len(variants) + len(ratios)))
    raw = open(args.raw, "a") if args.raw else None
    for size in args.block_size:
        for blocks in args.blocks:
            path = os.path.join(args.folder, f"kv-{size}.bin")
            with open(path, "wb") as f:  # real, allocated data
                for _ in range(2 * blocks):
                    f.write(os.urandom(size))
            loops = max(1, math.ceil(args.min_bytes / (blocks * size)))
            for backend in args.backend:
                for op in ("read", "write"):
                    for destination in args.destination:
                        rates = {v: {} for v in variants}
                        for round_ in range(args.rounds):
                            order = list(variants)
                            random.Random(round_).shuffle(order)
                            for v in order:
                                drop_caches()
                                t = seconds(v, args, op, path, blocks, size, backend, loops,
                                            destination)
                                rates[v][round_] = loops * blocks * size / t / (1 << 30)
                                if raw:
                                    raw.write(json.dumps({
                                        "backend": backend, "blocks": blocks, "size": size,
                                        "op": op, "destination": destination, "round": round_,
                                        "variant": v, "loops": loops, "seconds": t,
                                        "gib_s": rates[v][round_]}) + "\n")
                                    raw.flush()
                        med = {v: statistics.median(rates[v].values()) for v in variants}
                        print(f"| {backend} | {blocks} x {size >> 10} KiB | {op} | {destination} | "
                              + " | ".join(f"{med[v]:.2f}" for v in variants) + " | "
                              + " | ".join(f"{median_ratio(rates[a], rates[b]):.2f}x"
                                           for a, b in ratios) + " |", flush=True)
            os.unlink(path)
    print("(GiB/s, medians; ratios: medians of per-round ratios)")


if __name__ == "__main__":
    main()

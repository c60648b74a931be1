#!/usr/bin/env python3
"""The GPU's staged pipeline measured without a GPU: a whole file through a staging ring to a
simulated link (bench/staged_link.cpp, support/simulated_link.hpp), read and written, beside fio
reading and writing the same file (O_DIRECT, libaio, 1 MiB x 32, a write ending in fsync as the
staged write does), cold, in interleaved rounds (A B A B ...), with the link at 0.5x, 1x and 2x
the rate fio reached on the disk. Each staged job runs with an async context (several windows'
I/O in flight) and with an aio context (one window at a time: the pipeline before). Prints one
table of medians: GB/s, the ratio to min(fio, link), and the peak RSS growth.

    bench/staged_link_compare.py --build build --file /nvme/link.bin [--size 4G] [--rounds 3]

Needs root (to drop the page cache before every run) and fio.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fio(path, op, size):
    drop_caches()
    command = ["fio", "--name=link", f"--filename={path}", f"--rw={op}", "--bs=1M",
               "--iodepth=32", "--ioengine=libaio", "--direct=1", f"--size={size}",
               "--output-format=json"] + (["--end_fsync=1"] if op == "write" else [])
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    # elapsed time of the whole job (its fsync included), from fio's own clock
    return size / (job["job_runtime"] / 1000.0) / 1e9


def staged(args, op, context, rate):
    drop_caches()
    command = [os.path.join(args.build, "bench", "staged_link"), "--file", args.file,
               "--op", op, "--context", context, "--link-rate", str(rate),
               "--stand-in", str(args.stand_in), "--slots", str(args.slots),
               "--slot-size", str(args.ring // args.slots), "--threads", str(args.threads)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    fields = dict(line.split() for line in out.splitlines() if line.strip())
    return int(fields["bytes"]) / float(fields["seconds"]) / 1e9, float(fields["rss_growth_mib"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="a build tree with bench/staged_link")
    parser.add_argument("--file", required=True, help="the file (made when missing)")
    parser.add_argument("--size", type=size_arg, default=4 << 30)
    parser.add_argument("--ring", type=size_arg, default=256 << 20)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--stand-in", type=size_arg, default=256 << 20)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--factors", default="0.5,1,2", help="link rates, as fractions of fio's")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("staged_link_compare: needs root, to drop the page cache before every run")
    if not os.path.exists(args.file) or os.path.getsize(args.file) != args.size:
        with open(args.file, "wb") as f:
            chunk = os.urandom(64 << 20)
            for _ in range(args.size // len(chunk)):
                f.write(chunk)
            f.write(chunk[:args.size % len(chunk)])
    factors = [float(x) for x in args.factors.split(",")]
    base = {op: fio(args.file, op, args.size) for op in ("read", "write")}
    print(f"fio before the rounds: read {base['read']:.2f} GB/s, write {base['write']:.2f} GB/s",
          flush=True)
    results = {}  # (op, what) -> [GB/s]
    rss = {}
    for r in range(args.rounds):
        for op in ("read", "write"):
            jobs = [("fio", None, None)] + [(context, f, base[op] * f * 1e9)
                                             for f in factors for context in ("async", "aio")]
            if r % 2:
                jobs.reverse()
            for context, factor, rate in jobs:
                if context == "fio":
                    got = fio(args.file, op, args.size)
                else:
                    got, grown = staged(args, op, context, rate)
                    rss[(op, context, factor)] = max(rss.get((op, context, factor), 0), grown)
                results.setdefault((op, context, factor), []).append(got)
                print(f"round {r} {op} {context} x{factor}: {got:.3f} GB/s", flush=True)
    print()
    print(f"{args.size / (1 << 30):.2f} GiB file, ring {args.ring >> 20} MiB in {args.slots} "
          f"slots, stand-in {args.stand_in >> 20} MiB, {args.threads} async workers, "
          f"{args.rounds} rounds, medians")
    print("| op | link | fio GB/s | link GB/s | async GB/s | async / min(fio, link) | "
          "aio (one window) GB/s | aio / min | peak RSS growth MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in ("read", "write"):
        fio_rate = statistics.median(results[(op, "fio", None)])
        for f in factors:
            link = base[op] * f
            bound = min(fio_rate, link)
            a = statistics.median(results[(op, "async", f)])
            b = statistics.median(results[(op, "aio", f)])
            print(f"| {op} | {f}x fio | {fio_rate:.2f} | {link:.2f} | {a:.2f} | {a / bound:.2f} | "
                  f"{b:.2f} | {b / bound:.2f} | {rss[(op, 'async', f)]:.0f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How fast this machine copies memory with one thread and with two at once: what bounds a save
that must copy every byte into aligned memory while the device (on the RAM-backed loop device, a
kernel thread's memcpy) copies it again.

Each thread copies its own 1 GiB tensor into another, already faulted in, with torch's copy_
(which releases the GIL), in interleaved rounds; prints each round and the medians of the
aggregate rate (bytes copied by all threads per second).

    bench/copy_bandwidth.py [--rounds 7] [--size-mib 1024]
"""

import argparse
import statistics
import threading
import time

import torch


def copy_rate(pairs):
    """GB/s copied by one thread per (destination, source) pair, all at once."""
    threads = [threading.Thread(target=lambda d=d, s=s: d.copy_(s)) for d, s in pairs]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return sum(s.numel() for _, s in pairs) / seconds / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--size-mib", type=int, default=1024)
    args = p.parse_args()
    n = args.size_mib << 20
    pairs = [(torch.ones(n, dtype=torch.uint8), torch.ones(n, dtype=torch.uint8))
             for _ in range(2)]
    torch.set_num_threads(1)  # one thread per copy_: the threads here are the parallelism
    rates = {1: [], 2: []}
    for r in range(args.rounds):
        for threads in (1, 2):
            rates[threads].append(copy_rate(pairs[:threads]))
        print(f"round {r}: 1 thread {rates[1][-1]:.1f} GB/s, 2 threads {rates[2][-1]:.1f} GB/s")
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(f"copy_bandwidth: {args.size_mib} MiB per thread, {args.rounds} rounds; medians: "
          f"1 thread {one:.1f} GB/s, 2 threads {two:.1f} GB/s in all ({two / one:.2f}x)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The before/after table of docs/perf/kv_populate.md from kv_batch_compare.py --raw lines:
per job, fio's median GiB/s and the medians of per-round ratios of the C++ batch before
("C++ batch baseline") and after the change against fio, after against before, the batch against
one transfer per block, and the aligned batch (no copy) against fio.

    table.py raw.jsonl
"""

import collections
import json
import statistics
import sys


def main():
    rates = collections.defaultdict(dict)  # job -> variant -> round -> GiB/s
    for line in open(sys.argv[1]):
        r = json.loads(line)
        job = (r["size"], r["blocks"], r["backend"], r["op"], r["destination"])
        rates[job].setdefault(r["variant"], {})[r["round"]] = r["gib_s"]

    def ratio(job, a, b):
        x, y = rates[job].get(a, {}), rates[job].get(b, {})
        values = [x[k] / y[k] for k in x if k in y and y[k] > 0]
        return f"{statistics.median(values):.2f}" if values else "-"

    print("| block | blocks | backend | op | destination | fio GiB/s | before / fio "
          "| after / fio | after / before | batch / calls | aligned / fio |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|")
    order = sorted(rates, key=lambda j: (-j[0], j[1], j[2], j[3], j[4] != "touched"))
    for job in order:
        size, blocks, backend, op, destination = job
        fio = statistics.median(rates[job]["fio"].values())
        print(f"| {size >> 10} KiB | {blocks:,} | {backend} | {op} | {destination} | {fio:.2f} | "
              f"{ratio(job, 'C++ batch baseline', 'fio')} | **{ratio(job, 'C++ batch', 'fio')}** | "
              f"{ratio(job, 'C++ batch', 'C++ batch baseline')} | "
              f"{ratio(job, 'C++ batch', 'C++ calls')} | {ratio(job, 'C++ batch aligned', 'fio')} |")


if __name__ == "__main__":
    main()

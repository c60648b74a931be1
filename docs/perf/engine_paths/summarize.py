#!/usr/bin/env python3
"""Per point: the medians of the old and new builds' rates and CPU per GiB over the repeats,
and the median, min and max of the per-repeat ratios new/old (each repeat ran old and new
back to back). Reads run.sh's output (RUNS.jsonl) or the CSV written with --csv; --round R[,R...]
takes only those rounds' rows of a CSV (runs.csv: 1 is the 2-core VM; 16core, 16core2 and
16core3 are runs on three lent 16-core machines; vm64k io_uring at 64 KiB alone on the VM). Usage: summarize.py RUNS.jsonl... | runs.csv [--round R] [--csv OUT.csv]"""
import json
import statistics
import sys

rows = []  # (round, repeat, build, backend, op, block, depth, GB/s, CPU s/GiB)
args = sys.argv[1:]
csv_out = only_round = None
if "--round" in args:
    only_round = args.pop(args.index("--round") + 1)
    args.remove("--round")
if "--csv" in args:
    csv_out = args[args.index("--csv") + 1]
    args = args[:args.index("--csv")]
for path in args:
    text = open(path).read()
    if path.endswith(".csv"):
        for line in text.splitlines()[1:]:
            f = line.split(",")
            if only_round is not None and f[0] not in only_round.split(","):
                continue
            rows.append((f[0], int(f[1]), f[2], f[3], f[4], f[5], int(f[6]), float(f[7]), float(f[8])))
        continue
    decoder, at = json.JSONDecoder(), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            break
        r, at = decoder.raw_decode(text, at)
        rows.append((path, r["repeat"], r["build"], r["backend"], r["op"], r["block"], r["depth"],
                     r["run"]["gb_per_s"]["median"], r["run"]["cpu_seconds_per_gib"]["median"]))
if csv_out:
    with open(csv_out, "w") as out:
        out.write("round,repeat,build,backend,op,block,depth,gb_per_s,cpu_s_per_gib\n")
        rounds = sorted({r[0] for r in rows})
        for r in rows:
            out.write(",".join([str(rounds.index(r[0]) + 1)] + [str(x) for x in r[1:]]) + "\n")
points = {}
for rnd, repeat, build, backend, op, block, depth, rate, cpu in rows:
    points.setdefault((backend, op, block, depth), {}).setdefault((rnd, repeat), {})[build] = (
        rate, cpu)
print("| backend | op | block × depth | old GB/s, CPU s/GiB | new GB/s, CPU s/GiB | rate new/old: median (min–max) | CPU/GiB new/old: median (min–max) |")
print("|---|---|---|---|---|---|---|")
for key in sorted(points, key=lambda k: (k[0], k[1], -len(k[2]), k[2])):
    reps = [v for v in points[key].values() if "old" in v and "new" in v]
    med = lambda xs: statistics.median(xs)
    old_rate, new_rate = med([v["old"][0] for v in reps]), med([v["new"][0] for v in reps])
    old_cpu, new_cpu = med([v["old"][1] for v in reps]), med([v["new"][1] for v in reps])
    rate = [v["new"][0] / v["old"][0] for v in reps]
    cpu = [v["new"][1] / v["old"][1] for v in reps]
    print(f"| {key[0]} | {key[1]} | {key[2]} × {key[3]} | {old_rate:.2f}, {old_cpu:.4f} | "
          f"{new_rate:.2f}, {new_cpu:.4f} | {med(rate):.2f}× ({min(rate):.2f}–{max(rate):.2f}) | "
          f"{med(cpu):.2f}× ({min(cpu):.2f}–{max(cpu):.2f}) |")

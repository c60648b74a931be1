#!/usr/bin/env bash
# The measurements behind core_views.md (runs.txt), on ext4 over the RAM-backed device mounted at
# DIR. BEFORE and AFTER are build trees (bench/nvmeio-bench, bench/kv_blocks) of the two commits.
#   docs/perf/core_views/checks.sh band|band4k|kv DIR BEFORE AFTER
#  - band: nvmeio-bench at 12 points, 9 rounds (docs/perf/kv_batch/checks.sh band);
#  - band4k: the 4 KiB x 64 reads again, 15 rounds;
#  - kv: one batch of 1,024 x 64 KiB scattered blocks (kv_blocks), cold, 7 rounds of 4 passes,
#    staged (64 bytes off) and aligned memory, read and write; ratio = time before / time after.
#    `kv DIR BEFORE AFTER ROUNDS MEMORY:OP...` runs other rounds and points.
set -euo pipefail
what=$1 dir=$2 before=$3 after=$4
case $what in
band) exec "$(dirname "$0")/../kv_batch/checks.sh" band "$dir" "$before" "$after" ;;
band4k)
  dd if=/dev/urandom of="$dir/band.bin" bs=1M count=64 status=none
  python3 - "$dir/band.bin" "$before/bench/nvmeio-bench" "$after/bench/nvmeio-bench" <<'PY'
import json, random, statistics, subprocess, sys
f, old, new = sys.argv[1:4]
for backend in ("io_uring", "libaio"):
    rate, cpu, R = {}, {}, 15
    for r in range(R):
        order = [old, new]; random.Random(r).shuffle(order)
        for exe in order:
            j = json.loads(subprocess.run([exe, "-f", f, "-s", "64M", "-b", "4K", "-q", "64", "--op", "read",
                                           "--backend", backend, "-n", "3", "-w", "1", "--json"],
                                          check=True, capture_output=True, text=True).stdout)
            rate[exe, r] = j["gb_per_s"]["median"]; cpu[exe, r] = j["cpu_seconds_per_gib"]["median"]
    rr = [rate[new, r] / rate[old, r] for r in range(R)]
    cr = [cpu[new, r] / cpu[old, r] for r in range(R)]
    print(f"| {backend} | read | 4K x 64 | {statistics.median(rr):.3f} | {statistics.median(cr):.3f} | per-round ratios {' '.join(f'{x:.2f}' for x in rr)}")
PY
  rm -f "$dir/band.bin" ;;
kv)
  # Optionally: ROUNDS (default 7) and MEMORY:OP points (default all four), after the trees.
  rounds=${5:-7}
  shift $(($# < 5 ? $# : 5))
  points=("$@")
  [[ ${#points[@]} -gt 0 ]] || points=(unaligned:read unaligned:write aligned:read aligned:write)
  python3 -c "import os,sys; f=open(sys.argv[1],'wb'); [f.write(os.urandom(65536)) for _ in range(2048)]" "$dir/kv.bin"
  python3 - "$dir/kv.bin" "$before/bench/kv_blocks" "$after/bench/kv_blocks" "$rounds" "${points[@]}" <<'PY'
import random, statistics, subprocess, sys
path, old, new, R = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for point in sys.argv[5:]:
    memory, op = point.split(":")
    t = {}
    for r in range(R):
        order = [old, new]; random.Random(r).shuffle(order)
        for exe in order:
            subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
            out = subprocess.run([exe, "--file", path, "--op", op, "--memory", memory, "--blocks", "1024",
                                  "--block-size", "64K", "--loops", "4"], check=True, capture_output=True, text=True).stdout
            t[exe, r] = float(out.split()[0])
    rr = [t[old, r] / t[new, r] for r in range(R)]
    print(f"| batch {memory} | {op} | 1024 x 64 KiB | {statistics.median(rr):.3f} | per-round {' '.join(f'{x:.2f}' for x in rr)}", flush=True)
PY
  rm -f "$dir/kv.bin" ;;
esac

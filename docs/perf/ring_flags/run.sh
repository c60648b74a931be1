#!/usr/bin/env bash
# Ring setup flags, measured: A = today's (COOP_TASKRUN|TASKRUN_FLAG), B = SINGLE_ISSUER|DEFER_TASKRUN
# (ring enabled on the worker's first submit), C = B + registered ring fd. Interleaved, rotated.
# /tmp/exp-b0, -b1, -b2: nvmeio-bench built from scratch copies with the variants A, B, C of
# docs/perf/ring_flags.md (not committed).
set -euo pipefail
rounds=${1:-5}
declare -A bin=([A]=/tmp/exp-b0 [B]=/tmp/exp-b1 [C]=/tmp/exp-b2)
for ((r = 0; r < rounds; r++)); do
  for p in "4K 1 256M" "4K 64 1G" "64K 64 4G"; do
    read -r b q s <<< "$p"
    for op in read write; do
      methods=(A B C); 
      for ((i = 0; i < 3; i++)); do
        m=${methods[$(((i + r) % 3))]}
        out=$(${bin[$m]}/bench/nvmeio-bench -f /dev/loop0 -s $s -b $b -q $q --op $op --backend io_uring --pin-once off --allow-device-write -n 1 -w 1 --json)
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(sys.argv[2], d["gb_per_s"]["median"], d["cpu_seconds_per_gib"]["median"])' "$out" "$r ${b}x$q $op $m"
      done
    done
  done
done

#!/usr/bin/env bash
# Before/after the engine restructure on the RAM-backed device: nvmeio-bench of the build
# before (OLD) and after (NEW), interleaved per point (A B, then B A), fresh process per run.
# Usage: run.sh OLD_BENCH NEW_BENCH DEVICE REPEATS OUT.jsonl
set -euo pipefail
old=$1 new=$2 dev=$3 repeats=$4 out=$5
: > "$out"
points=("1M 32 1G" "64K 64 1G" "4K 64 1G")
# Real-time priority where the machine allows it (some VMs refuse SCHED_FIFO even to root).
prio=(chrt -f 50)
"${prio[@]}" true 2> /dev/null || { prio=(); echo "run.sh: chrt refused, normal priority" >&2; }
for r in $(seq 1 "$repeats"); do
  for backend in libaio io_uring; do
    for op in read write; do
      for p in "${points[@]}"; do
        read -r b q s <<< "$p"
        if (( r % 2 )); then order="old new"; else order="new old"; fi
        for which in $order; do
          bin=$old; [[ $which == new ]] && bin=$new
          json=$(${prio[@]+"${prio[@]}"} "$bin" -f "$dev" -s "$s" --op "$op" -b "$b" -q "$q" --backend "$backend" \
                 -p 1 -w 1 -n 4 --json --allow-device-write)
          printf '{"repeat":%d,"build":"%s","backend":"%s","op":"%s","block":"%s","depth":%d,"run":%s}\n' \
                 "$r" "$which" "$backend" "$op" "$b" "$q" "$json" >> "$out"
        done
      done
    done
  done
done

#!/usr/bin/env bash
# Depth 1 on the RAM-backed device: on which CPU the loop device's worker runs each request,
# nvmeio (N) against fio at its best (B: --fixedbufs --registerfiles), 64 KiB reads, io_uring.
# Per run, `perf sched record` the whole system, then count, for every wake-up of a kworker by the
# program (its submission), whether the kworker next runs on the CPU the program woke it from
# ("same") or on the other one, and the median time from that wake-up to the kworker running.
# Interleaved, the order alternating per round. Prints one line per run.
# $1: nvmeio-bench; $2: the device (scripts/ram_device.sh, filled with random bytes); $3: rounds.
set -euo pipefail
bench=$1 device=${2:-/dev/loop0} rounds=${3:-3} size=512M
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
placement() {  # PROGRAM-COMM < perf sched script
  python3 -c '
import re, statistics, sys
program, waker, since = sys.argv[1], None, 0.0
wake_to_run = {"same": [], "other": []}
for line in sys.stdin:
    m = re.match(r"\s*(\S+)\s+\d+\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):(.*)", line)
    if not m:
        continue
    comm, cpu, t, event, rest = m.groups()
    if event == "sched_waking" and comm.startswith(program) and "comm=kworker" in rest:
        waker, since = cpu, float(t)
    elif event == "sched_switch" and "next_comm=kworker" in rest and waker is not None:
        wake_to_run["same" if cpu == waker else "other"].append(float(t) - since)
        waker = None
same, other = wake_to_run["same"], wake_to_run["other"]
us = lambda l: "%.0f" % (statistics.median(l) * 1e6) if l else "-"
print("same-CPU %3.0f%%  wake->run same %s us, other %s us" %
      (100 * len(same) / max(1, len(same) + len(other)), us(same), us(other)), end="")
' "$1"
}
run() {  # N|B
  local out=$work/run.sched
  case $1 in
    N) perf sched record -q -o "$out" -- "$bench" -f "$device" -s $size -b 64K -q 1 --op read \
         --backend io_uring --ring --allow-device-write -n 1 -w 0 --json > "$work/out" 2> /dev/null
       rate=$(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["gb_per_s"]["median"])' "$work/out")
       comm=$(basename "$bench" | cut -c1-15) ;;  # the kernel keeps 15 characters of a name
    B) perf sched record -q -o "$out" -- fio --name=depth1 --filename="$device" --iodepth=1 \
         --direct=1 --ioengine=io_uring --thread --invalidate=0 --rw=read --bs=64K --size=$size \
         --fixedbufs --registerfiles --output-format=json > "$work/out" 2> /dev/null
       rate=$(python3 -c 'import json,sys; print("%.2f" % (json.load(open(sys.argv[1]))["jobs"][0]["read"]["bw_bytes"] / 1e9))' "$work/out")
       comm=fio ;;
  esac
  echo "$r $1 $(perf sched script -i "$out" 2> /dev/null | placement $comm)  $rate GB/s"
}
echo "# $(uname -r), $(nproc) cores, $(date -u '+%F %T') UTC, $rounds rounds, 64K x 1 reads of $size"
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then run N; run B; else run B; run N; fi
done

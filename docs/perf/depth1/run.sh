#!/usr/bin/env bash
# Depth 1 on the RAM-backed device: nvmeio (N) against fio's default (F) and fio at its best
# (B: --fixedbufs --registerfiles), io_uring, under three conditions:
#  quiet  - nothing else running (as nvmeio-tune --vs-fio measures);
#  tick   - beside a process that wakes every 10 ms and sleeps again (what fio's own main thread
#           does while its job runs), so both programs run on a machine with the same wake-ups;
#  cpu0   - both programs confined to CPU 0 (taskset), the loop device's worker free.
# Interleaved: per round, condition by condition, point by point, the three programs in an order
# rotated per round. Prints one line per run: round condition point op program GB/s.
# $1: nvmeio-bench; $2: the device (scripts/ram_device.sh, filled with random bytes).
set -euo pipefail
bench=$1 device=${2:-/dev/loop0} rounds=${3:-4}
fio_rate() {  # op, then fio's arguments
  local op=$1
  shift
  "${pin[@]}" fio --name=depth1 --filename="$device" --iodepth=1 --direct=1 --ioengine=io_uring --thread \
    --invalidate=0 --output-format=json "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j[sys.argv[1]]["bw_bytes"] / 1e9)' "$op"
}
pin=()
run() {  # PROGRAM CONDITION SIZE BLOCK OP
  pin=()
  [[ $2 == cpu0 ]] && pin=(taskset -c 0)
  case $1 in
    N) "${pin[@]}" "$bench" -f "$device" -s "$3" -b "$4" -q 1 --op "$5" --backend io_uring --ring \
         --allow-device-write -n 1 -w 0 --json |
         python3 -c 'import json,sys; print(json.load(sys.stdin)["gb_per_s"]["median"])' ;;
    F) fio_rate "$5" --rw="$5" --bs="$4" --size="$3" ;;
    B) fio_rate "$5" --rw="$5" --bs="$4" --size="$3" --fixedbufs \
         --registerfiles ;;
  esac
}
echo "# $(uname -r), $(nproc) cores, $(date -u '+%F %T') UTC, $rounds rounds"
for ((r = 0; r < rounds; r++)); do
  for condition in quiet tick cpu0; do
    ticker=
    if [[ $condition == tick ]]; then
      python3 -c 'import time
while True: time.sleep(0.01)' &
      ticker=$!
    fi
    for p in "4K read 512M" "4K write 512M" "64K read 2G" "64K write 2G"; do
      read -r b op s <<< "$p"
      programs=(N F B)
      for ((i = 0; i < 3; i++)); do
        m=${programs[$(((i + r) % 3))]}
        echo "$r $condition ${b}x1 $op $m $(run "$m" "$condition" "$s" "$b" "$op")"
      done
    done
    [[ -n $ticker ]] && kill "$ticker"
  done
done

#!/usr/bin/env bash
# The built ring setup, measured flag by flag: A = a plain ring (--single-issuer off:
# COOP_TASKRUN|TASKRUN_FLAG), S = SINGLE_ISSUER alone (what Linux 6.0 gets), D = SINGLE_ISSUER|
# DEFER_TASKRUN (the default on 6.1+). Interleaved, order rotated per round; pin once on in all.
# $1: nvmeio-bench built from main with one scratch line in detail::setup_ring that skips the
# DEFER_TASKRUN choice when SCRATCH_NO_DEFER is set (not committed), so S needs no other binary.
set -euo pipefail
bench=$1 device=${2:-/dev/loop0} rounds=${3:-5}
run() {  # METHOD SIZE BLOCK DEPTH OP
  local env=() flags=()
  case $1 in
    A) flags=(--single-issuer off) ;;
    S) env=(SCRATCH_NO_DEFER=1) ;;
    D) ;;
  esac
  env "${env[@]}" "$bench" -f "$device" -s "$2" -b "$3" -q "$4" --op "$5" --backend io_uring \
    "${flags[@]}" --allow-device-write -n 1 -w 1 --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gb_per_s"]["median"], d["cpu_seconds_per_gib"]["median"])'
}
echo "# $(uname -r), $(nproc) cores, $(date -u '+%F %T') UTC, $rounds rounds"
for ((r = 0; r < rounds; r++)); do
  for p in "4K 1 1G" "64K 1 2G" "64K 64 4G"; do
    read -r b q s <<< "$p"
    for op in read write; do
      methods=(A S D)
      for ((i = 0; i < 3; i++)); do
        m=${methods[$(((i + r) % 3))]}
        echo "$r ${b}x$q $op $m $(run "$m" "$s" "$b" "$q" "$op")"
      done
    done
  done
done

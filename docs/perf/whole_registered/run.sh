#!/usr/bin/env bash
# Registered memory in whole requests on a block device: nvmeio-bench before (B: requests cut
# to what the device takes whole, 512 KiB on the RAM device) and after (A: a buffer registered
# with the ring stays whole) against fio at its best (F: --fixedbufs --registerfiles), io_uring,
# --ring, one unmeasured and one measured pass, 4 GiB per run, the order rotated per round.
# Prints: round point op program GB/s CPU-s/GiB (nvmeio: its process during the pass; fio: its
# whole process less a run of one ring's bytes).
# $1: nvmeio-bench before, $2: after, $3: the device (filled with random bytes), $4: rounds.
# POINTS: BLOCKxDEPTH ... (default: 8Mx1 8Mx4 8Mx16 1Mx4 1Mx16).
set -euo pipefail
before=$1 after=$2 device=${3:-/dev/loop0} rounds=${4:-3}
points=${POINTS:-8Mx1 8Mx4 8Mx16 1Mx4 1Mx16}
nvmeio() {  # BINARY BLOCK DEPTH OP
  "$1" -f "$device" -s 4G -b "$2" -q "$3" --op "$4" --backend io_uring --ring --allow-device-write \
    -n 1 -w 1 --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gb_per_s"]["median"], d["cpu_seconds_per_gib"]["median"])'
}
fio_best() {  # BLOCK DEPTH OP: fio's whole process (io-wq workers included) less a run of one
  # ring's bytes (start-up and exit), per GiB, as nvmeio-tune --vs-fio takes it
  python3 - "$device" "$1" "$2" "$3" <<'PY'
import json, resource, subprocess, sys
device, block, depth, op = sys.argv[1:]
def run(size):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["fio", "--name=best", "--filename=" + device, "--rw=" + op, "--bs=" + block,
                          "--iodepth=" + depth, "--size=" + size, "--direct=1", "--ioengine=io_uring",
                          "--thread", "--invalidate=0", "--fixedbufs", "--registerfiles",
                          "--output-format=json"], check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out[out.index("{"):])["jobs"][0][op], cpu
units = {"K": 1 << 10, "M": 1 << 20}
ring = str(int(block[:-1]) * units[block[-1]] * int(depth))
side, cpu = run("4G")
_, start = run(ring)
print(side["bw_bytes"] / 1e9, (cpu - start) / (side["io_bytes"] / 2**30))
PY
}
echo "# $(uname -r), $(date -u '+%F %T') UTC, $rounds rounds"
for ((r = 0; r < rounds; r++)); do
  for p in $points; do
    b=${p%x*} q=${p#*x}
    for op in read write; do
      programs=(B A F)
      for ((i = 0; i < 3; i++)); do
        m=${programs[$(((i + r) % 3))]}
        case $m in
          B) out=$(nvmeio "$before" "$b" "$q" "$op") ;;
          A) out=$(nvmeio "$after" "$b" "$q" "$op") ;;
          F) out=$(fio_best "$b" "$q" "$op") ;;
        esac
        echo "$r ${b}x$q $op $m $out"
      done
    done
  done
done

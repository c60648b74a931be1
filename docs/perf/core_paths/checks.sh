#!/usr/bin/env bash
# The measurements behind core_paths.md (runs.txt), on ext4 over the RAM-backed device mounted at
# DIR. BEFORE and AFTER are build trees (bench/nvmeio-bench, bench/kv_blocks) of the two commits.
#   docs/perf/core_paths/checks.sh band|kv DIR BEFORE AFTER
#   docs/perf/core_paths/checks.sh points DIR BEFORE AFTER ROUNDS BACKEND:OP:BLOCK[:DEPTH]...
#   docs/perf/core_paths/checks.sh kvpoints DIR BEFORE AFTER ROUNDS MEMORY:OP...
#   docs/perf/core_paths/checks.sh size - TREE VARIANT   (source trees: the include/ of each)
#  - band: nvmeio-bench at 12 points, 9 rounds; kv: kv_blocks, 7 rounds (core_views/checks.sh);
#  - points: the given points again (queue depth 64 unless given, 64 MiB file), ROUNDS rounds, the order of
#    the two shuffled per round; medians of the per-round ratios after/before;
#  - kvpoints: core_views/checks.sh kv with ROUNDS rounds at the given memory (unaligned,
#    aligned) and op; ratio = time before / time after;
#  - size: text bytes of a program making one read with a policy and with a transfer_config,
#    against each tree's headers (g++ -O2), and how many engine loops each links.
# For the policy question, BEFORE is a tree whose engine reads the strategy at run time (one
# loop) and AFTER the same commit as it is (a loop per policy).
set -euo pipefail
what=$1 dir=$2 before=$3 after=$4  # size: dir is unused, before/after are source trees
here=$(dirname "$0")
case $what in
band | kv) exec "$here/../core_views/checks.sh" "$what" "$dir" "$before" "$after" ;;
points)
  rounds=$5
  shift 5
  dd if=/dev/urandom of="$dir/points.bin" bs=1M count=64 status=none
  python3 - "$dir/points.bin" "$before/bench/nvmeio-bench" "$after/bench/nvmeio-bench" "$rounds" "$@" <<'PY'
import json, random, statistics, subprocess, sys
f, old, new, R = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for point in sys.argv[5:]:
    backend, op, block, depth = (point + ":64").split(":")[:4]
    rate, cpu = {}, {}
    for r in range(R):
        order = [old, new]; random.Random(r).shuffle(order)
        for exe in order:
            j = json.loads(subprocess.run([exe, "-f", f, "-s", "64M", "-b", block, "-q", depth, "--op", op,
                                           "--backend", backend, "-n", "3", "-w", "1", "--json"],
                                          check=True, capture_output=True, text=True).stdout)
            rate[exe, r] = j["gb_per_s"]["median"]; cpu[exe, r] = j["cpu_seconds_per_gib"]["median"]
    rr = [rate[new, r] / rate[old, r] for r in range(R)]
    cr = [cpu[new, r] / cpu[old, r] for r in range(R)]
    print(f"| {backend} | {op} | {block} x {depth} | {statistics.median(rr):.3f} | {statistics.median(cr):.3f} | per-round rate ratios {' '.join(f'{x:.2f}' for x in rr)}; CPU {' '.join(f'{x:.2f}' for x in cr)}", flush=True)
PY
  rm -f "$dir/points.bin" ;;
kvpoints) shift 4; exec "$here/../core_views/checks.sh" kv "$dir" "$before" "$after" "$@" ;;
size)
  probe=$(mktemp -d)
  trap 'rm -rf "$probe"' EXIT
  for form in "policy nvmeio::overlapped{}" "config nvmeio::transfer_config{}"; do
    set -- $form
    cat >"$probe/$1.cpp" <<CPP
#include <nvmeio/nvmeio.hpp>
int main(int argc, char** argv) {
    nvmeio::file f(argv[1], nvmeio::open_mode::read);
    nvmeio::aligned_buffer buf(1 << 20);
    nvmeio::basic_aio_context<nvmeio::io_uring_backend> ctx;
    return static_cast<int>(nvmeio::read(ctx, f, buf, 0, $2).bytes != buf.size() + argc);
}
CPP
    for tree in "$before" "$after"; do
      out="$probe/$1-$(basename "$tree")"
      g++ -std=c++17 -O2 -DNDEBUG -I"$tree/include" "$probe/$1.cpp" -o "$out" -luring -laio
      echo "$1 form, $(basename "$tree"): text $(size -A "$out" | awk '$1 == ".text" {print $2}') bytes, engine loops $(nm -C "$out" | grep -c 'engine<.*>::run')"
    done
  done ;;
*) echo "usage: $0 band|kv|points|kvpoints|size DIR BEFORE AFTER [ROUNDS POINT...]" >&2; exit 2 ;;
esac

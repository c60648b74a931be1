#!/usr/bin/env bash
# The measurement behind core_paths.md, "One mechanism for unaligned edges" (edges_and_tails_runs.txt):
# edges_bench.cpp built -O2 against BEFORE/include and AFTER/include (two source trees), run on a
# file in DIR (any filesystem that takes O_DIRECT; no RAM device needed), interleaved in a
# shuffled order per round; medians of wall and CPU (user + system) seconds of each, and of the
# per-round ratios before / after (above 1: after is faster).
#   docs/perf/core_paths/edges.sh DIR BEFORE AFTER [ROUNDS [MEMORY:OP...]]
# (BEFORE and AFTER the same tree: an A/A run, the noise band.)
set -euo pipefail
dir=$1 before=$2 after=$3 rounds=${4:-9}
shift $(($# < 4 ? $# : 4))
here=$(cd "$(dirname "$0")" && pwd)
for tree in before after; do
  src=${!tree}
  g++ -std=c++17 -O2 -DNDEBUG -DNVMEIO_HAS_IO_URING=0 -DNVMEIO_NO_XSIMD -I"$src/include" \
    "$here/edges_bench.cpp" -o "$dir/edges_$tree" -laio -lpthread -ldl
done
# 1,024 requests of 64 KiB + 100 bytes every 128 KiB: each its own group, each with a ragged tail.
/usr/bin/python3 -c "import os,sys; f=open(sys.argv[1],'wb'); [f.write(os.urandom(1<<20)) for _ in range(136)]" "$dir/edges.bin"
echo "machine: $(nproc) cores, $(uname -r); file: $dir/edges.bin ($(df -T "$dir" | awk 'NR==2{print $2}')), 136 MiB, O_DIRECT"
echo "requests: 1024 x (65536 + 100) bytes at a 131072 stride, libaio, queue depth 32, 1 MiB blocks, 4 passes per run"
echo "write/read: one batch a pass; write_at/read_at: file::write_at/read_at per request; twrite/tread: a transfer per request"
/usr/bin/python3 - "$dir/edges.bin" "$dir/edges_before" "$dir/edges_after" "$rounds" "$@" <<'PY'
import random, resource, statistics, subprocess, sys
path, old, new, R = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
print("| memory | op | wall before (s) | wall after (s) | wall ratio | CPU before (s) | CPU after (s) | CPU ratio | per-round wall ratios |")
print("|---|---|---|---|---|---|---|---|---|")
points = [tuple(p.split(":")) for p in sys.argv[5:]] or [
    ("aligned", "write"), ("aligned", "read"), ("unaligned", "write"), ("unaligned", "read"),
    ("unaligned", "write_at"), ("unaligned", "read_at"), ("aligned", "twrite"), ("aligned", "tread")]
for memory, op in points:
    t, c = {}, {}
    for r in range(R):
        order = [old, new]; random.Random(r).shuffle(order)
        for exe in order:
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([exe, path, op, memory, "1024", str(65536 + 100), "131072", "4"],
                                 check=True, capture_output=True, text=True).stdout
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            t[exe, r] = float(out.split()[0])
            c[exe, r] = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    med = lambda d, exe: statistics.median(d[exe, r] for r in range(R))
    rr = [t[old, r] / t[new, r] for r in range(R)]
    cr = [c[old, r] / c[new, r] for r in range(R)]
    print(f"| {memory} | {op} | {med(t, old):.4f} | {med(t, new):.4f} | {statistics.median(rr):.3f} "
          f"| {med(c, old):.4f} | {med(c, new):.4f} | {statistics.median(cr):.3f} "
          f"| {' '.join(f'{x:.2f}' for x in rr)}", flush=True)
PY
rm -f "$dir/edges.bin" "$dir/edges_before" "$dir/edges_after"

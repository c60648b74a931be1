#!/usr/bin/env bash
# The comparator against memcmp in three builds (the default x86-64 target, -mavx2,
# -march=native) at sizes from 4 KiB to 1 GiB: compare_bench once per build and pair of sizes,
# the builds one after the other for each pair. Run from the source tree; prints compare_bench's
# tables. $1: rounds (default 11).
set -euo pipefail
rounds=${1:-11}
out=$(mktemp -d)
for build in "default:" "avx2:-mavx2" "native:-march=native"; do
  g++ -std=c++17 -O2 ${build#*:} -Iinclude -I. bench/compare_bench.cpp -o "$out/${build%%:*}"
done
echo "# $(date -u '+%F %T') UTC, g++ -O2, $rounds rounds"
for sizes in "1G 4K" "256M 16K" "64M 64K" "16M 1M" "4M 512K"; do
  read -r large small <<< "$sizes"
  for build in default avx2 native; do
    echo "## $build, --size $large --small-size $small"
    "$out/$build" --rounds "$rounds" --size "$large" --small-size "$small" | sed -n '/bytes per buffer/,$p'
  done
done
rm -rf "$out"

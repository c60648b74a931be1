#!/usr/bin/env bash
# What a user's first load costs: one cold read of FILE into a buffer, each as a whole process
# under /usr/bin/time (wall, user, system), interleaved round by round:
#   nvmeio-bench into a fresh buffer (its pages faulted in by the load), huge pages off / on;
#   nvmeio-bench into a buffer it touches first (the tools' steady state), huge pages off / on;
#   fio at the same block size, depth and engine (its own small buffer, bs x depth).
# The page cache is dropped before every run. Prints one line per run and the medians.
# Usage (root): bench/first_load.sh BUILD_DIR FILE [ROUNDS] [BLOCK] [DEPTH] [BACKEND]
set -euo pipefail
build=$1 file=$2 rounds=${3:-5} block=${4:-1M} depth=${5:-32} backend=${6:-libaio}
bench="$build/bench/nvmeio-bench"
size=$(stat -L -c %s "$file")
common=(-f "$file" --op read -b "$block" -q "$depth" --backend "$backend" -n 1 -w 0)
declare -A commands=(
  [fresh_4k]="$bench ${common[*]} --fresh-buffer --huge-pages off"
  [fresh_huge]="$bench ${common[*]} --fresh-buffer --huge-pages on"
  [touched_4k]="$bench ${common[*]} --huge-pages off"
  [touched_huge]="$bench ${common[*]} --huge-pages on"
  [fio]="fio --name=first-load --filename=$file --rw=read --bs=$block --iodepth=$depth --size=$size --direct=1 --ioengine=$backend --invalidate=0 --output=/dev/null"
)
order=(fresh_4k fresh_huge touched_4k touched_huge fio)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "first_load: $file, $size bytes, block $block, depth $depth, $backend, $rounds rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 0; round < rounds; round++)); do
  # Rotate who goes first, so no method always follows the same one.
  for ((i = 0; i < ${#order[@]}; i++)); do
    name=${order[$(((i + round) % ${#order[@]}))]}
    sync; echo 1 > /proc/sys/vm/drop_caches
    # shellcheck disable=SC2086
    /usr/bin/time -f "$name %e %U %S" -a -o "$results" ${commands[$name]} > /dev/null
    tail -n 1 "$results"
  done
done
echo "median over $rounds rounds (seconds): method wall user system user+system"
for name in "${order[@]}"; do
  awk -v n="$name" '$1 == n {print $2, $3, $4}' "$results" | sort -n -k1 | awk -v n="$name" '
    {w[NR] = $1; u[NR] = $2; s[NR] = $3; c[NR] = $2 + $3}
    function median(a, k, i, j, t) {  # insertion sort of a copy, then the middle
      for (i = 1; i <= k; i++) b[i] = a[i]
      for (i = 2; i <= k; i++) for (j = i; j > 1 && b[j - 1] > b[j]; j--) {t = b[j]; b[j] = b[j - 1]; b[j - 1] = t}
      return k % 2 ? b[(k + 1) / 2] : (b[k / 2] + b[k / 2 + 1]) / 2
    }
    END {printf "%-13s %6.2f %6.2f %6.2f %6.2f\n", n, median(w, NR), median(u, NR), median(s, NR), median(c, NR)}'
done

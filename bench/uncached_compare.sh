#!/usr/bin/env bash
# O_DIRECT, buffered and uncached (RWF_DONTCACHE) side by side on one file: a cold load (read)
# and a dump (write, ending with fdatasync for the modes that are not O_DIRECT) of FILE's first
# SIZE bytes by nvmeio-bench, each followed by what the file left in the page cache (fincore)
# (the dump goes to fresh blocks, as into a new file: the range is punched out first, since
# ext4 on Linux 6.18 keeps uncached pages that overwrite written blocks; see docs/perf/uncached.md)
# and how the system's "Cached" figure moved (/proc/meminfo). Interleaved: every round runs the
# three modes in a rotated order; the page cache is dropped before every run. Prints one line
# per run and the medians.
# Usage (root): bench/uncached_compare.sh BUILD_DIR FILE SIZE [ROUNDS] [BLOCK] [DEPTH] [BACKEND]
set -euo pipefail
build=$1 file=$2 size=$3 rounds=${4:-3} block=${5:-1M} depth=${6:-32} backend=${7:-libaio}
bench="$build/bench/nvmeio-bench"
modes=(on off uncached)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
cached_kib() { awk '/^Cached:/ { print $2 }' /proc/meminfo; }
echo "uncached_compare: $file, $size bytes, block $block, depth $depth, $backend, $rounds rounds," \
  "$(nproc) cores, $(free -g | awk '/^Mem:/ { print $2 }') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-9s %-6s %8s %10s %16s %16s\n' round mode op GB/s "CPU s/GiB" "file cached MiB" "Cached +MiB"
for ((round = 0; round < rounds; round++)); do
  for ((i = 0; i < ${#modes[@]}; i++)); do
    mode=${modes[$(((i + round) % ${#modes[@]}))]}
    for op in read write; do
      if [[ $op == write ]]; then fallocate --punch-hole --offset 0 --length "$size" "$file"; fi
      sync; echo 1 > /proc/sys/vm/drop_caches
      before=$(cached_kib)
      json=$("$bench" -f "$file" -s "$size" --op "$op" --direct "$mode" -b "$block" -q "$depth" \
        --backend "$backend" -n 1 -w 0 --json)
      after=$(cached_kib)
      resident=$(fincore --bytes --noheadings --output RES "$file" | tr -d ' ')
      read -r rate cpu < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gb_per_s"]["median"], d["cpu_seconds_per_gib"]["median"])' <<< "$json")
      line=$(printf '%-6s %-9s %-6s %8.3f %10.4f %16.1f %16.1f' "$round" "$mode" "$op" "$rate" "$cpu" \
        "$(echo "$resident / 1048576" | bc -l)" "$(echo "($after - $before) / 1024" | bc -l)")
      echo "$line"
      echo "$line" >> "$results"
    done
  done
done
echo "medians:"
for op in read write; do
  for mode in "${modes[@]}"; do
    awk -v m="$mode" -v o="$op" '$2 == m && $3 == o { r[n] = $4; c[n] = $5; f[n] = $6; k[n++] = $7 }
      function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2 }
      END { printf "%-9s %-6s GB/s %.3f  CPU s/GiB %.4f  file cached %.1f MiB  Cached %+.1f MiB\n", m, o, med(r, n), med(c, n), med(f, n), med(k, n) }' "$results"
  done
done

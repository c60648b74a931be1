#!/usr/bin/env bash
# What pinning once saves: nvmeio-bench on libaio, on io_uring with --pin-once off (every request
# pins its pages, as before) and on io_uring pinning once (the default), interleaved: every round
# runs the three in a rotated order at every point. Two costs per point:
#  - steady: the buffer reused (two unmeasured passes, the second of which pins it, then one
#    measured); GB/s and the process's CPU per GiB during the measured pass;
#  - first: a fresh buffer, one pass, the whole process timed from outside (wall and user+system
#    CPU, /usr/bin/time), as a program that loads once pays it.
# Prints one line per run and the medians per point and method, with ratios against libaio and
# against io_uring unpinned.
# Usage (root; DEVICE is written when --op write is among OPS, its bytes written back):
#   bench/pin_once_compare.sh BUILD_DIR DEVICE SIZE [ROUNDS] [POINTS] [OPS] [KINDS]
#   POINTS: space-separated BLOCKxDEPTH (default "4Kx1 4Kx64 64Kx64 1Mx32 8Mx16")
#   OPS: "read write" (default); KINDS: "steady first" (default)
#   EXTRA (environment): more nvmeio-bench flags for every run, such as "--huge-pages off"
set -euo pipefail
build=$1 device=$2 size=$3 rounds=${4:-5}
points=(${5:-4Kx1 4Kx64 64Kx64 1Mx32 8Mx16})
ops=(${6:-read write})
kinds=(${7:-steady first})
bench="$build/bench/nvmeio-bench"
methods=(libaio uring-unpinned uring-pinned)
results=$(mktemp)
trap 'rm -f "$results"' EXIT
flags_of() {  # METHOD
  case $1 in
    libaio) echo "--backend libaio" ;;
    uring-unpinned) echo "--backend io_uring --pin-once off" ;;
    uring-pinned) echo "--backend io_uring --pin-once on" ;;
  esac
}
echo "pin_once_compare: $device, $size bytes per run, $rounds rounds, extra flags '${EXTRA:-}'," \
  "$(nproc) cores," \
  "$(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%F %T') UTC"
printf '%-5s %-6s %-9s %-6s %-15s %8s %10s %8s\n' round kind point op method GB/s "CPU s/GiB" wall_s
for ((round = 0; round < rounds; round++)); do
  for point in "${points[@]}"; do
    block=${point%x*} depth=${point#*x}
    for op in "${ops[@]}"; do
      for kind in "${kinds[@]}"; do
        for ((i = 0; i < ${#methods[@]}; i++)); do
          method=${methods[$(((i + round) % ${#methods[@]}))]}
          # shellcheck disable=SC2046
          args=(-f "$device" -s "$size" --op "$op" -b "$block" -q "$depth" $(flags_of "$method")
                --allow-device-write --json ${EXTRA:-})
          if [[ $kind == steady ]]; then
            json=$("$bench" "${args[@]}" -n 1 -w 2)
            read -r rate cpu < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gb_per_s"]["median"], d["cpu_seconds_per_gib"]["median"])' <<< "$json")
            wall=0
          else
            timing=$(mktemp)
            json=$(/usr/bin/time -f '%e %U %S' -o "$timing" "$bench" "${args[@]}" -n 1 -w 0 --fresh-buffer)
            read -r wall user system < "$timing"
            rm -f "$timing"
            rate=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gb_per_s"]["median"])' <<< "$json")
            cpu=$(echo "($user + $system) * 1073741824 / $(numfmt --from=iec "$size")" | bc -l)
          fi
          line=$(printf '%-5s %-6s %-9s %-6s %-15s %8.3f %10.4f %8.2f' "$round" "$kind" "$point" "$op" \
            "$method" "$rate" "$cpu" "$wall")
          echo "$line"
          echo "$line" >> "$results"
        done
      done
    done
  done
done
echo "medians (CPU: the measured pass's process CPU for steady, the whole process for first):"
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r, kind, point, op, method, rate, cpu, wall = line.split()
    rows.setdefault((kind, point, op), {}).setdefault(method, []).append((float(rate), float(cpu), float(wall)))
print(f"{'kind':6} {'point':9} {'op':6} {'method':15} {'GB/s':>7} {'CPU s/GiB':>10} {'wall s':>7}"
      f" {'rate/libaio':>11} {'CPU/libaio':>10} {'rate/unpin':>10} {'CPU/unpin':>9}")
for (kind, point, op), methods in rows.items():
    med = {m: [statistics.median(x[k] for x in v) for k in range(3)] for m, v in methods.items()}
    for m, (rate, cpu, wall) in med.items():
        ratios = []
        for base in ("libaio", "uring-unpinned"):
            b = med.get(base)
            ratios += [rate / b[0] if b and b[0] else 0, cpu / b[1] if b and b[1] else 0]
        print(f"{kind:6} {point:9} {op:6} {m:15} {rate:7.3f} {cpu:10.4f} {wall:7.2f}"
              f" {ratios[0]:10.2f}x {ratios[1]:9.2f}x {ratios[2]:9.2f}x {ratios[3]:8.2f}x")
EOF

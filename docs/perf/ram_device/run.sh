#!/usr/bin/env bash
# The grid on the RAM-backed device against both fio setups (sweep.sh says how), 3 repeats.
# 4 KiB blocks move 1 GiB per run (4 GiB at depth 1 would take 40 s a run), the others 4 GiB.
# Then summarize.py prints the table of docs/perf/ram_device.md from the two runs.csv (committed
# as the sets 2026-11-24/4k and 2026-11-24/large of runs.csv).
# $1: the device (scripts/ram_device.sh --size 4G, filled with random bytes); NVMEIO_TUNE: the
# tool (default: nvmeio-tune on PATH).
set -euo pipefail
device=${1:-/dev/loop0}
here=$(dirname "$0")
date -u
"$here/sweep.sh" "$device" 3 4k -s 1G -b 4K -q 1,4,16,64,128
date -u
"$here/sweep.sh" "$device" 3 large -s 4G -b 64K,1M,8M -q 1,4,16,64,128
date -u
python3 "$here/summarize.py" 4k/runs.csv large/runs.csv

#!/usr/bin/env bash
# The cells of the grid below fio at its best's rate, again with 7 repeats instead of 3 (sweep.sh
# says how): 8 MiB at every depth, 1 MiB at depth 16 and 64, 4 KiB at depth 4 (1 GiB a run, the
# others 4 GiB). Then summarize.py prints their table.
# $1: the device (scripts/ram_device.sh --size 4G, filled with random bytes); NVMEIO_TUNE: the
# tool (default: nvmeio-tune on PATH).
set -euo pipefail
device=${1:-/dev/loop0}
here=$(dirname "$0")
sweep=$here/sweep.sh
date -u
"$sweep" "$device" 7 eight -s 4G -b 8M -q 1,4,16,64,128
"$sweep" "$device" 7 one -s 4G -b 1M -q 16,64
"$sweep" "$device" 7 four -s 1G -b 4K -q 4
date -u
python3 "$here/summarize.py" eight/runs.csv one/runs.csv four/runs.csv

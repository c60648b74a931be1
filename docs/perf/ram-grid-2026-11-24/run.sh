#!/usr/bin/env bash
# The grid on the RAM-backed device against both fio setups (its default and --fixedbufs
# --registerfiles), io_uring, nvmeio at its defaults through --ring (pin once, one thread's
# ring), each point interleaved with fio by nvmeio-tune, 3 repeats. 4 KiB blocks move 1 GiB per
# run (4 GiB at depth 1 would take 40 s a run), the others 4 GiB. Then summarize.py writes the
# table of docs/perf/ram_device.md from the two runs.csv.
# $1: the device (scripts/ram_device.sh --size 4G, filled with random bytes); NVMEIO_TUNE: the
# tool (default: nvmeio-tune on PATH).
set -euo pipefail
device=${1:-/dev/loop0}
tune=${NVMEIO_TUNE:-nvmeio-tune}
common=(-f "$device" --allow-device-write --backend io_uring --ring --vs-fio --overlap on
        --single-submit off -p 1 -r 3 --ops read,write)
date -u
"$tune" "${common[@]}" -s 1G -b 4K -q 1,4,16,64,128 -o 4k
date -u
"$tune" "${common[@]}" -s 4G -b 64K,1M,8M -q 1,4,16,64,128 -o large
date -u
python3 "$(dirname "$0")/summarize.py" 4k/runs.csv large/runs.csv

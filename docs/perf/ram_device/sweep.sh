#!/usr/bin/env bash
# One sweep of the grid: nvmeio-tune --vs-fio on the RAM-backed device against both fio setups
# (its default and --fixedbufs --registerfiles), io_uring, nvmeio at its defaults through --ring
# (pin once, one thread's ring), reads and writes, one thread, each point interleaved with fio.
# $1: the device; $2: repeats; $3: the output folder; the rest: the sweep's -s, -b and -q.
# NVMEIO_TUNE: the tool (default: nvmeio-tune on PATH).
set -euo pipefail
device=$1 repeats=$2 out=$3
shift 3
"${NVMEIO_TUNE:-nvmeio-tune}" -f "$device" --allow-device-write --backend io_uring --ring --vs-fio \
  --overlap on --single-submit off -p 1 -r "$repeats" --ops read,write -o "$out" "$@"

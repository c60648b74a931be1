#!/usr/bin/env bash
# Polling (context_options::spin) at small blocks and depth 1-4 on a file of the VM's disk
# (virtio, ext4), against fio's default and fio at its best, each point interleaved, reads.
# $1: the file (created if missing); $2: the output folder. NVMEIO_TUNE: the tool.
set -euo pipefail
"${NVMEIO_TUNE:-nvmeio-tune}" -f "$1" -s 256M --backend io_uring --ring --vs-fio --overlap on \
  --single-submit off -p 1 -r 7 --ops read -b 4K,16K,64K -q 1,4 --spins 0,50 -o "$2"

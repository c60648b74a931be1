#!/bin/bash
# kv_blocks of this tree (A, build-bench) against a baseline tree (B: BASE, default /tmp/base),
# interleaved A B A B, 11 rounds: one write and one read batch of 1,024 blocks (4 KiB, 64 KiB),
# 64 bytes off alignment, 10 passes each. Prints each run's own seconds.
F=${KV_FILE:-/work/main/build/kvbench/kv.bin}  # an existing file of 256 MiB
BASE=${BASE:-/tmp/base}
for op in write read; do for bs in 4K 64K; do
  for r in $(seq 1 11); do
    for who in A B; do
      if [ $who = A ]; then bin=$(dirname "$0")/../../../build-bench/bench/kv_blocks; else bin=$BASE/build/bench/kv_blocks; fi
      s=$($bin --file $F --op $op --memory unaligned --block-size $bs --blocks 1024 --loops 10)
      echo "$op $bs $who $r $s"
    done
  done
done; done

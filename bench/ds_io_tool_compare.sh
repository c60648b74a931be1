#!/usr/bin/env bash
# DeepSpeed's ds_io tool itself, unmodified, on nvmeio_torch and on DeepSpeed's own handle:
# interleaved (the order shuffled in every round), the page cache dropped before every run,
# 1 MiB x 32, intra-op parallelism 1 and 2, write then read. Prints one line per run:
#   round op parallelism handle GiB/s        (ds_io's "Task ... Speed"; its GB is 2^30 bytes)
#
#   bench/ds_io_tool_compare.sh DEEPSPEED_SOURCE DEEPSPEED_ASYNC_IO_OP_SO FOLDER [BUILD] [ROUNDS] [SIZE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ds=$(cd "${1:?usage: see the header}" && pwd)
extension=$(realpath "${2:?usage: see the header}")
folder=${3:?usage: see the header}
build=$(cd "${4:-$here/../build-test-g++-17}" && pwd)
rounds=${5:-5}
size=${6:-1G}
python=/usr/bin/python3
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
"$python" "$here/../python/deepspeed_compat/tree.py" "$ds" "$tree" >/dev/null
mkdir -p "$folder"
for round in $(seq "$rounds"); do
  for op in write read; do
    for parallel in 1 2; do
      for handle in $(shuf -e nvmeio_torch deepspeed); do
        sync
        echo 3 > /proc/sys/vm/drop_caches || echo "WARNING: page cache not dropped" >&2
        if [ "$handle" = deepspeed ]; then export DS_AIO_EXTENSION=$extension; else unset DS_AIO_EXTENSION; fi
        read_flag=""
        [ "$op" = read ] && read_flag=--read
        speed=$(cd "$tree" && PYTHONPATH="$tree:$build/python" "$python" "$ds/bin/ds_io" \
          --folder "$folder" --io_size "$size" --block_size 1M --queue_depth 32 \
          --io_parallel "$parallel" --loops 1 --warmup_loops 0 $read_flag 2>/dev/null |
          awk '/^Task .* Speed/ {print $5}')
        echo "$round $op $parallel $handle ${speed:-FAILED}"
      done
    done
  done
done

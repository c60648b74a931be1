#!/usr/bin/env bash
# The checks behind docs/perf/kv_populate.md beside bench/kv_batch_compare.py's table:
#   checks.sh faults  BUILD BASELINE FOLDER  page faults and time of one cold 1,024 x 64 KiB
#                                            bounced read into fresh memory, both builds
#   checks.sh syscalls BUILD FOLDER          strace -c -f of one touched bounced read and of
#                                            fio's on the same pattern (libaio), calls per block
#   checks.sh layout  BUILD FOLDER [ROUNDS]  the touched read's gap: the bounced slab, the same
#                                            blocks aligned in one slab and sharing 2 x depth
#                                            buffers (fio's layout), and fio, interleaved
#   checks.sh profile BUILD FOLDER           perf record of the touched bounced read (libaio)
# FOLDER holds kv-64k.bin (2,048 blocks of 64 KiB, written by kv_batch_compare.py or here).
set -euo pipefail

cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
blocks_file() {
    local f="$1/kv-64k.bin"
    [[ -f "$f" ]] || head -c $((2048 * 65536)) /dev/urandom > "$f"
    echo "$f"
}
kv() {  # BUILD FILE ARGS...: one cold kv_blocks run, 1,024 x 64 KiB reads
    local build="$1" file="$2"
    shift 2
    cold
    "$build/bench/kv_blocks" --file "$file" --op read --blocks 1024 --block-size 64K "$@"
}
fio_read() {  # FILE ENGINE LOOPS: seconds of fio's run on the same pattern
    cold
    fio --name=kv --filename="$1" --rw=read:64k --bs=64k --iodepth=32 --ioengine="$2" \
        --direct=1 --size=128M --io_size=64M --loops="$3" --output-format=json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["jobs"][0]["read"]["runtime"] / 1000)'
}

case "${1:-}" in
faults)
    build="$2" baseline="$3" file="$(blocks_file "$4")"
    for round in 1 2 3 4 5; do
        for b in "$baseline" "$build"; do
            cold
            perf stat -e page-faults,minor-faults -x, -o /tmp/kv_populate_faults.$$ \
                "$b/bench/kv_blocks" --file "$file" --op read --blocks 1024 --block-size 64K \
                --memory unaligned --destination fresh > /tmp/kv_populate_seconds.$$
            echo "round $round $b seconds $(cat /tmp/kv_populate_seconds.$$)" \
                "$(grep -E '^[0-9]+,,page-faults' /tmp/kv_populate_faults.$$ | cut -d, -f1) faults"
        done
    done
    rm -f /tmp/kv_populate_faults.$$ /tmp/kv_populate_seconds.$$
    ;;
syscalls)
    build="$2" file="$(blocks_file "$3")"
    cold
    strace -c -f -o /tmp/kv_populate_strace.$$ "$build/bench/kv_blocks" --file "$file" --op read \
        --blocks 1024 --block-size 64K --memory unaligned --destination touched > /dev/null
    echo "== nvmeio read_batch, 1,024 x 64 KiB, touched, libaio"
    head -12 /tmp/kv_populate_strace.$$
    cold
    strace -c -f -o /tmp/kv_populate_strace.$$ fio --name=kv --filename="$file" --rw=read:64k \
        --bs=64k --iodepth=32 --ioengine=libaio --direct=1 --size=128M --io_size=64M \
        --output-format=terse > /dev/null
    echo "== fio, the same 1,024 blocks, libaio, iodepth 32 (its own start-up included)"
    head -12 /tmp/kv_populate_strace.$$
    rm -f /tmp/kv_populate_strace.$$
    ;;
layout)
    build="$2" file="$(blocks_file "$3")" rounds="${4:-5}"
    for engine in libaio io_uring; do
        for round in $(seq "$rounds"); do
            line="$engine round $round"
            for v in unaligned aligned ring fio; do
                if [[ $v == fio ]]; then
                    t=$(fio_read "$file" "$engine" 4)
                else
                    t=$(kv "$build" "$file" --memory "$v" --destination touched --backend "$engine" --loops 4)
                fi
                line+=" $v $(python3 -c "print(f'{256 / 1024 / $t:.2f}')")"
            done
            echo "$line GiB/s"
        done
    done
    ;;
profile)
    build="$2" file="$(blocks_file "$3")"
    cold
    perf record -g -o /tmp/kv_populate.perf -- "$build/bench/kv_blocks" --file "$file" \
        --op read --blocks 1024 --block-size 64K --memory unaligned --destination touched \
        --loops 8 > /dev/null 2>&1
    perf report -i /tmp/kv_populate.perf --no-children --sort dso,symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -25
    ;;
*)
    sed -n '2,10p' "$0"
    exit 2
    ;;
esac

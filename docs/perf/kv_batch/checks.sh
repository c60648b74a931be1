#!/usr/bin/env bash
# The side measurements behind kv_batch.md (checks.txt, profile.txt), on ext4 over the
# RAM-backed device mounted at DIR. BEFORE and AFTER are build trees (bench/kv_blocks,
# bench/nvmeio-bench, python/) of the two commits compared; DEV a second, raw RAM-backed device.
#   docs/perf/kv_batch/checks.sh profile|layout|band|ring DIR BEFORE AFTER [DEV]
set -euo pipefail
what=$1 dir=$2 before=$3 after=$4 dev=${5:-}
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
blocks() {  # file count: count random 64 KiB blocks
  python3 -c "import os,sys; f=open(sys.argv[1],'wb'); [f.write(os.urandom(65536)) for _ in range(int(sys.argv[2]))]" "$1" "$2"
}
case $what in
profile)  # syscall counts of one Python batch, and the C++ batch's profile, 1024 x 64 KiB
  f=$dir/prof.bin; blocks "$f" 2048
  for v in before after; do
    b=$before; [ $v = after ] && b=$after
    for op in write read; do
      cold; echo "== $v: strace -c -f, Python sync_p${op}_batch of 1024 torch tensors of 64 KiB"
      PYTHONPATH=$b/python strace -c -f -e trace=io_submit,io_getevents,futex,fstat,newfstatat,statx,fallocate,mmap,munmap,madvise,brk \
        /usr/bin/python3 -c "
import os, torch, nvmeio_torch
n, s = 1024, 65536
blocks = [torch.full((s,), 7, dtype=torch.uint8) for _ in range(n)]
h = nvmeio_torch.aio_handle(1 << 20, 32, False, True, 1, backend='libaio')
os.write(2, b'--- call ---\n')
call = h.sync_pread_batch if '$op' == 'read' else h.sync_pwrite_batch
assert call(blocks, '$f', [2 * i * s for i in range(n)]) == 1" 2>&1 | sed -n '/--- call ---/,$p' | tail -n +2
    done
    for op in write read; do
      cold; echo "== $v: perf, C++ kv_blocks --op $op --memory unaligned, 1024 x 64 KiB, 4 passes"
      perf record -q -o /tmp/kvperf.data "$b/bench/kv_blocks" --file "$f" --op $op --blocks 1024 \
        --block-size 64K --memory unaligned --loops 4
      perf report -i /tmp/kvperf.data --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -12
    done
  done
  rm -f "$f" ;;
layout)  # 8192 x 64 KiB aligned blocks from one slab or sharing 64 buffers, beside fio
  f=$dir/ring.bin; blocks "$f" 16384
  for be in libaio io_uring; do for op in read write; do for r in 1 2 3 4 5; do
    for v in fio slab ring; do
      cold
      if [ $v = fio ]; then
        t=$(fio --name=kv --filename="$f" --rw=$op:64k --bs=64k --iodepth=32 --ioengine=$be --direct=1 \
              --size=1g --io_size=512m --output-format=json |
            python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$op']['runtime']/1000)")
      else
        m=aligned; [ $v = ring ] && m=ring
        t=$("$after/bench/kv_blocks" --file "$f" --op $op --blocks 8192 --block-size 64K --backend $be --memory $m)
      fi
      echo "$be $op $r $v $t"
    done
  done; done; done
  rm -f "$f" ;;
band)  # nvmeio-bench of the two builds, interleaved, 9 rounds; ratios after/before
  f=$dir/band.bin; dd if=/dev/urandom of="$f" bs=1M count=256 status=none
  python3 - "$f" "$before/bench/nvmeio-bench" "$after/bench/nvmeio-bench" <<'PY'
import json, random, statistics, subprocess, sys
f, old, new = sys.argv[1:4]
print("| backend | op | block x depth | rate after/before | CPU per GiB after/before |")
for backend in ("libaio", "io_uring"):
    for op in ("read", "write"):
        for b, q in (("1M", 32), ("64K", 64), ("4K", 64)):
            rate, cpu = {}, {}
            for r in range(9):
                order = [old, new]; random.Random(r).shuffle(order)
                for exe in order:
                    j = json.loads(subprocess.run(
                        [exe, "-f", f, "-s", "64M" if b == "4K" else "256M", "-b", b, "-q", str(q),
                         "--op", op, "--backend", backend, "-n", "3", "-w", "1", "--json"],
                        check=True, capture_output=True, text=True).stdout)
                    rate[exe, r] = j["gb_per_s"]["median"]; cpu[exe, r] = j["cpu_seconds_per_gib"]["median"]
            rr = statistics.median(rate[new, r] / rate[old, r] for r in range(9))
            cr = statistics.median(cpu[new, r] / cpu[old, r] for r in range(9))
            print(f"| {backend} | {op} | {b} x {q} | {rr:.3f} | {cr:.3f} |", flush=True)
PY
  rm -f "$f" ;;
ring)  # ring writes at 1 MiB x 32 on a raw RAM-backed device, against fio
  for be in libaio io_uring; do
    "$after/bench/nvmeio-tune" -f "$dev" -s 1G -b 1M -q 32 --ops write --ring -r 5 --vs-fio \
      --allow-device-write --backend $be -p 1 --overlap on --single-submit off
  done ;;
*) echo "checks.sh: profile, layout, band or ring" >&2; exit 2 ;;
esac

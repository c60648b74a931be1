#!/usr/bin/env python3
"""ZeRO-Infinity's swap pattern through DeepSpeed's handle interface: many tensors, one file
each, all submitted with async_pread/async_pwrite, then one wait(). nvmeio_torch against
DeepSpeed's own handle (built from its source), interleaved, page cache dropped before every run,
each run a fresh process; GiB/s of the submit-to-wait time, medians and per-round ratios.

    bench/ds_swap_compare.py --deepspeed-source DS --deepspeed-extension async_io_op.so
        --folder DIR [--tensors 64] [--tensor-size 16M] [--rounds 5] [--build build-test-g++-17]
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "python", "deepspeed_compat"), os.path.join(ROOT, "support")]
import tree  # noqa: E402
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

CHILD = r"""
import os, sys, time, torch
from deepspeed.ops.op_builder import AsyncIOBuilder
op, folder, n, size, parallel = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
h = AsyncIOBuilder().load().aio_handle(1 << 20, 32, False, True, parallel)
buffers = [h.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8)) for _ in range(n)]
for b in buffers:
    b.fill_(7)
start = time.perf_counter()
for i, b in enumerate(buffers):
    call = h.async_pread if op == "read" else h.async_pwrite
    assert call(b, os.path.join(folder, f"swap{i}.bin"), 0) == 0
assert h.wait() == n
print(time.perf_counter() - start)
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deepspeed-source", required=True)
    p.add_argument("--deepspeed-extension", required=True)
    p.add_argument("--folder", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build-test-g++-17"))
    p.add_argument("--tensors", type=count_arg, default=64)
    p.add_argument("--tensor-size", type=size_arg, default="16M")
    p.add_argument("--rounds", type=count_arg, default=5)
    args = p.parse_args()
    scratch = tempfile.mkdtemp()
    tree.lay_out(args.deepspeed_source, scratch)
    os.makedirs(args.folder, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{scratch}:{os.path.join(args.build, 'python')}")
    env.pop("DS_AIO_EXTENSION", None)
    methods = {"nvmeio_torch": env,
               "deepspeed": dict(env, DS_AIO_EXTENSION=os.path.abspath(args.deepspeed_extension))}
    rates, cold = {}, True
    for round_ in range(args.rounds):
        for op in ("write", "read"):  # the first round's writes create the files
            for parallel in (1, 2):
                for name in random.sample(list(methods), len(methods)):
                    cold = drop_caches() and cold
                    done = subprocess.run(
                        [sys.executable, "-c", CHILD, op, args.folder, str(args.tensors),
                         str(args.tensor_size), str(parallel)],
                        env=methods[name], cwd=scratch, capture_output=True, text=True)
                    if done.returncode != 0:
                        sys.exit(f"{name} {op} failed: {done.stderr[-2000:]}")
                    seconds = float(done.stdout.split()[-1])
                    rates.setdefault((op, parallel, name), {})[round_] = \
                        args.tensors * args.tensor_size / (1 << 30) / seconds
    print(f"ds_swap_compare: {args.tensors} tensors x {args.tensor_size} bytes, one file each, "
          f"1 MiB x 32, {args.rounds} rounds; "
          + ("page cache dropped before every run" if cold else "WARNING: page cache NOT dropped"))
    for op in ("write", "read"):
        for parallel in (1, 2):
            mine, theirs = rates[(op, parallel, "nvmeio_torch")], rates[(op, parallel, "deepspeed")]
            print(f"{op:6} P{parallel}  nvmeio_torch {statistics.median(mine.values()):6.2f}  "
                  f"deepspeed {statistics.median(theirs.values()):6.2f} GiB/s  "
                  f"ratio {median_ratio(mine, theirs):.2f}")
    for i in range(args.tensors):
        os.remove(os.path.join(args.folder, f"swap{i}.bin"))


if __name__ == "__main__":
    main()

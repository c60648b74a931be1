#!/usr/bin/env python3
"""ds_io-style reads and writes through DeepSpeed's handle interface: nvmeio_torch against
DeepSpeed's own handle (built from its source) and fio, interleaved, cold, medians and ratios.

Each run is a fresh process that does what ds_io's handle engine does: AsyncIOBuilder().load()
.aio_handle(block_size, queue_depth, False, True, intra_op_parallelism), a buffer from
new_cpu_locked_tensor, pread/pwrite(..., async=True) then wait(); it reports the transfer's wall
time and the process's CPU time (every thread) over the transfer alone. fio runs the same
transfer (libaio, O_DIRECT, numjobs = the parallelism, each job its share of the file); its CPU
is its whole process net of a start-up run (fio's own figure leaves out helper threads).

    bench/ds_io_compare.py --deepspeed-source DS [--deepspeed-extension async_io_op.so]
        --folder DIR [--size 1G] [--rounds 5] [--parallelism 1 2] [--build build-test-g++-17]

The page cache is dropped before every run (root); where that fails, the output says so.
"""

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "python", "deepspeed_compat"), os.path.join(ROOT, "support")]
import tree  # noqa: E402
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

GiB = 1 << 30

# The child: one ds_io-style transfer, reported as JSON.
CHILD = r"""
import json, os, resource, sys, time, torch
from deepspeed.ops.op_builder import AsyncIOBuilder
op, path, size, block, depth, parallel = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
h = AsyncIOBuilder().load().aio_handle(block, depth, False, True, parallel)
buffer = h.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8))
if op == "write":
    buffer.random_(0, 256)
    if os.path.exists(path):
        os.remove(path)  # as ds_io does before a write
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
cpu0, t0 = cpu(), time.perf_counter()
(h.pread if op == "read" else h.pwrite)(buffer, path, False, True)
assert h.wait() == 1
seconds, cpu_seconds = time.perf_counter() - t0, cpu() - cpu0
print(json.dumps({"seconds": seconds, "cpu": cpu_seconds, "module": type(h).__module__}))
"""


def run_process(command, env=None):
    """Runs `command`; returns (stdout, CPU seconds of the whole process tree it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.stdout, cpu


def handle_run(args, env, op, path, parallel):
    out, _ = run_process([sys.executable, "-c", CHILD, op, path, str(args.size),
                          str(args.block_size), str(args.queue_depth), str(parallel)], env)
    r = json.loads(out.strip().splitlines()[-1])
    return r["seconds"], r["cpu"], r["module"]


def fio_command(args, op, path, parallel, size):
    share = size // parallel
    return ["fio", "--name=ds_io", f"--filename={path}", f"--rw={op}", f"--bs={args.block_size}",
            f"--iodepth={args.queue_depth}", "--direct=1", "--ioengine=libaio",
            f"--numjobs={parallel}", f"--size={share}", f"--offset_increment={share}",
            "--group_reporting", "--output-format=json"]


def fio_run(args, op, path, parallel):
    if op == "write" and os.path.exists(path):
        os.remove(path)
    start = time.perf_counter()
    out, cpu = run_process(fio_command(args, op, path, parallel, args.size))
    wall = time.perf_counter() - start
    job = json.loads(out)["jobs"][0]
    side = job["read" if op == "read" else "write"]
    seconds = side["io_bytes"] / side["bw_bytes"] if side["bw_bytes"] else wall
    # start-up and exit: the same job moving one block per job
    tiny = fio_command(args, "read", path, parallel, parallel * args.block_size)
    _, startup = run_process(tiny)
    return seconds, cpu - startup


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deepspeed-source", required=True, help="checkout of DeepSpeed's source")
    p.add_argument("--deepspeed-extension", help="DeepSpeed's built async_io op (.so)")
    p.add_argument("--folder", required=True, help="where the 1 GiB files go (O_DIRECT)")
    p.add_argument("--build", default=os.path.join(ROOT, "build-test-g++-17"))
    p.add_argument("--size", type=size_arg, default="1G")
    p.add_argument("--block-size", type=size_arg, default="1M")
    p.add_argument("--queue-depth", type=count_arg, default=32)
    p.add_argument("--parallelism", type=count_arg, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=count_arg, default=5)
    p.add_argument("--json", help="write every run here")
    args = p.parse_args()
    if shutil.which("fio") is None:
        sys.exit("ds_io_compare: fio is not installed")

    scratch = tempfile.mkdtemp()
    tree.lay_out(args.deepspeed_source, scratch)
    base = dict(os.environ, PYTHONPATH=f"{scratch}:{os.path.join(args.build, 'python')}")
    base.pop("DS_AIO_EXTENSION", None)
    methods = {"nvmeio_torch": base}
    if args.deepspeed_extension:
        methods["deepspeed"] = dict(base, DS_AIO_EXTENSION=os.path.abspath(args.deepspeed_extension))
    names = list(methods) + ["fio"]

    os.makedirs(args.folder, exist_ok=True)
    path = os.path.join(args.folder, f"ds_io_compare_{args.size}.bin")
    with open(path, "wb") as f:  # the read target, written once
        chunk = os.urandom(1 << 20)
        for _ in range(args.size // len(chunk)):
            f.write(chunk)
    print(f"ds_io_compare: {args.size / GiB:g} GiB, block {args.block_size}, queue depth "
          f"{args.queue_depth}, parallelism {args.parallelism}, {args.rounds} rounds, "
          f"file {path}; {os.uname().release}, {os.cpu_count()} CPUs")
    cold = True
    runs = []
    for op in ("write", "read"):
        for parallel in args.parallelism:
            for round_ in range(args.rounds):
                order = names[:]
                random.shuffle(order)
                for name in order:
                    target = path if op == "read" else path + ".w"  # each write removes it first
                    cold = drop_caches() and cold
                    if name == "fio":
                        seconds, cpu = fio_run(args, op, target, parallel)
                        module = "fio"
                    else:
                        seconds, cpu, module = handle_run(args, methods[name], op, target, parallel)
                    runs.append(dict(op=op, parallel=parallel, round=round_, method=name,
                                     module=module, gib_per_s=args.size / GiB / seconds,
                                     cpu_s_per_gib=cpu / (args.size / GiB)))
    for f in (path, path + ".w"):
        if os.path.exists(f):
            os.remove(f)
    shutil.rmtree(scratch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    report(runs, names, cold)


def report(runs, names, cold):
    print("page cache dropped before every run" if cold else
          "WARNING: the page cache could not be dropped (not root): reads were not cold")
    print(f"{'op':6}{'P':>3}  {'method':14}{'GiB/s':>8}{'CPU s/GiB':>11}"
          f"{'rate/DS':>9}{'rate/fio':>9}{'CPU/fio':>9}")
    for op in ("write", "read"):
        for parallel in sorted({r["parallel"] for r in runs}):
            cell = [r for r in runs if r["op"] == op and r["parallel"] == parallel]

            def per_round(name, key):
                return {r["round"]: r[key] for r in cell if r["method"] == name}

            def ratio(a, b, key):  # median of the per-round ratios (pairs from one round)
                value = median_ratio(per_round(a, key), per_round(b, key))
                return f"{value:9.2f}" if value is not None else f"{'':9}"

            for name in names:
                rate = statistics.median(per_round(name, "gib_per_s").values())
                cpu = statistics.median(per_round(name, "cpu_s_per_gib").values())
                ds = ratio(name, "deepspeed", "gib_per_s") if "deepspeed" in names else ""
                print(f"{op:6}{parallel:>3}  {name:14}{rate:8.2f}{cpu:11.3f}{ds:>9}"
                      f"{ratio(name, 'fio', 'gib_per_s')}{ratio(name, 'fio', 'cpu_s_per_gib')}")


if __name__ == "__main__":
    main()

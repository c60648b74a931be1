#!/usr/bin/env python3
"""nvmeio_torch beside the packages users would pick for each job, on the same files and disk,
in one interleaved run, cold, with fio reading or writing the same bytes (what the device gives).

Jobs (--jobs; every method of a job runs once per round, in an order shuffled per round):

  safetensors  load a sharded safetensors model to CPU memory: nvmeio_torch.safetensors.load_files
               beside safetensors.torch.load_file, Run:ai's SafetensorsStreamer (CPU) and
               fastsafetensors (CPU, nogds); save it durably: save_file beside the package's
               save_file + fsync
  torch        torch's format: nvmeio_torch.save / load beside torch.save + fsync, torch.load and
               torch.load(mmap=True); every load reads the one file torch.save wrote
  ds_handle    DeepSpeed's handle ops: 1 GiB pread/pwrite, and 1,024 scattered 64 KiB blocks
               (one async call each, one wait), DeepSpeed's own AsyncIOBuilder().load() beside the
               same code after nvmeio_torch.use_in_deepspeed()
  fastpersist  a checkpoint through DeepSpeed's FastFileWriter (its defaults: 64 MB double
               buffer, handle 1 MiB x 8, one worker) on DeepSpeed's handle and on nvmeio's,
               beside nvmeio_torch.save
  kvikio       one large read into host memory: KvikIO's CuFile.pread (compat mode, numpy
               buffer) beside the nvmeio handle's sync_pread into a torch tensor
  dcp          torch.distributed.checkpoint at world size 2 (bench/dcp_compare.py's ranks):
               nvmeio_torch.dcp beside torch's FileSystemWriter/Reader at thread_count 1, 2, 4

Each run but fio's is a fresh process; the page cache is dropped (sync; echo 3 >
/proc/sys/vm/drop_caches) before every run, saves included. A load's clock covers the call and
a read of one byte of every page of every tensor it returned (a loader that maps the file pays
there for the reads it put off); the state is built before a save's clock starts. The table has
medians over the rounds and medians of the per-round ratios.

    bench/peers_compare.py --folder DIR [--jobs safetensors torch ...] [--rounds 3] [--size 2G]
        [--build build-bench] [--json runs.json]

bench/peers_compare.sh makes the venv of bench/requirements-peers.txt and the build, then runs
this with the venv's python.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
import types
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "support")]
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
SCATTER_BLOCKS, SCATTER_SIZE, SCATTER_LOOPS = 1024, 64 << 10, 4
DS_BLOCK, DS_DEPTH, DS_PARALLEL = 1 << 20, 32, 1

# job -> op -> methods; "fio" is the device, run inline; the rest run in a fresh process.
JOBS = {
    "safetensors": {"load": ["nvmeio", "safetensors", "runai", "fastsafetensors", "fio"],
                    "save": ["nvmeio", "safetensors", "fio"]},
    "torch": {"save": ["nvmeio", "torch", "fio"],
              "load": ["nvmeio", "torch", "torch_mmap", "fio"]},
    "ds_handle": {"write": ["nvmeio", "deepspeed", "fio"], "read": ["nvmeio", "deepspeed", "fio"],
                  "write_64k": ["nvmeio", "deepspeed", "fio"],
                  "read_64k": ["nvmeio", "deepspeed", "fio"]},
    "fastpersist": {"save": ["nvmeio", "ffw_nvmeio", "ffw_deepspeed", "fio"]},
    "kvikio": {"read": ["nvmeio", "kvikio", "kvikio_t4", "fio"]},
    "dcp": {"save": ["nvmeio", "torch_t1", "torch_t2", "torch_t4", "fio"],
            "load": ["nvmeio", "torch_t1", "torch_t2", "torch_t4", "fio"]},
}
# (job, op, peer): the goal nvmeio's rate sets itself against that peer's (issue 54). Where the
# peer reaches half of fio, the goal is instead >= 0.9x fio and >= 1.0x the peer.
GOALS = {("safetensors", "load", "safetensors"): 2.0, ("safetensors", "load", "runai"): 1.2,
         ("safetensors", "load", "fastsafetensors"): 1.2,
         ("safetensors", "save", "safetensors"): 2.0,
         ("torch", "save", "torch"): 3.0, ("torch", "load", "torch"): 1.5,
         ("torch", "load", "torch_mmap"): 1.5,
         ("ds_handle", "write", "deepspeed"): 1.0, ("ds_handle", "read", "deepspeed"): 1.0,
         ("ds_handle", "write_64k", "deepspeed"): 1.0,
         ("ds_handle", "read_64k", "deepspeed"): 1.0,
         ("fastpersist", "save", "ffw_deepspeed"): 1.0, ("kvikio", "read", "best"): 1.0,
         ("dcp", "save", "best"): 3.0, ("dcp", "load", "best"): 1.5}
# Peers measured at several settings; the goal stands against the best of them.
TUNED = {"dcp": "torch_t", "kvikio": "kvikio"}
PACKAGES = ("torch", "safetensors", "runai-model-streamer", "fastsafetensors", "kvikio-cu13",
            "deepspeed")


# ---- the children: one run each, in a fresh process ---------------------------------------

def touch(tensors):
    """Reads one byte of every page of every tensor (and its last byte)."""
    import torch

    for t in tensors.values():
        if t.numel():
            b = t.reshape(-1).view(torch.uint8)
            b[::4096].sum() + b[-1]


def digest(tensors):
    """CRC of every tensor's name and first and last 4 KiB: the methods' results must agree."""
    import torch

    d = 0
    for name in sorted(tensors):
        b = tensors[name].reshape(-1).view(torch.uint8)
        d = zlib.crc32(name.encode(), d)
        d = zlib.crc32(b[:4096].numpy().tobytes(), d)
        d = zlib.crc32(b[-4096:].numpy().tobytes(), d)
    return d


def shards(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    files = sorted(set(weight_map.values()))
    return index, [os.path.join(folder, f) for f in files], weight_map


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def child_safetensors(method, op, data, out):
    import nvmeio_torch.safetensors as st

    index, paths, weight_map = shards(os.path.join(data, "model"))
    if op == "save":
        tensors = st.load_files(index)
        groups = {}
        for name, file in weight_map.items():
            groups.setdefault(file, {})[name] = tensors[name]
        os.makedirs(out, exist_ok=True)
        start = time.perf_counter()
        for file, group in groups.items():
            path = os.path.join(out, file)
            if method == "nvmeio":
                st.save_file(group, path)
            else:
                from safetensors.torch import save_file
                save_file(group, path)
                fsync_path(path)
        return time.perf_counter() - start, sum(os.path.getsize(p) for p in paths), None
    start = time.perf_counter()
    if method == "nvmeio":
        tensors = st.load_files(index)
    elif method == "safetensors":
        from safetensors.torch import load_file
        tensors = {}
        for path in paths:
            tensors.update(load_file(path))
    elif method == "runai":
        from runai_model_streamer import SafetensorsStreamer
        with SafetensorsStreamer() as streamer:
            streamer.stream_files(paths)
            tensors = dict(streamer.get_tensors())
    elif method == "fastsafetensors":
        from fastsafetensors import fastsafe_open
        with fastsafe_open(paths, device="cpu", nogds=True) as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    touch(tensors)
    seconds = time.perf_counter() - start
    return seconds, sum(t.numel() * t.element_size() for t in tensors.values()), digest(tensors)


def child_torch(method, op, data, out, size, hidden):
    import torch
    import nvmeio_torch
    from torch_checkpoint_compare import check, gpt_state_dict

    if op == "save":
        sd = gpt_state_dict(size, hidden)
        start = time.perf_counter()
        if method == "nvmeio":
            nvmeio_torch.save(sd, out)
        else:
            torch.save(sd, out)
            fsync_path(out)
        seconds = time.perf_counter() - start
    else:
        path = os.path.join(data, "checkpoint.pt")
        start = time.perf_counter()
        if method == "nvmeio":
            sd = nvmeio_torch.load(path)
        else:
            sd = torch.load(path, mmap=method == "torch_mmap")
        touch(sd)
        seconds = time.perf_counter() - start
        check(sd, size, hidden)
    return seconds, sum(t.numel() * t.element_size() for t in sd.values()), None


def deepspeed_module(method):
    """AsyncIOBuilder().load(): DeepSpeed's own op, or nvmeio_torch after the user's one line."""
    if method.endswith("nvmeio"):
        import nvmeio_torch
        nvmeio_torch.use_in_deepspeed()
    from deepspeed.ops.op_builder import AsyncIOBuilder
    return AsyncIOBuilder().load()


def child_ds_handle(method, op, data, out, size):
    import torch

    h = deepspeed_module(method).aio_handle(DS_BLOCK, DS_DEPTH, False, True, DS_PARALLEL)
    locked = torch.empty(0, dtype=torch.uint8)
    if op in ("read", "write"):
        buffer = h.new_cpu_locked_tensor(size, locked)
        path = os.path.join(data, "data.bin") if op == "read" else out
        if op == "write":
            buffer.random_(0, 256)
        start = time.perf_counter()
        (h.pread if op == "read" else h.pwrite)(buffer, path, False, True)
        assert h.wait() == 1
        seconds = time.perf_counter() - start
        moved = size
    else:  # 1,024 blocks at every other 64 KiB slot, one async call each, one wait per pass
        slab = h.new_cpu_locked_tensor(SCATTER_BLOCKS * SCATTER_SIZE, locked)
        blocks = list(slab.split(SCATTER_SIZE))
        path = os.path.join(data, "data.bin") if op == "read_64k" else out
        call = h.async_pread if op == "read_64k" else h.async_pwrite
        start = time.perf_counter()
        for _ in range(SCATTER_LOOPS):
            for i, block in enumerate(blocks):
                assert call(block, path, 2 * i * SCATTER_SIZE) == 0
            assert h.wait() == SCATTER_BLOCKS
        seconds = time.perf_counter() - start
        moved = SCATTER_LOOPS * SCATTER_BLOCKS * SCATTER_SIZE
    return seconds, moved, None


def child_fastpersist(method, op, data, out, size, hidden):
    import torch
    from torch_checkpoint_compare import gpt_state_dict

    sd = gpt_state_dict(size, hidden)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    if method == "nvmeio":
        import nvmeio_torch
        start = time.perf_counter()
        nvmeio_torch.save(sd, out)
        return time.perf_counter() - start, nbytes, None
    import deepspeed.io.fast_file_writer as fast_file_writer
    from deepspeed.io import FastFileWriter, FastFileWriterConfig

    class CastOnly:
        """FastFileWriter takes cast_to_byte_tensor from DeepSpeed's UtilsBuilder op, which
        DeepSpeed's CPU accelerator does not implement; this is that function in torch."""
        def load(self, verbose=False):
            return self

        @staticmethod
        def cast_to_byte_tensor(src):
            if isinstance(src, (list, tuple)):
                return [CastOnly.cast_to_byte_tensor(t) for t in src]
            return src.contiguous().reshape(-1).view(torch.uint8)

    fast_file_writer.UtilsBuilder = CastOnly
    # DeepSpeed's FastPersist defaults (runtime/model_checkpointing, "aio" section): a 64 MB
    # double buffer, block 1 MiB, queue 8, one worker. Its factory pins the buffer with
    # Tensor.pin_memory(), which needs CUDA; the handle's locked tensor is the CPU's equivalent.
    h = deepspeed_module(method).aio_handle(1 << 20, 8, False, True, 1)
    pinned = h.new_cpu_locked_tensor(64_000_000, torch.empty(0, dtype=torch.uint8))
    start = time.perf_counter()
    writer = FastFileWriter(file_path=out, config=FastFileWriterConfig(
        dnvme_handle=h, pinned_tensor=pinned, double_buffer=True, num_parallel_writers=1,
        writer_rank=0))
    torch.save(sd, writer)
    writer.close()  # drains and fsyncs
    return time.perf_counter() - start, nbytes, None


def child_kvikio(method, op, data, out, size):
    path = os.path.join(data, "data.bin")
    if method.startswith("kvikio"):
        if method == "kvikio_t4":  # its thread pool at 4 (its default is 1)
            os.environ["KVIKIO_NTHREADS"] = "4"
        import numpy
        import kvikio
        buffer = numpy.empty(size, dtype=numpy.uint8)
        start = time.perf_counter()
        with kvikio.CuFile(path, "r") as f:
            moved = f.pread(buffer, size).get()
        seconds = time.perf_counter() - start
        head = buffer[:4096].tobytes()
    else:
        import torch
        from nvmeio_torch._files import make_handle
        h = make_handle()
        buffer = torch.empty(size, dtype=torch.uint8)
        start = time.perf_counter()
        assert h.sync_pread(buffer, path) == 1
        seconds = time.perf_counter() - start
        moved, head = size, buffer[:4096].numpy().tobytes()
    return seconds, moved, zlib.crc32(head)


def child(argv):
    job, method, op, data, out, size, hidden = argv
    size, hidden = int(size), int(hidden)
    run = {"safetensors": lambda: child_safetensors(method, op, data, out),
           "torch": lambda: child_torch(method, op, data, out, size, hidden),
           "ds_handle": lambda: child_ds_handle(method, op, data, out, min(size, GiB)),
           "fastpersist": lambda: child_fastpersist(method, op, data, out, size, hidden),
           "kvikio": lambda: child_kvikio(method, op, data, out, size)}[job]
    seconds, moved, check = run()
    print(json.dumps({"seconds": seconds, "bytes": moved, "digest": check}))


# ---- the parent: files, fio, the interleaved rounds, the table ---------------------------------

def fio(op, files, rw=None, extra=()):
    """fio moving `files` ([(path, bytes[, offset])], one job each, all at once): libaio,
    O_DIRECT, 1 MiB blocks, depth 32; writes end with fsync. Seconds by its own clock, bytes."""
    command = ["fio", "--output-format=json", "--direct=1", "--ioengine=libaio",
               f"--rw={rw or op}", "--bs=1M", "--iodepth=32", "--group_reporting", *extra]
    if op == "write":
        command.append("--end_fsync=1")
    for i, (path, size, *offset) in enumerate(files):
        command += [f"--name=f{i}", f"--filename={path}", f"--size={size}",
                    f"--offset={offset[0] if offset else 0}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"fio failed: {done.stderr[-2000:]}")
    side = json.loads(done.stdout[done.stdout.index("{"):])["jobs"][0][op]
    return side["io_bytes"] / side["bw_bytes"], side["io_bytes"]


def fio_for(job, op, args, scratch):
    data = args.folder
    if job == "safetensors":
        _, paths, _ = shards(os.path.join(data, "model"))
        os.makedirs(scratch, exist_ok=True)
        files = [(p if op == "load" else os.path.join(scratch, os.path.basename(p)),
                  os.path.getsize(p) // 4096 * 4096) for p in paths]
        return fio("read" if op == "load" else "write", files)
    if job in ("torch", "fastpersist"):
        size = os.path.getsize(os.path.join(data, "checkpoint.pt")) // 4096 * 4096
        target = os.path.join(data, "checkpoint.pt") if op == "load" else scratch + ".bin"
        return fio("read" if op == "load" else "write", [(target, size)])
    if job == "ds_handle":
        if op in ("read", "write"):
            target = os.path.join(data, "data.bin") if op == "read" else scratch + ".bin"
            return fio(op, [(target, min(args.size, GiB))])
        base = op.split("_")[0]
        target = os.path.join(data, "data.bin") if base == "read" else scratch + ".bin"
        return fio(base, [(target, 2 * SCATTER_BLOCKS * SCATTER_SIZE)],
                   rw=f"{base}:{SCATTER_SIZE}",
                   extra=[f"--bs={SCATTER_SIZE}", f"--io_size={SCATTER_BLOCKS * SCATTER_SIZE}",
                          f"--loops={SCATTER_LOOPS}"])
    if job == "kvikio":
        return fio("read", [(os.path.join(data, "data.bin"), args.size)])
    if job == "dcp":  # two writers, two readers, each half
        half = args.size // 2
        if op == "load":
            path = os.path.join(data, "data.bin")
            return fio("read", [(path, half, 0), (path, half, half)])
        return fio("write", [(scratch + ".0", half), (scratch + ".1", half)])
    raise ValueError(job)


def run_one(job, method, op, args, env):
    scratch = os.path.join(args.folder, "out", f"{job}.{op}.{method}")
    os.makedirs(os.path.dirname(scratch), exist_ok=True)
    if not drop_caches():
        sys.exit("peers_compare: dropping the page cache failed (run as root): no cold figures")
    try:
        if method == "fio":
            seconds, moved = fio_for(job, op, args, scratch)
            return {"seconds": seconds, "bytes": moved, "digest": None}
        if job == "dcp":
            import dcp_compare
            ns = types.SimpleNamespace(build=args.build, hidden=args.hidden, fio="fio",
                                       folder=os.path.dirname(scratch),
                                       torch_threads=int(method[7:]) if method != "nvmeio" else 1)
            r = dcp_compare.run(ns, "nvmeio" if method == "nvmeio" else "torch", op,
                                os.path.join(args.folder, "out", "dcp.checkpoint." + method),
                                args.size)
            return {"seconds": r["seconds"], "bytes": r["bytes"], "digest": None}
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", job, method,
                               op, args.folder, scratch, str(args.size), str(args.hidden)],
                              capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0:
            return {"error": (done.stderr or done.stdout).strip()[-1500:]}
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if not (job == "dcp" and op == "save"):  # a DCP load reads its method's save
            for path in (scratch, scratch + ".bin", scratch + ".0", scratch + ".1"):
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else \
                    os.path.exists(path) and os.remove(path)


def prepare(args, jobs):
    """The files every method of a job reads: the model's shards (written by nvmeio_torch, as
    the package writes them), a checkpoint torch.save wrote, a file of random bytes."""
    data = args.folder
    os.makedirs(data, exist_ok=True)
    if "safetensors" in jobs and not os.path.exists(os.path.join(data, "model")):
        from safetensors_compare import make_model
        os.makedirs(os.path.join(data, "model"))
        make_model(types.SimpleNamespace(size=args.size, shards=3,
                                         folder=os.path.join(data, "model")))
    if {"torch", "fastpersist"} & set(jobs) and \
            not os.path.exists(os.path.join(data, "checkpoint.pt")):
        import torch
        from torch_checkpoint_compare import gpt_state_dict
        torch.save(gpt_state_dict(args.size, args.hidden), os.path.join(data, "checkpoint.pt"))
    path = os.path.join(data, "data.bin")
    if {"ds_handle", "kvikio", "dcp"} & set(jobs) and \
            (not os.path.exists(path) or os.path.getsize(path) < args.size):
        chunk = os.urandom(64 * MiB)
        with open(path, "wb") as f:
            for _ in range(-(-args.size // len(chunk))):
                f.write(chunk)
    os.sync()


def versions():
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def machine(folder):
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                   platform.processor())
    disk = subprocess.run(["df", "--output=source,fstype", folder], capture_output=True,
                          text=True).stdout.split("\n")[1].split()
    return f"{cpu}, {os.cpu_count()} CPUs, kernel {platform.release()}, {' '.join(disk)}"


def rates(runs, job, op, method):
    return {r["round"]: r["bytes"] / r["seconds"] for r in runs
            if (r["job"], r["op"], r["method"]) == (job, op, method) and "seconds" in r}


def best_setting(runs, job, op):
    """Of a peer measured at several settings, the one with the highest median rate."""
    candidates = [m for m in JOBS[job][op] if m.startswith(TUNED[job])]
    return max(candidates, key=lambda m: statistics.median(rates(runs, job, op, m).values() or [0]))


def report(args, runs, jobs):
    lines = []
    say = lines.append
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout
    say(f"peers_compare: {machine(args.folder)}; {args.size / GiB:g} GiB per job; "
        f"{args.rounds} rounds, methods interleaved in an order shuffled per round; page cache "
        "dropped before every run")
    say("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) +
        f", fio {fio_version.strip()}")
    say(f"{'job':12}{'op':10}{'method':16}{'GiB/s':>7}{'s':>7}{'/fio':>6}{'nvmeio/it':>10}"
        f"{'goal':>6}  verdict")
    for job in jobs:
        for op, methods in JOBS[job].items():
            fio_rate = rates(runs, job, op, "fio")
            mine = rates(runs, job, op, "nvmeio")
            peers = [m for m in methods if m not in ("nvmeio", "fio")]
            best = best_setting(runs, job, op) if job in TUNED else None
            for m in methods:
                r = rates(runs, job, op, m)
                errors = [x["error"] for x in runs if (x["job"], x["op"], x["method"]) ==
                          (job, op, m) and "error" in x]
                if not r:
                    say(f"{job:12}{op:10}{m:16}  could not run: "
                        f"{errors[0].splitlines()[-1] if errors else 'no runs'}")
                    continue
                rate = statistics.median(r.values())
                seconds = statistics.median(x["seconds"] for x in runs if
                                            (x["job"], x["op"], x["method"]) == (job, op, m)
                                            and "seconds" in x)
                vs_fio = median_ratio(r, fio_rate) if m != "fio" else None
                line = f"{job:12}{op:10}{m:16}{rate / GiB:7.2f}{seconds:7.2f}" + \
                    (f"{vs_fio:6.2f}" if vs_fio else f"{'':6}")
                goal = GOALS.get((job, op, "best" if m == best else m))
                if m in peers and mine:
                    ratio = median_ratio(mine, r)
                    line += f"{ratio:10.2f}"
                    if goal:
                        near = vs_fio is not None and vs_fio >= 0.5
                        mine_fio = median_ratio(mine, fio_rate)
                        met = ratio >= 1.0 and mine_fio >= 0.9 if near else ratio >= goal
                        line += (f"{'0.9f':>6}" if near else f"{goal:6.1f}") + \
                            ("  met" if met else "  SHORT") + \
                            (f" (peer {vs_fio:.2f}x fio: goal 0.9x fio and 1.0x it; nvmeio "
                             f"{mine_fio:.2f}x fio)" if near else "") + \
                            ("  [its best setting]" if m == best else "")
                say(line)
    say("/fio: the median of per-round rate ratios to fio on the same bytes; nvmeio/it: nvmeio's "
        "rate over the method's, per round, median")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True, help="where the files go (O_DIRECT-capable)")
    p.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    p.add_argument("--rounds", type=count_arg, default=3)
    p.add_argument("--size", type=size_arg, default="2G", help="bytes per job (DeepSpeed's "
                   "handle ops take at most 1 GiB of it)")
    p.add_argument("--hidden", type=count_arg, default=2048)
    p.add_argument("--build", default=os.path.join(ROOT, "build-bench"))
    p.add_argument("--seed", type=int, default=54)
    p.add_argument("--json", help="write every run and the table here")
    p.add_argument("--keep", action="store_true",
                   help="keep the input files (model/, checkpoint.pt, data.bin) for a later run")
    args = p.parse_args()
    args.build = os.path.abspath(args.build)
    args.folder = os.path.abspath(args.folder)
    if shutil.which("fio") is None:
        sys.exit("peers_compare: fio is not installed")
    if not drop_caches():
        sys.exit("peers_compare: cannot drop the page cache (run as root); no cold figures")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(args.build, "python"), HERE] +
        ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    env["KVIKIO_COMPAT_MODE"] = "ON"
    sys.path.insert(0, os.path.join(args.build, "python"))
    prepare(args, args.jobs)
    rng = random.Random(args.seed)
    runs = []
    begin = time.perf_counter()
    for round_ in range(args.rounds):
        for job in args.jobs:
            for op, methods in JOBS[job].items():
                for method in rng.sample(methods, len(methods)):
                    r = run_one(job, method, op, args, env)
                    r.update(job=job, op=op, method=method, round=round_)
                    runs.append(r)
                    shown = f"{r['bytes'] / GiB / r['seconds']:6.2f} GiB/s" if "seconds" in r \
                        else "failed: " + r["error"].splitlines()[-1][:100]
                    print(f"  [{time.perf_counter() - begin:5.0f} s] round {round_} {job} {op} "
                          f"{method}: {shown}", flush=True)
            if job == "dcp":
                shutil.rmtree(os.path.join(args.folder, "out"), ignore_errors=True)
    table = report(args, runs, args.jobs)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "versions": versions(), "runs": runs}, f, indent=1)
    if not args.keep:
        for name in ("model", "out", "checkpoint.pt", "data.bin"):
            path = os.path.join(args.folder, name)
            shutil.rmtree(path) if os.path.isdir(path) else \
                os.path.exists(path) and os.remove(path)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()

#!/usr/bin/env python3
"""Loading a sharded safetensors model: nvmeio_torch.safetensors.load_files against what users
run now, written here from the format: an mmap-based loader (the package's classic default: map
each shard, copy each tensor out) and parallel buffered pread into per-tensor buffers (its pread
backend: min(CPUs, 8) threads, one pread per tensor, the GIL released); where the package is
installed, methods package (its load_file) and package_pread (load_file(backend="pread"), in
versions that have it); nvmeio_wN (load_files on a handle of N workers); fio reading the same
bytes with O_DIRECT; stream() under a cap and uncapped; and (method fresh_memory, no I/O) what
bringing fresh memory of the model's size into use costs.

Each run is a fresh process with the page cache dropped before it; methods in an order shuffled
per round; medians of the load's wall time (imports and process start left out; a byte of every
page of every tensor read inside it, so that a loader returning tensors over a mapping pays for
the reads it put off) and per-round ratios. Every method's tensors are checked against the
others' (a digest of each tensor's first and last 4 KiB), and each run's peak resident memory is
taken against the bytes it loaded.

    bench/safetensors_compare.py --folder DIR [--size 2.25G] [--shards 4] [--rounds 5]
        [--build build-st] [--cap 256M] [--json out.json]
"""

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "support"))
from measure import count_arg, drop_caches, median_ratio, size_arg  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30

CHILD = r"""
import concurrent.futures, json, mmap, os, struct, sys, time, zlib
import torch
import nvmeio_torch.safetensors as st

TYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
         "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
         "U8": torch.uint8, "BOOL": torch.bool}

def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024

def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return 8 + n, sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])

def load_mmap(paths):
    # The package's default: map the file, then each tensor copied out of the mapping.
    out = {}
    for path in paths:
        start, entries = header(path)
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for name, e in entries:
            b, end = e["data_offsets"]
            t = torch.empty(e["shape"], dtype=TYPES[e["dtype"]])
            if end > b:
                src = torch.frombuffer(mm, dtype=torch.uint8, count=end - b, offset=start + b)
                t.view(-1).view(torch.uint8).copy_(src)
                del src
            out[name] = t
        mm.close()
    return out

def load_pread(paths):
    # The package's pread backend: a buffer per tensor, min(CPUs, 8) threads, one pread each.
    out, jobs, fds = {}, [], []
    for path in paths:
        start, entries = header(path)
        fd = os.open(path, os.O_RDONLY)
        fds.append(fd)
        for name, e in entries:
            t = torch.empty(e["shape"], dtype=TYPES[e["dtype"]])
            out[name] = t
            b, end = e["data_offsets"]
            if end > b:
                jobs.append((fd, t, start + b, end - b))
    def read(job):
        fd, t, offset, n = job
        view = memoryview(t.view(-1).view(torch.uint8).numpy())
        done = 0
        while done < n:
            got = os.preadv(fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError("short read")
            done += got
    with concurrent.futures.ThreadPoolExecutor(min(os.cpu_count(), 8)) as pool:
        list(pool.map(read, jobs))
    for fd in fds:
        os.close(fd)
    return out

def digest(tensors):
    d = 0
    for name in sorted(tensors):
        b = tensors[name].reshape(-1).view(torch.uint8)
        d = zlib.crc32(name.encode(), d)
        d = zlib.crc32(b[:4096].numpy().tobytes(), d)
        d = zlib.crc32(b[-4096:].numpy().tobytes(), d)
    return d

method, index, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
paths = sorted(os.path.join(os.path.dirname(index), f) for f in set(json.load(open(index))["weight_map"].values()))
before = rss("VmRSS:")
start = time.perf_counter()
if method == "nvmeio":
    tensors = st.load_files(index)
elif method.startswith("nvmeio_w"):  # nvmeio_wN: a handle of N workers instead of the default
    from nvmeio_torch._files import make_handle
    tensors = st.load_files(index, handle=make_handle(intra_op_parallelism=int(method[8:])))
elif method == "mmap":
    tensors = load_mmap(paths)
elif method == "pread":
    tensors = load_pread(paths)
elif method in ("package", "package_pread"):
    # The safetensors package itself, where installed: its load_file per shard (its default,
    # or its pread backend for package_pread).
    from safetensors.torch import load_file
    kwargs = {"backend": "pread"} if method == "package_pread" else {}
    tensors = {}
    for path in paths:
        tensors.update(load_file(path, **kwargs))
elif method == "fresh_memory":
    # No I/O: what a load pays to bring fresh memory of the model's size into use (the kernel
    # faults in and zeroes every page), which fio, reusing its buffers, never pays.
    from nvmeio_torch import _C
    arenas = [_C.aligned_tensor(os.path.getsize(p)) for p in paths]
    for a in arenas:
        a[::4096].fill_(1)
    tensors = {"arena%d" % i: a for i, a in enumerate(arenas)}
else:  # stream, keeping a digest as it goes, not the tensors
    tensors, total, d = {}, 0, 0
    for name, t in st.stream(index, max_bytes=cap):
        total += t.numel() * t.element_size()
        tensors[name] = torch.cat([t.reshape(-1).view(torch.uint8)[:4096], t.reshape(-1).view(torch.uint8)[-4096:]])
        del t
if not method.startswith("stream"):
    # Every page of every tensor read inside the clock: a loader that maps the file and returns
    # tensors over the mapping (the package's since 0.6) pays here for the reads it put off.
    for t in tensors.values():
        if t.numel():
            b = t.reshape(-1).view(torch.uint8)
            b[::4096].sum() + b[-1]  # the last byte: the last page may be partial
seconds = time.perf_counter() - start
grown = rss("VmHWM:") - before
if method.startswith("stream"):
    loaded = total
    d = 0
    for name in sorted(tensors):
        b = tensors[name]
        half = len(b) // 2
        d = zlib.crc32(name.encode(), d)
        d = zlib.crc32(b[:half].numpy().tobytes(), d)
        d = zlib.crc32(b[half:].numpy().tobytes(), d)
else:
    loaded = sum(t.numel() * t.element_size() for t in tensors.values())
    d = digest(tensors) if method != "fresh_memory" else None
print(json.dumps({"seconds": seconds, "bytes": loaded, "grown": grown, "digest": d}))
"""



def make_model(args):
    """A GPT-style model (hidden 2048, bf16 weights, f32 norms) of about ``args.size`` bytes in
    ``args.shards`` shards written by nvmeio_torch.safetensors.save_file, with its index."""
    import torch
    import nvmeio_torch.safetensors as st

    hidden = 2048
    layer = {"attn.qkv.weight": (3 * hidden, hidden), "attn.qkv.bias": (3 * hidden,),
             "attn.out.weight": (hidden, hidden), "attn.out.bias": (hidden,),
             "mlp.up.weight": (4 * hidden, hidden), "mlp.up.bias": (4 * hidden,),
             "mlp.down.weight": (hidden, 4 * hidden), "mlp.down.bias": (hidden,),
             "ln1.weight": (hidden,), "ln1.bias": (hidden,), "ln2.weight": (hidden,),
             "ln2.bias": (hidden,)}
    names = [("embed.weight", (50304, hidden), torch.bfloat16)]
    layer_bytes = sum(2 * torch.Size(s).numel() for s in layer.values())
    for i in range(max(1, (args.size - 50304 * hidden * 2) // layer_bytes)):
        for name, shape in layer.items():
            dtype = torch.float32 if name.startswith("ln") else torch.bfloat16
            names.append((f"layers.{i}.{name}", shape, dtype))
    total = sum(torch.Size(s).numel() * (4 if d == torch.float32 else 2) for _, s, d in names)
    per_shard = total / args.shards
    shards, current, size = [], [], 0
    for entry in names:
        current.append(entry)
        size += torch.Size(entry[1]).numel() * (4 if entry[2] == torch.float32 else 2)
        if size >= per_shard * (len(shards) + 1) and len(shards) < args.shards - 1:
            shards.append(current)
            current = []
    shards.append(current)
    weight_map = {}
    g = torch.Generator().manual_seed(0)
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {name: torch.randint(-2 ** 15, 2 ** 15, shape, generator=g, dtype=torch.int16).view(dtype)
                   if dtype == torch.bfloat16 else torch.randn(shape, generator=g, dtype=dtype)
                   for name, shape, dtype in shard}
        st.save_file(tensors, os.path.join(args.folder, file), durable=False)
        weight_map.update({name: file for name, _, _ in shard})
        del tensors
    index = os.path.join(args.folder, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return index, total


def fio_run(paths, block_size, queue_depth):
    """fio reading every shard whole (to its last full 4 KiB), one job per shard at once,
    O_DIRECT, io_uring; its own rate over its own run time."""
    command = ["fio", "--output-format=json", "--direct=1", "--ioengine=io_uring", "--rw=read",
               f"--bs={block_size}", f"--iodepth={queue_depth}", "--group_reporting"]
    for i, path in enumerate(paths):
        size = os.path.getsize(path) // 4096 * 4096
        command += [f"--name=shard{i}", f"--filename={path}", f"--size={size}"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]["read"]
    return {"seconds": job["io_bytes"] / job["bw_bytes"], "bytes": job["io_bytes"], "grown": 0}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--folder", required=True, help="where the model goes (O_DIRECT-capable)")
    p.add_argument("--size", type=size_arg, default="2.25G")
    p.add_argument("--shards", type=count_arg, default=4)
    p.add_argument("--rounds", type=count_arg, default=5)
    p.add_argument("--cap", type=size_arg, default=256 * MiB, help="stream's max_bytes")
    p.add_argument("--build", default=os.path.join(ROOT, "build-st"))
    p.add_argument("--methods", nargs="+",
                   default=["nvmeio", "mmap", "pread", "fio", "stream_cap", "stream_uncapped"])
    p.add_argument("--keep", action="store_true", help="keep the model's files")
    p.add_argument("--json", help="write every run here")
    args = p.parse_args()
    if "fio" in args.methods and shutil.which("fio") is None:
        sys.exit("safetensors_compare: fio is not installed")
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    sys.path.insert(0, env["PYTHONPATH"])
    os.makedirs(args.folder, exist_ok=True)
    index, total = make_model(args)
    paths = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder)
                   if f.endswith(".safetensors"))
    largest = max(os.path.getsize(p) for p in paths)
    caps = {"stream_cap": args.cap, "stream_uncapped": 3 * largest + (1 << 20)}
    print(f"safetensors_compare: {total / GiB:.2f} GiB in {len(paths)} shards under {args.folder}; "
          f"{platform.node()}, {os.cpu_count()} CPUs, kernel {platform.release()}; "
          f"stream cap {args.cap / MiB:.0f} MiB; {args.rounds} rounds", flush=True)
    runs, cold, digests = [], True, {}
    for round_ in range(args.rounds):
        for method in random.sample(args.methods, len(args.methods)):
            cold = drop_caches() and cold
            if method == "fio":
                r = fio_run(paths, 1 << 20, 32)
            else:
                done = subprocess.run([sys.executable, "-c", CHILD, method, index,
                                       str(caps.get(method, 0))],
                                      env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"{method} failed: {done.stderr[-3000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                if r["digest"] is not None and \
                        digests.setdefault("tensors", r["digest"]) != r["digest"]:
                    sys.exit(f"{method}: the tensors differ from an earlier run's")
            r.update(method=method, round=round_, gib_per_s=r["bytes"] / GiB / r["seconds"])
            runs.append(r)
            print(f"  round {round_} {method:16} {r['seconds']:7.3f} s {r['gib_per_s']:6.2f} GiB/s "
                  f"peak RSS {r['grown'] / max(r['bytes'], 1):.3f}x bytes", flush=True)
    if not args.keep:
        shutil.rmtree(args.folder, ignore_errors=True)
    rates = {m: {r["round"]: r["gib_per_s"] for r in runs if r["method"] == m} for m in args.methods}
    growth = {m: statistics.median(r["grown"] / r["bytes"] for r in runs if r["method"] == m)
              for m in args.methods}
    print(("page cache dropped before every run" if cold else
           "WARNING: page cache NOT dropped: these are not cold reads"))
    refs = [m for m in ("mmap", "pread", "package", "package_pread", "fio", "stream_uncapped",
                        "nvmeio") if m in args.methods]
    print(f"{'method':16}{'GiB/s':>8}{'s':>8}{'RSS/bytes':>10}" + "".join(f"{'/' + m:>17}" for m in refs))
    for m in args.methods:
        seconds = statistics.median(r["seconds"] for r in runs if r["method"] == m)
        line = f"{m:16}{statistics.median(rates[m].values()):8.2f}{seconds:8.3f}{growth[m]:10.3f}"
        for ref in refs:
            ratios = [rates[m][k] / rates[ref][k] for k in rates[m] if k in rates[ref]]
            line += f"{median_ratio(rates[m], rates[ref]):9.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"folder": args.folder, "bytes": total, "shards": len(paths),
                       "cap": args.cap, "cold": cold, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()

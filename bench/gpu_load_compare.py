#!/usr/bin/env python3
"""A model to and from a GPU: nvmeio_torch's loads and saves through the staging ring against
what users run now, and against the two rates that bound them, measured in the same rounds.

Loads (a safetensors file, and the same tensors as a torch.save file):
  nvmeio        safetensors.load_file(path, device="cuda:0")   (the ring)
  nvmeio_cpu_to nvmeio's CPU load_file, then .to("cuda:0") per tensor
  package       the safetensors package's load_file(path, device="cuda:0"), where installed
  torch_load    torch.load(pt, map_location="cuda:0")
  nvmeio_pt     nvmeio_torch.load(pt, map_location="cuda:0")   (the ring)
  fio_read      fio reading the safetensors file, O_DIRECT, libaio, 1 MiB x 32
Saves (the same tensors made on the GPU):
  nvmeio_save   nvmeio_torch.save(state, path)                 (GPU -> ring -> O_DIRECT, durable)
  torch_save    torch.save(state, f) + flush + fsync
  fio_write     fio writing as many bytes, O_DIRECT, libaio, 1 MiB x 32
and, once a round, h2d: the pinned host-to-device rate as torch measures it (1 GiB of pinned
memory, .to(device, non_blocking=True), synchronize; the best of 5).

Each run is a fresh process; the page cache is dropped before every one (refused: the run says
it is not cold); methods in an order shuffled per round. A run times its call alone (process
start, imports and CUDA's start left out), synchronizes the device inside the clock, and
reports its peak resident memory (VmHWM) and the device's peak allocated bytes. Medians and
per-round ratios.

    bench/gpu_load_compare.py --folder DIR [--size 2G] [--rounds 3] [--device cuda:0]
        [--fio PATH] [--json out.json]
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
LOADS = ["nvmeio", "nvmeio_cpu_to", "package", "torch_load", "nvmeio_pt"]
SAVES = ["nvmeio_save", "torch_save"]

# The model: layers of bf16 matrices (16 MiB each) and small fp32 norms, as an LLM's shards.
CHILD = r"""
import json, os, sys, time
import torch
method, folder, size, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cuda = device.startswith("cuda")

def state_on(where):
    g = torch.Generator(device=where).manual_seed(0)
    state, total, i = {}, 0, 0
    while total < size:
        state[f"layers.{i}.weight"] = torch.randn(4096, 2048, generator=g, device=where).to(
            torch.bfloat16)
        state[f"layers.{i}.norm"] = torch.randn(4096, generator=g, device=where)
        total += 4096 * 2048 * 2 + 4096 * 4
        i += 1
    return state

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0

def sync():
    if cuda:
        torch.cuda.synchronize(device)

st_path, pt_path = os.path.join(folder, "model.safetensors"), os.path.join(folder, "model.pt")
if cuda:
    torch.zeros(1, device=device)
    torch.cuda.reset_peak_memory_stats(device)
if method == "make":
    from nvmeio_torch import safetensors
    state = state_on("cpu")
    safetensors.save_file(state, st_path)
    torch.save(state, pt_path)
    print(json.dumps({"bytes": os.path.getsize(st_path), "tensors": len(state)}))
    sys.exit(0)
if method in ("nvmeio_save", "torch_save"):
    state = state_on(device)
    sync()
    out = os.path.join(folder, "saved.pt")
    start_rss = hwm()
    start = time.perf_counter()
    if method == "nvmeio_save":
        import nvmeio_torch
        nvmeio_torch.save(state, out)
    else:
        with open(out, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    seconds = time.perf_counter() - start
    nbytes = os.path.getsize(out)
    os.unlink(out)
    print(json.dumps({"seconds": seconds, "bytes": nbytes, "hwm": hwm(), "hwm_before": start_rss,
                      "gpu_peak": torch.cuda.max_memory_allocated(device) if cuda else 0}))
    sys.exit(0)
if method == "h2d":
    pinned = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    target = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    best = None
    for _ in range(5):
        sync()
        start = time.perf_counter()
        target.copy_(pinned, non_blocking=True)
        sync()
        seconds = time.perf_counter() - start
        best = seconds if best is None else min(best, seconds)
    print(json.dumps({"seconds": best, "bytes": 1 << 30}))
    sys.exit(0)
start_rss = hwm()
start = time.perf_counter()
if method == "nvmeio":
    from nvmeio_torch import safetensors
    tensors = safetensors.load_file(st_path, device=device)
elif method == "nvmeio_cpu_to":
    from nvmeio_torch import safetensors
    tensors = {k: v.to(device) for k, v in safetensors.load_file(st_path).items()}
elif method == "package":
    from safetensors.torch import load_file
    tensors = load_file(st_path, device=device)
elif method == "torch_load":
    tensors = torch.load(pt_path, map_location=device)
elif method == "nvmeio_pt":
    import nvmeio_torch
    tensors = nvmeio_torch.load(pt_path, map_location=device)
sync()
seconds = time.perf_counter() - start
# A check: a digest of every tensor's first and last elements, the same for every method.
digest = float(sum(t.reshape(-1)[:64].float().sum().item() + t.reshape(-1)[-64:].float().sum().item()
                   for t in tensors.values()))
print(json.dumps({"seconds": seconds, "bytes": os.path.getsize(st_path), "hwm": hwm(),
                  "hwm_before": start_rss, "digest": digest,
                  "gpu_peak": torch.cuda.max_memory_allocated(device) if cuda else 0,
                  "tensor_bytes": sum(t.numel() * t.element_size() for t in tensors.values())}))
"""


def run_child(method, folder, size, device, env):
    out = subprocess.run([sys.executable, "-c", CHILD, method, folder, str(size), device],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_fio(fio, op, path, size):
    args = [fio, "--name=ring", f"--filename={path}", f"--rw={op}", "--bs=1M", "--iodepth=32",
            "--ioengine=libaio", "--direct=1", f"--size={size}", "--output-format=json"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0][op]
    return {"seconds": job["runtime"] / 1000.0, "bytes": job["io_bytes"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--size", type=size_arg, default=2 * GiB)
    parser.add_argument("--rounds", type=count_arg, default=3)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--fio", default=shutil.which("fio") or "fio")
    parser.add_argument("--json")
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")

    made = run_child("make", args.folder, args.size, args.device, env)
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; folder {args.folder}; model {made}; device {args.device}",
          flush=True)
    if "error" in made:
        sys.exit(f"gpu_load_compare: could not make the model: {made['error']}")
    st_path = os.path.join(args.folder, "model.safetensors")
    fio_out = os.path.join(args.folder, "fio.bin")
    runs = {}  # method -> {round: result}
    methods = LOADS + SAVES + ["fio_read", "fio_write", "h2d"]
    cold = True
    for r in range(args.rounds):
        order = methods[:]
        random.Random(r).shuffle(order)
        for method in order:
            if method == "h2d" and not args.device.startswith("cuda"):
                continue
            cold = drop_caches() and cold
            if method == "fio_read":
                result = run_fio(args.fio, "read", st_path, made["bytes"])
            elif method == "fio_write":
                result = run_fio(args.fio, "write", fio_out, made["bytes"])
                if os.path.exists(fio_out):
                    os.unlink(fio_out)
            else:
                result = run_child(method, args.folder, args.size, args.device, env)
            runs.setdefault(method, {})[r] = result
            print(f"round {r} {method}: {json.dumps(result)}", flush=True)
    if not cold:
        print("NOT COLD: the page cache could not be dropped (not root)")

    def rate(result):
        return result["bytes"] / result["seconds"] / 1e9 if "seconds" in result else None

    rates = {m: {r: rate(x) for r, x in by.items() if rate(x)} for m, by in runs.items()}
    print(f"\n{'method':<14} {'GB/s median':>11} {'peak RSS MiB':>13} {'GPU peak MiB':>13}")
    for m, by in rates.items():
        if not by:
            print(f"{m:<14} failed: {next(iter(runs[m].values())).get('error')}")
            continue
        hwm = [x.get("hwm", 0) for x in runs[m].values() if "hwm" in x]
        gpu = [x.get("gpu_peak", 0) for x in runs[m].values() if "gpu_peak" in x]
        print(f"{m:<14} {statistics.median(by.values()):>11.2f} "
              f"{(max(hwm) / MiB if hwm else 0):>13.0f} {(max(gpu) / MiB if gpu else 0):>13.0f}")
    digests = {m: {round(x["digest"], 1) for x in by.values() if "digest" in x}
               for m, by in runs.items()}
    agreed = {d for s in digests.values() for d in s}
    print(f"\ndigests agree across load methods: {len(agreed) <= 1} {sorted(agreed)}")
    # The lower of fio's read and the pinned H2D rate, per round.
    bound = {r: min(rates.get("fio_read", {}).get(r, float("inf")),
                    rates.get("h2d", {}).get(r, float("inf"))) for r in range(args.rounds)}
    bound = {r: b for r, b in bound.items() if b != float("inf")}
    ratios = {
        "nvmeio / min(fio_read, h2d)": median_ratio(rates.get("nvmeio", {}), bound),
        "nvmeio / fio_read": median_ratio(rates.get("nvmeio", {}), rates.get("fio_read", {})),
        "nvmeio / package": median_ratio(rates.get("nvmeio", {}), rates.get("package", {})),
        "nvmeio / nvmeio_cpu_to": median_ratio(rates.get("nvmeio", {}),
                                               rates.get("nvmeio_cpu_to", {})),
        "nvmeio / torch_load": median_ratio(rates.get("nvmeio", {}), rates.get("torch_load", {})),
        "nvmeio_pt / torch_load": median_ratio(rates.get("nvmeio_pt", {}),
                                               rates.get("torch_load", {})),
        "nvmeio_save / torch_save": median_ratio(rates.get("nvmeio_save", {}),
                                                 rates.get("torch_save", {})),
        "nvmeio_save / fio_write": median_ratio(rates.get("nvmeio_save", {}),
                                                rates.get("fio_write", {})),
    }
    print("\nper-round ratios, medians (rates):")
    for name, value in ratios.items():
        print(f"  {name:<30} {'n/a' if value is None else f'{value:.2f}'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "ratios": ratios, "cold": cold, "model": made}, f, indent=1)


if __name__ == "__main__":
    main()

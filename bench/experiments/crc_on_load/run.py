"""nvmeio_torch.load with and without its CRC-32 check, cold, interleaved (A B A B ...), in fresh
processes: what the check costs a user. Usage: run.py FOLDER [GiB] [rounds]."""
import os
import statistics
import subprocess
import sys
import time

folder = sys.argv[1]
gib = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
path = os.path.join(folder, "crc_on_load.pt")
python = sys.executable

if not os.path.exists(path):
    subprocess.run([python, "-c", f"""
import torch, nvmeio_torch
n = int({gib} * (1 << 30)) // 4 // 8
g = torch.Generator().manual_seed(1)
nvmeio_torch.save({{f"layer{{i}}": torch.randn(n, generator=g) for i in range(8)}}, {path!r})
"""], check=True)

LOAD = """
import sys, time, nvmeio_torch
start = time.perf_counter()
state = nvmeio_torch.load(sys.argv[1], verify_crc=sys.argv[2] == "1")
print(time.perf_counter() - start)
"""


def cold_load(verify):
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
    out = subprocess.run([python, "-c", LOAD, path, "1" if verify else "0"], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


size = os.path.getsize(path)
times = {True: [], False: []}
for r in range(rounds):
    for verify in (False, True) if r % 2 == 0 else (True, False):
        times[verify].append(cold_load(verify))
        print(f"round {r} verify={verify}: {times[verify][-1]:.3f} s", flush=True)
for verify in (False, True):
    t = statistics.median(times[verify])
    print(f"verify_crc={verify}: median {t:.3f} s, {size / t / 1e9:.2f} GB/s "
          f"(min {min(times[verify]):.3f}, max {max(times[verify]):.3f})")
print(f"with / without: {statistics.median(times[True]) / statistics.median(times[False]):.3f}")

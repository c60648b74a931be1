#!/usr/bin/env python3
"""What the CRC-32 and the copy cost a checkpoint save: nvmeio_torch.save with the folded CRC
(_C.crc32), with zlib.crc32 in its place and with no CRC at all (`save_nocrc`: every CRC 0, a
file zipfile rejects: the bound on what any CRC scheme could gain), the CRCs alone both ways (no
I/O), the tensors' bytes alone written in one batch (make_handle(), 4 KiB-aligned offsets, fsync)
from torch's memory (`write_torch`: bounced where the device needs more alignment than torch's
64 bytes) and from aligned copies made before the clock starts (`write_aligned`: no copy), and
fio writing the same bytes (1 MiB blocks, io_uring, depth 32, O_DIRECT, end_fsync). The state
dict is the one of torch_checkpoint_compare.py. Every run a fresh process, the page cache dropped
before it, the methods in a shuffled order per round; seconds of the operation alone.

    bench/checkpoint_crc_compare.py --folder DIR [--rounds 7] [--build build-test-g++-17]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "support"))
from measure import count_arg, drop_caches  # noqa: E402

METHODS = ("save", "save_zlib", "save_nocrc", "crc", "crc_zlib", "write_torch", "write_aligned",
           "fio")

CHILD = r"""
import sys, time, zlib
from concurrent.futures import ThreadPoolExecutor
import torch
sys.path.insert(0, sys.argv[3])
from torch_checkpoint_compare import gpt_state_dict
import os
import nvmeio_torch
from nvmeio_torch import _C, _zip
from nvmeio_torch._files import make_handle
method, path = sys.argv[1], sys.argv[2]
sd = gpt_state_dict(2 << 30, 2048)
if method.endswith("zlib"):
    _zip._crc32_piece = zlib.crc32
if method == "save_nocrc":
    _zip._crc32_piece = lambda data, value=0: 0
tensors = [t.contiguous().view(-1).view(torch.uint8) for t in sd.values()]
if method == "write_aligned":
    tensors = [_C.aligned_tensor(t.numel(), False).copy_(t) for t in tensors]
offsets = [0]
for t in tensors[:-1]:
    offsets.append(offsets[-1] + _zip.align_up(t.numel()))
handle = make_handle()
start = time.perf_counter()
if method.startswith("write"):
    open(path, "wb").close()
    handle.sync_pwrite_batch(tensors, path, offsets)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
elif method.startswith("crc"):
    with ThreadPoolExecutor(2) as executor:
        crcs = _zip.crc32_pieces(executor)
        indices = [crcs.add(t.numpy()) for t in tensors]
        [crcs.result(i) for i in indices]
else:
    nvmeio_torch.save(sd, path, handle=handle)
print(time.perf_counter() - start)
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", required=True)
    p.add_argument("--rounds", type=count_arg, default=7)
    p.add_argument("--build", default=os.path.join(ROOT, "build-test-g++-17"))
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(args.build), "python"))
    path = os.path.join(args.folder, "crc_compare.pt")
    seconds = {m: [] for m in METHODS}
    for r in range(args.rounds):
        order = list(METHODS)
        random.shuffle(order)
        for m in order:
            drop_caches()
            if m == "fio":
                size = os.path.getsize(path) if os.path.exists(path) else 2 << 30
                out = subprocess.run(
                    ["fio", "--name=w", f"--filename={path}.fio", "--rw=write", "--bs=1M",
                     "--iodepth=32", "--ioengine=io_uring", "--direct=1", f"--size={size}",
                     "--end_fsync=1", "--output-format=json"],
                    capture_output=True, text=True, check=True)
                seconds[m].append(json.loads(out.stdout)["jobs"][0]["job_runtime"] / 1000)
                os.remove(path + ".fio")
            else:
                out = subprocess.run([sys.executable, "-c", CHILD, m, path, HERE], env=env,
                                     capture_output=True, text=True, check=True)
                seconds[m].append(float(out.stdout))
        print(json.dumps({"round": r + 1, **{m: round(seconds[m][-1], 3) for m in METHODS}}),
              flush=True)
    if os.path.exists(path):
        os.remove(path)
    print("method         median s  per round")
    for m in METHODS:
        print(f"{m:14} {statistics.median(seconds[m]):8.3f}  "
              + " ".join(f"{x:.3f}" for x in seconds[m]))
    ratio = [a / b for a, b in zip(seconds["save"], seconds["save_zlib"])]
    print(f"save / save_zlib (time), median of rounds: {statistics.median(ratio):.2f} "
          f"({min(ratio):.2f}-{max(ratio):.2f})")
    for m in ("save", "save_nocrc", "write_torch", "write_aligned"):
        ratio = [b / a for a, b in zip(seconds[m], seconds["fio"])]
        print(f"{m} rate / fio rate, median of rounds: {statistics.median(ratio):.2f} "
              f"({min(ratio):.2f}-{max(ratio):.2f})")


if __name__ == "__main__":
    main()

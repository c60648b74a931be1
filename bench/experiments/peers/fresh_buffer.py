"""The kvikio row's nvmeio read, alone: one 2 GiB sync_pread into a fresh torch.empty against the
same into a buffer touched first, page cache dropped before each (as root).

    PYTHONPATH=build-bench/python python fresh_buffer.py fresh|touched FILE
"""
import sys
import time

import torch
from nvmeio_torch._files import make_handle

h = make_handle()
b = torch.empty(2 << 30, dtype=torch.uint8)
if sys.argv[1] == "touched":
    b.fill_(0)
s = time.perf_counter()
assert h.sync_pread(b, sys.argv[2]) == 1
print(sys.argv[1], (2 << 30) / (time.perf_counter() - s) / 2**30, "GiB/s")

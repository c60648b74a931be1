"""FastPersist end to end: torch.save through DeepSpeed's own FastFileWriter (deepspeed.io, as
run.sh copies it in) on the handle AsyncIOBuilder().load() gives, then torch.load and compare.
FastFileWriter writes through a descriptor opened O_DIRECT|O_WRONLY, reopens it O_APPEND for the
unaligned tail, and asserts on every return code. Checks that no descriptor is left open.

    python3 fast_persist_check.py FOLDER
"""

import os
import sys

import torch
from deepspeed.io import FastFileWriter, FastFileWriterConfig
from deepspeed.ops.op_builder import AsyncIOBuilder


def main(folder):
    module = AsyncIOBuilder().load()
    h = module.aio_handle(block_size=1 << 20, queue_depth=8, single_submit=False,
                          overlap_events=True, intra_op_parallelism=2)
    pinned = h.new_cpu_locked_tensor(8 << 20, torch.empty(0, dtype=torch.uint8))
    g = torch.Generator().manual_seed(3)
    state = {f"layer{i}.weight": torch.randn(1000 + 37 * i, 129, generator=g) for i in range(12)}
    state["step"] = 1234
    before = len(os.listdir("/proc/self/fd"))
    for double_buffer in (False, True):
        path = os.path.join(folder, f"fast_persist_{int(double_buffer)}.pt")
        config = FastFileWriterConfig(dnvme_handle=h, pinned_tensor=pinned,
                                      double_buffer=double_buffer, num_parallel_writers=1,
                                      writer_rank=0)
        writer = FastFileWriter(file_path=path, config=config)
        torch.save(obj=state, f=writer)
        writer.close()
        loaded = torch.load(path)
        assert loaded.keys() == state.keys()
        assert all(torch.equal(loaded[k], v) if torch.is_tensor(v) else loaded[k] == v
                   for k, v in state.items())
        os.remove(path)
    assert len(os.listdir("/proc/self/fd")) == before, "a descriptor was left open"
    print(f"FastPersist through {module.__name__}: 2 checkpoints saved and loaded exactly")


if __name__ == "__main__":
    main(sys.argv[1])

"""A pending operation keeps the storage it reads into or writes from: swapping a tensor's
storage while its I/O is pending (ZeRO's ``param.data = torch.empty(0)``, ``set_``) leaves the
old storage to the operation, and growing or freeing the storage in place (``resize_``,
``storage().resize_(0)``) is refused by torch while the operation runs. Every call form; each
case in a fresh process, where a use of freed memory shows as a crash or as wrong bytes."""

import os
import subprocess
import sys
import textwrap

import pytest

SWAPS = {
    "data": "t.data = torch.empty(0, dtype=torch.uint8)",
    "set_": "t.set_(torch.empty(0, dtype=torch.uint8))",
    "resize_": "t.resize_(4 * N)",
    "storage_resize": "storage_of(t).resize_(0)",
    "share_memory": "t.share_memory_()",  # the memory moved into shared memory in place
}

CASE = textwrap.dedent("""
    import os, sys, torch
    import nvmeio_torch
    from nvmeio_torch import _C
    form, swap, op, path = sys.argv[1:]
    N = 8 << 20
    def storage_of(t):
        return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    h = nvmeio_torch.aio_handle(block_size=1 << 20, queue_depth=8, intra_op_parallelism=2)
    g = torch.Generator().manual_seed(1)
    if form == "locked":
        t = h.new_cpu_locked_tensor(N, torch.empty(0, dtype=torch.uint8))
    else:
        t = torch.empty(N, dtype=torch.uint8)
    if op == "write":
        t.copy_(torch.randint(0, 256, (N,), dtype=torch.uint8, generator=g))
    expected = t.clone()
    from torch.multiprocessing.reductions import StorageWeakRef
    ref = StorageWeakRef(storage_of(t))
    job = None
    if form in ("single", "locked"):
        (h.async_pread if op == "read" else h.async_pwrite)(t, path, 0)
    elif form == "batch":
        (h.async_pread_batch if op == "read" else h.async_pwrite_batch)([t], path, [0])
    else:  # a staged job on the host's ring, between two of its steps
        ring = _C.staging_ring(-1, 2, 1 << 20)
        job = ring.start(op, [path], [0], [0], [N], [t.data_ptr()], [True], False, [t])
        job.advance()
    refused = False
    try:
        exec(SWAP)
    except RuntimeError as error:
        assert "not resizable" in str(error), error
        refused = True
    del t  # the tensor's own last reference: only the operation may still hold the storage
    junk = [torch.full((1 << 18,), 7, dtype=torch.int32) for _ in range(64)]
    assert not ref.expired(), "the pending operation let go of the storage"
    if job is None:
        assert h.wait() == 1
    else:
        while job.pending:
            job.advance()
        job.close()
    if form != "locked":  # (the registry of locked tensors keeps its own)
        assert ref.expired(), "the finished operation still holds the storage"
    if op == "write":
        with open(path, "rb") as f:
            written = f.read()
        assert written == expected.numpy().tobytes(), "the file holds other bytes"
    print("refused" if refused else "kept")
""")


@pytest.mark.parametrize("form", ["single", "batch", "locked", "staged"])
@pytest.mark.parametrize("swap", sorted(SWAPS))
@pytest.mark.parametrize("op", ["read", "write"])
def test_a_storage_swapped_while_pending_stays_the_operations(workdir, form, swap, op):
    path = os.path.join(workdir, "f.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(8 << 20))
    script = CASE.replace("exec(SWAP)", SWAPS[swap])
    result = subprocess.run([sys.executable, "-c", script, form, swap, op, path],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    # torch refuses to resize a storage in use in place; a tensor may still swap its storage.
    resizing = swap in ("resize_", "storage_resize")
    assert result.stdout.split()[-1] == ("refused" if resizing else "kept"), result.stdout


def test_a_storage_is_resizable_again_once_its_operation_has_finished(workdir):
    import torch
    import nvmeio_torch

    path = os.path.join(workdir, "f.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
    h = nvmeio_torch.aio_handle()
    t = torch.empty(1 << 20, dtype=torch.uint8)
    other = nvmeio_torch.aio_handle()
    h.async_pread(t, path, 0)
    other.async_pread(t, path, 0)  # two holds of one storage, by two handles
    assert h.wait() == 1
    with pytest.raises(RuntimeError, match="not resizable"):
        t.resize_(2 << 20)  # the other handle's read still holds it
    assert other.wait() == 1
    t.resize_(2 << 20)
    assert t.numel() == 2 << 20

"""No descriptor, thread or locked page is left behind over many iterations."""

import os
import resource
import threading

import pytest
import torch

import nvmeio_torch
from conftest import open_descriptors, random_bytes


def locked_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    return 0


def test_no_descriptor_leaks_per_request_or_wait(workdir, backend):
    h = nvmeio_torch.aio_handle(64 << 10, 8, False, True, 2, backend=backend)
    data = random_bytes(100001)
    back = torch.zeros_like(data)
    path = os.path.join(workdir, "f.bin")
    h.sync_pwrite(data, path)
    before = open_descriptors()
    for i in range(300):
        assert h.async_pwrite(data, path) == 0
        assert h.async_pread(back, path) == 0
        assert h.wait() == 2
        assert h.sync_pread(back, path) == 1
        try:
            h.sync_pread(back, os.path.join(workdir, "missing"))
        except FileNotFoundError:
            pass
    assert open_descriptors() == before


def test_handles_created_and_destroyed_leave_no_descriptor_or_thread(workdir, backend):
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(70000)
    nvmeio_torch.aio_handle().sync_pwrite(data, path)
    before = (open_descriptors(), threading.active_count(), len(os.listdir("/proc/self/task")))
    for i in range(100):
        h = nvmeio_torch.aio_handle(64 << 10, 8, False, True, 1 + i % 4, backend=backend)
        assert h.async_pread(torch.zeros_like(data), path) == 0
        del h  # destroyed with a request pending
    assert (open_descriptors(), threading.active_count(),
            len(os.listdir("/proc/self/task"))) == before


def test_locked_tensors_release_their_pages(workdir):
    h = nvmeio_torch.aio_handle()
    base = locked_kib()
    live = h._locked_tensors()
    for i in range(200):
        t = h.new_cpu_locked_tensor(1 << 20, torch.empty(0, dtype=torch.float16))
        assert t.dtype == torch.float16 and t.numel() == 1 << 20
        assert t.data_ptr() % 4096 == 0
        assert h.is_pinned(t) and h.is_pinned(torch.narrow(t, 0, 1024, 1024))
        assert not h.is_pinned(torch.zeros(10))
        assert h.free_cpu_locked_tensor(t) is True
        assert h.free_cpu_locked_tensor(t) is False  # once only
        del t
    assert h._locked_tensors() == live
    assert locked_kib() == base


def can_lock(kib):
    """Whether the kernel lets this process lock `kib` more KiB: RLIMIT_MEMLOCK allows it, or the
    process has CAP_IPC_LOCK (root), which the limit does not bind."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft // 1024 >= locked_kib() + kib:
        return True
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) & (1 << 14))  # CAP_IPC_LOCK
    return False


def test_locked_tensors_are_locked_where_the_kernel_allows_it():
    # where the kernel refuses to lock (RLIMIT_MEMLOCK), the tensors are aligned but not locked
    if not can_lock(16 << 10):
        pytest.skip("RLIMIT_MEMLOCK refuses 16 MiB more of locked memory to this process")
    h = nvmeio_torch.aio_handle()
    base = locked_kib()
    t = h.new_cpu_locked_tensor(16 << 20, torch.empty(0, dtype=torch.uint8))
    assert locked_kib() >= base + (16 << 10)
    assert h.free_cpu_locked_tensor(t) is True
    del t
    assert locked_kib() == base


def test_locked_tensors_are_shared_by_every_handle_as_deepspeeds_are():
    a = nvmeio_torch.aio_handle()
    b = nvmeio_torch.aio_handle()
    pin = nvmeio_torch.pin_handle()
    t = a.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.uint8))
    u = pin.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.float32))
    assert b.is_pinned(t) and pin.is_pinned(t) and a.is_pinned(u) and a.is_pinned(u[100:200])
    assert a.free_cpu_locked_tensor(torch.zeros(4096, dtype=torch.uint8)) is False
    assert b.free_cpu_locked_tensor(t) is True
    assert a.free_cpu_locked_tensor(t) is False  # once only, whichever handle frees it
    assert pin.free_cpu_locked_tensor(u) is True
    # a tensor outliving its free keeps its memory: reading and writing it is safe
    t.fill_(7)
    assert int(t.sum()) == 7 * 4096


def test_a_locked_tensor_outlives_its_handle():
    h = nvmeio_torch.aio_handle()
    t = h.new_cpu_locked_tensor(1000, torch.empty(0, dtype=torch.int32))
    del h
    t.fill_(3)
    assert int(t.sum()) == 3000


def test_empty_locked_tensors_are_each_their_own():
    h = nvmeio_torch.aio_handle()
    live = h._locked_tensors()
    empty = [h.new_cpu_locked_tensor(0, torch.empty(0, dtype=torch.float32)) for _ in range(3)]
    assert all(t.numel() == 0 for t in empty)
    assert h._locked_tensors() == live + 3
    assert [h.free_cpu_locked_tensor(t) for t in empty] == [True, True, True]
    assert h._locked_tensors() == live

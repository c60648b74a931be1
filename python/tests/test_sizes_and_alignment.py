"""Any size, any offset, buffers aligned only to 1 KiB or not at all: exact bytes, both backends."""

import ctypes
import mmap
import os

import pytest
import torch

import nvmeio_torch
from conftest import file_bytes, libc, random_bytes, resident_pages, write_file

SIZES = [1, 511, 512, 1023, 4096, 4097, 65536 + 3, 1 << 20, (1 << 20) + 4095, 3 * (1 << 20) + 1]


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_sizes_not_divisible_by_the_parallelism_move_exactly(workdir, backend, parallelism):
    h = nvmeio_torch.aio_handle(64 * 1024, 8, False, True, parallelism, backend=backend)
    path = os.path.join(workdir, "f.bin")
    for n in SIZES:
        data = random_bytes(n, seed=n)
        assert h.async_pwrite(data, path, 0) == 0
        assert h.wait() == 1
        back = torch.zeros(n, dtype=torch.uint8)
        assert h.sync_pread(back, path, 0) == 1
        assert torch.equal(back, data), n
    os.truncate(path, 0)


def test_narrowed_views_aligned_to_1_kib_as_swap_tensor_makes_them(workdir, backend):
    h = nvmeio_torch.aio_handle(1 << 20, 16, False, True, 2, backend=backend)
    arena = h.new_cpu_locked_tensor(8 << 20, torch.empty(0, dtype=torch.uint8))
    source = random_bytes(8 << 20)
    arena.copy_(source)
    path = os.path.join(workdir, "f.bin")
    pieces = [(1024, 3 << 20), (5 << 20, 1024 * 7 + 1), (7 << 20, 333)]
    for start, n in pieces:
        view = torch.narrow(arena, 0, start, n)
        assert view.data_ptr() % 4096 != 0 or start % 4096 == 0
        assert h.sync_pwrite(view, path, start) == 1
    on_disk = file_bytes(path)
    for start, n in pieces:
        assert torch.equal(on_disk[start:start + n], source[start:start + n])
    target = torch.zeros(8 << 20, dtype=torch.uint8)
    for start, n in pieces:
        assert h.async_pread(torch.narrow(target, 0, start + 64, n), path, start) == 0
    assert h.wait() == len(pieces)
    for start, n in pieces:
        assert torch.equal(target[start + 64:start + 64 + n], source[start:start + n])


@pytest.mark.parametrize("offset", [0, 1, 511, 512, 1000, 4096 + 7])
def test_any_offset_reads_and_writes_exactly(workdir, backend, offset):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
    path = os.path.join(workdir, "f.bin")
    old = random_bytes(200000, seed=3)
    write_file(path, old)
    data = random_bytes(50001, seed=4)
    assert h.sync_pwrite(data, path, offset) == 1
    expected = old.clone()
    expected[offset:offset + len(data)] = data
    assert torch.equal(file_bytes(path), expected)
    back = torch.zeros(len(data), dtype=torch.uint8)
    assert h.sync_pread(back, path, offset) == 1
    assert torch.equal(back, data)


def kernel_has_uncached_io(path):
    """True when a one-byte RWF_DONTCACHE read works on `path` (Linux 6.14+, not tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(1)], 0, 0x80)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def cached_bytes(path):
    """What the page cache holds of `path` (as fincore counts it: resident pages x page size),
    from mincore(2) over a mapping of the file, which faults nothing in. (mincore counts every
    page of a file the caller may not write as resident; the tests' own files are writable.)"""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap", path)
        try:
            return resident_pages(address, size).count(True) * mmap.PAGESIZE
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def test_an_offset_off_the_alignment_leaves_nothing_in_the_page_cache(workdir, backend):
    # O_DIRECT cannot take offset 1000: the request goes uncached, so the tensor's bytes do not
    # stay in the page cache, as they would not have with O_DIRECT; a kernel without uncached
    # I/O goes buffered and keeps them. (Seen failing with the buffered reopen: all of it left.)
    # One thread, one request at a time: workers or requests in flight together through one
    # descriptor share its readahead, and some read-ahead pages then stay (docs/perf/uncached.md).
    h = nvmeio_torch.aio_handle(1 << 20, 1, False, True, 1, backend=backend)
    path = os.path.join(workdir, "f.bin")
    write_file(path, random_bytes(4096, seed=5))
    uncached = kernel_has_uncached_io(path)
    os.unlink(path)
    data = random_bytes(32 << 20, seed=6)
    assert h.sync_pwrite(data, path, 1000) == 1
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    back = torch.zeros(len(data), dtype=torch.uint8)
    assert h.sync_pread(back, path, 1000) == 1
    assert torch.equal(back, data)
    left = cached_bytes(path)
    if uncached:
        assert left <= 2 * 4096, f"{left} bytes left in the page cache"
    else:
        assert left >= len(data), "a buffered read should have left the bytes cached"


def test_a_write_past_the_end_leaves_the_file_exactly_that_long(workdir, backend):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(12345)
    assert h.sync_pwrite(data, path, 100000) == 1
    assert os.path.getsize(path) == 100000 + 12345
    assert torch.equal(file_bytes(path)[100000:], data)


def test_files_on_tmpfs_fall_back_to_buffered_io():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine")
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
    path = f"/dev/shm/nvmeio_torch_{os.getpid()}.bin"
    try:
        data = random_bytes(99999)
        assert h.sync_pwrite(data, path) == 1
        back = torch.zeros_like(data)
        assert h.sync_pread(back, path) == 1
        assert torch.equal(back, data)
    finally:
        os.unlink(path)


def test_a_block_size_off_the_files_alignment_still_moves_exact_bytes(workdir):
    h = nvmeio_torch.aio_handle(1000, 4, False, True, 2)  # not a multiple of any sector
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(77777)
    assert h.sync_pwrite(data, path) == 1
    back = torch.zeros_like(data)
    assert h.sync_pread(back, path) == 1
    assert torch.equal(back, data)

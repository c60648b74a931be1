"""Shared fixtures: test files on a filesystem that accepts O_DIRECT, handles of both backends."""

import ctypes
import mmap
import os
import shutil
import tempfile

import pytest

torch = pytest.importorskip("torch")
nvmeio_torch = pytest.importorskip("nvmeio_torch")

BACKENDS = ["libaio"] + (["io_uring"] if nvmeio_torch.io_uring_available else [])


def pytest_configure(config):
    # A deprecation set off by nvmeio_torch's own code fails the test that met it (torch 2.x
    # deprecates TypedStorage with a UserWarning).
    for line in ("error::DeprecationWarning:nvmeio_torch", "error::FutureWarning:nvmeio_torch",
                 "error:.*deprecated:UserWarning:nvmeio_torch"):
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture
def workdir():
    """A fresh folder under NVMEIO_TORCH_TEST_DIR (the build tree, which CI keeps on ext4)."""
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    path = tempfile.mkdtemp(prefix="nvmeio_torch_", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def random_bytes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


def write_file(path, tensor):
    with open(path, "wb") as f:
        f.write(tensor.numpy().tobytes())


def file_bytes(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def resident_pages(address, length):
    """Which pages of [address, address + length) are in memory (mincore(2); address on a
    page), as a list of bools."""
    pages = ctypes.create_string_buffer((length + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
    if libc.mincore(address, length, pages) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return [bool(b & 1) for b in pages.raw]

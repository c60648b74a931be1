"""Shared fixtures: test files on a filesystem that accepts O_DIRECT, handles of both backends."""

import os
import shutil
import tempfile

import pytest

torch = pytest.importorskip("torch")
nvmeio_torch = pytest.importorskip("nvmeio_torch")

BACKENDS = ["libaio"] + (["io_uring"] if nvmeio_torch.io_uring_available else [])


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

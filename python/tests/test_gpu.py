"""Loads and saves on a CUDA device through the staging ring: bit-exact for every dtype, round
trips from CUDA tensors, the device index honoured, pinned bytes bounded. Skipped, saying why,
where torch sees no CUDA device (test_staged.py runs the same paths on the ring's host engine)."""

import os
import resource
import subprocess
import sys
import zipfile

import pytest
import torch

import nvmeio_torch
from conftest import random_bytes, write_file
from nvmeio_torch import _C, _staged, safetensors

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: torch.cuda.is_available() is False")

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]
for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if hasattr(torch, name):
        DTYPES.append(getattr(torch, name))


def _state(seed, big=3 << 20):
    g = torch.Generator().manual_seed(seed)
    state = {}
    for i, dtype in enumerate(DTYPES):
        raw = torch.randint(0, 256, ((i * 37) % 300 + 1, 8 * (8 + i)), dtype=torch.uint8,
                            generator=g)
        state[f"w{i}"] = raw.view(dtype)
        if dtype == torch.bool:
            state[f"w{i}"] = raw > 127
    state["scalar"] = torch.tensor(2.5)
    state["empty"] = torch.empty(0, 3)
    state["big"] = torch.randn(big // 4, generator=g)  # wider than a slot with small rings
    return state


def _same_bytes(a, b):
    if a.numel() == 0:
        return a.shape == b.shape and a.dtype == b.dtype
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.cpu().reshape(-1).view(torch.uint8), b.cpu().reshape(-1).view(torch.uint8))


@pytest.fixture(params=["default ring", "small ring"])
def rings(request, monkeypatch):
    if request.param == "small ring":  # every load wraps around
        monkeypatch.setattr(_staged, "DEFAULT_MAX_BYTES", 128 << 10)  # 4 slots of 32 KiB
    _staged.release_rings()
    yield
    _staged.release_rings()


def test_safetensors_to_the_gpu_are_bit_exact_for_every_dtype(workdir, rings):
    state = _state(1)
    path = os.path.join(workdir, "m.safetensors")
    safetensors.save_file(state, path)
    expected = {k: v.to("cuda:0") for k, v in safetensors.load_file(path).items()}
    for got in (safetensors.load_file(path, device="cuda:0"),
                safetensors.load_file(path, device=0),
                safetensors.load_files([path], device="cuda"),
                dict(safetensors.stream(path, max_bytes=16 << 20, device="cuda:0"))):
        assert got.keys() == expected.keys()
        for name in expected:
            assert got[name].device == torch.device("cuda", 0), name
            assert _same_bytes(got[name], expected[name]), name
    with safetensors.safe_open(path, "pt", device="cuda:0") as f:
        for name in ("w0", "big", "empty"):
            assert _same_bytes(f.get_tensor(name), expected[name]), name


@pytest.mark.parametrize("map_location", ["cuda", "cuda:0", torch.device("cuda", 0),
                                          {"cpu": "cuda:0"}])
def test_checkpoints_load_to_the_gpu_as_torch_load_does(workdir, rings, map_location):
    state = _state(2)
    state["view"] = state["big"][5:50]
    path = os.path.join(workdir, "ckpt.pt")
    torch.save(state, path)
    expected = torch.load(path, map_location=map_location)
    got = nvmeio_torch.load(path, map_location=map_location)
    for name in expected:
        assert got[name].device == expected[name].device, name
        assert _same_bytes(got[name], expected[name]), name
    got["big"][5] = 7.0
    assert got["view"][0] == 7.0  # still one storage


def test_gpu_saved_checkpoints_round_trip_with_their_crcs(workdir, rings):
    state = {k: v.to("cuda:0") for k, v in _state(3).items()}
    state["cpu_too"] = torch.arange(1000)
    path = os.path.join(workdir, "ckpt.pt")
    nvmeio_torch.save(state, path)
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
    for got in (torch.load(path), nvmeio_torch.load(path)):
        for name in state:
            assert got[name].device == state[name].device, name
            assert _same_bytes(got[name], state[name]), name


def test_safetensors_saved_from_the_gpu_are_the_cpu_copies_bytes(workdir, rings):
    state = _state(4)
    on_gpu = {k: v.to("cuda:0") for k, v in state.items()}
    on_gpu["strided"] = torch.arange(64, device="cuda:0").view(8, 8).t()
    state["strided"] = on_gpu["strided"].cpu()
    a, b = os.path.join(workdir, "cpu.safetensors"), os.path.join(workdir, "gpu.safetensors")
    safetensors.save_file(state, a)
    safetensors.save_file(on_gpu, b)
    assert open(a, "rb").read() == open(b, "rb").read()


def test_the_handle_moves_cuda_tensors(workdir):
    h = nvmeio_torch.aio_handle(1 << 20, 32, intra_op_parallelism=2)
    path = os.path.join(workdir, "x.bin")
    data = random_bytes((5 << 20) + 333, 5)
    write_file(path, data)
    gpu = torch.zeros(data.numel(), dtype=torch.uint8, device="cuda:0")
    assert h.sync_pread(gpu, path) == 1
    assert torch.equal(gpu.cpu(), data)
    half = torch.zeros(1000, dtype=torch.uint8, device="cuda:0")
    assert h.async_pread(half, path, 777) == 0
    assert h.wait() == 1
    assert torch.equal(half.cpu(), data[777:1777])
    out = os.path.join(workdir, "y.bin")
    parts = [gpu[:4096], torch.arange(10, dtype=torch.uint8), gpu[5000:9000]]
    h.sync_pwrite_batch(parts, out, [0, 4096, 4106])
    assert open(out, "rb").read() == b"".join(p.cpu().numpy().tobytes() for p in parts)
    with pytest.raises(ValueError, match="validate"):
        h.pread(gpu, path, True, False, 0)


def test_the_device_index_is_honoured(workdir):
    last = torch.cuda.device_count() - 1
    path = os.path.join(workdir, "m.safetensors")
    safetensors.save_file({"a": torch.arange(10)}, path)
    got = safetensors.load_file(path, device=f"cuda:{last}")
    assert got["a"].device == torch.device("cuda", last)
    with pytest.raises((ValueError, RuntimeError)):
        _C.staging_ring(torch.cuda.device_count(), 2, 4096)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one CUDA device: nothing to see on "
                    "another")
def test_a_load_to_the_last_device_creates_nothing_on_device_0(workdir):
    path = os.path.join(workdir, "m.safetensors")
    safetensors.save_file({"a": torch.randn(1 << 20)}, path)
    last = torch.cuda.device_count() - 1
    code = ("import torch, sys; from nvmeio_torch import safetensors;"
            f"safetensors.load_file(sys.argv[1], device='cuda:{last}');"
            "print(torch.cuda.memory_reserved(0), torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                         check=True, env=dict(os.environ)).stdout.split()
    assert out[0] == "0"


def test_host_memory_stays_at_the_ring_whatever_the_model(workdir):
    """A 2 GiB model loaded to the GPU in a fresh process: its peak RSS grows by no more than
    the ring (4 x 64 MiB) and 256 MiB over the same process before the load."""
    path = os.path.join(workdir, "big.safetensors")
    safetensors.save_file({f"t{i}": torch.randn(32 << 20) for i in range(16)}, path)  # 2 GiB
    code = ("import resource, sys, torch; from nvmeio_torch import safetensors;"
            "torch.zeros(1, device='cuda:0'); torch.cuda.synchronize();"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
            "t = safetensors.load_file(sys.argv[1], device='cuda:0'); torch.cuda.synchronize();"
            "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
            "print(before, after)")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                         check=True, env=dict(os.environ)).stdout.split()
    before, after = int(out[0]) * 1024, int(out[1]) * 1024
    assert after - before <= (256 << 20) + (256 << 20), (before, after)


def test_a_save_waits_for_the_work_queued_on_torchs_stream(workdir):
    """The tensors' last writes may still be queued on torch's stream when save is called; the
    ring copies on a stream of its own, so the save must wait for torch's first."""
    t = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda:0")
    torch.cuda._sleep(200_000_000)  # keeps torch's stream busy for a while
    t.fill_(7)                      # queued behind the sleep
    path = os.path.join(workdir, "s.safetensors")
    safetensors.save_file({"t": t}, path)
    assert torch.equal(safetensors.load_file(path)["t"], torch.full((64 << 20,), 7,
                                                                      dtype=torch.uint8))


def test_a_cuda_error_is_a_runtime_error_naming_the_call(workdir):
    path = os.path.join(workdir, "x.bin")
    write_file(path, random_bytes(1 << 20))
    ring = _C.staging_ring(0, 2, 1 << 20)
    bogus = 0x10  # no device memory there
    job = ring.start("read", [path], [0], [0], [4096], [bogus], [False], False, None)
    with pytest.raises(RuntimeError, match="cuMemcpyHtoDAsync"):
        while job.pending:
            job.advance()
    job.close()

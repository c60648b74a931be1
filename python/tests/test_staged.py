"""The staging ring from Python (``nvmeio_torch._staged``): the one pipeline the GPU loads and
saves take. Here on the ring's host engine (CPU tensors, memcpy), with 2 slots of 4 KiB so every
transfer wraps around; test_gpu.py runs the same paths on a CUDA device where there is one."""

import errno
import os
import threading
import zlib

import pytest
import torch

from conftest import random_bytes, write_file
from nvmeio_torch import _C, _staged, _torch_zip, checkpoint, safetensors

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def small_rings(monkeypatch):
    monkeypatch.setattr(_staged, "DEFAULT_MAX_BYTES", 2 * 4096)  # 2 slots of 4 KiB
    _staged.release_rings()
    yield
    _staged.release_rings()


def _layout(sizes, seed):
    """Tensors end to end in one file: (file bytes, [(offset, length)])."""
    data = random_bytes(sum(sizes) + 100, seed)
    spans, at = [], 0
    for n in sizes:
        spans.append((at, n))
        at += n
    return data, spans


def test_reads_every_tensor_through_two_small_slots_and_reports_each_once(workdir):
    sizes = [5000, 0, 1, 4096, 12345, 77, 0, 9000]
    data, spans = _layout(sizes, 1)
    path = os.path.join(workdir, "model.bin")
    write_file(path, data)
    outs = [torch.full((n,), 0xAA, dtype=torch.uint8) for n in sizes]
    items = [(path, at, out, f"t{i}") for i, ((at, _), out) in enumerate(zip(spans, outs))]
    reported = []
    for i in _staged.completions("read", items, CPU):
        at, n = spans[i]
        assert torch.equal(outs[i], data[at:at + n]), f"t{i} reported before its bytes arrived"
        reported.append(i)
    assert sorted(reported) == list(range(len(sizes)))


def test_a_tensor_spanning_files_and_many_files_in_one_transfer(workdir):
    paths, datas, items, outs = [], [], [], []
    for f in range(3):
        data = random_bytes(10000 + f, 10 + f)
        path = os.path.join(workdir, f"shard{f}.bin")
        write_file(path, data)
        paths.append(path)
        datas.append(data)
    # One destination tensor whose halves come from two files.
    whole = torch.zeros(12000, dtype=torch.uint8)
    items.append((paths[0], 3000, whole[:6000], "first half"))
    items.append((paths[1], 100, whole[6000:], "second half"))
    out = torch.zeros(9999, dtype=torch.uint8)
    items.append((paths[2], 1, out, "third"))
    _staged.run("read", items, CPU)
    assert torch.equal(whole[:6000], datas[0][3000:9000])
    assert torch.equal(whole[6000:], datas[1][100:6100])
    assert torch.equal(out, datas[2][1:10000])


def test_writes_through_the_ring_and_computes_each_tensors_crc(workdir):
    path = os.path.join(workdir, "out.bin")
    open(path, "wb").close()
    tensors = [random_bytes(n, 20 + n) for n in (9000, 1, 0, 4096, 7777)]
    items, at = [], 0
    for i, t in enumerate(tensors):
        items.append((path, at, t, f"t{i}"))
        at += t.numel()
    crcs = []
    _staged.run("write", items, CPU, checksum=True, crcs=crcs)
    with open(path, "rb") as f:
        written = f.read()
    assert written == b"".join(t.numpy().tobytes() for t in tensors)
    assert crcs == [zlib.crc32(t.numpy().tobytes()) for t in tensors]


def test_a_failed_read_names_the_file_and_the_tensor_and_the_ring_serves_again(workdir):
    data, spans = _layout([6000, 30000], 3)
    path = os.path.join(workdir, "model.bin")
    write_file(path, data)
    outs = [torch.zeros(n, dtype=torch.uint8) for _, n in spans]
    items = [(path, at, out, f"layer.{i}") for i, ((at, _), out) in enumerate(zip(spans, outs))]
    os.truncate(path, 7000)  # the second tensor now ends past the file
    with pytest.raises(ValueError, match="ends past the file.*tensor 'layer.1'"):
        _staged.run("read", items, CPU)
    # A file that shrinks after the plan: ENODATA, naming the tensor. The second tensor spans
    # windows past those read ahead (two at most) when the first is reported.
    write_file(path, data)
    job_items = _staged.completions("read", items, CPU)
    assert next(job_items) == 0  # the first tensor, [0, 6000), is in
    os.truncate(path, 7000)
    with pytest.raises(OSError) as caught:
        list(job_items)
    assert caught.value.errno == errno.ENODATA
    assert caught.value.filename == path
    assert "layer.1" in str(caught.value)
    write_file(path, data)
    _staged.run("read", items, CPU)
    assert torch.equal(outs[1], data[6000:36000])


def test_bad_items_raise_before_any_io(workdir):
    path = os.path.join(workdir, "x.bin")
    write_file(path, random_bytes(100))
    strided = torch.zeros(10, 10, dtype=torch.uint8).t()
    with pytest.raises(ValueError, match="not contiguous"):
        _staged.run("read", [(path, 0, strided, "s")], CPU)
    with pytest.raises(ValueError, match="s: file offset 9223372036854775808 is not between"):
        _staged.run("read", [(path, 1 << 63, torch.zeros(1, dtype=torch.uint8), "s")], CPU)
    with pytest.raises(ValueError, match="s: file offset -1 is not between"):
        _staged.run("read", [(path, -1, torch.zeros(1, dtype=torch.uint8), "s")], CPU)
    with pytest.raises(ValueError, match="CPU and CUDA"):
        _staged.device_index(torch.device("meta"))
    with pytest.raises(ValueError, match="slots must be at least 1"):
        _C.staging_ring(-1, 0, 4096)
    with pytest.raises(ValueError, match="slot_size 1000"):
        _C.staging_ring(-1, 2, 1000)
    with pytest.raises(ValueError, match="slots must be between 0 and 65536"):
        _C.staging_ring(-1, (1 << 32) + 2, 4096)  # not 2 after a cast
    with pytest.raises(ValueError, match="needs at least 8192 bytes, not 4000"):
        _C.take_ring(-1, 4000)
    with pytest.raises(ValueError, match="max_bytes must not be negative"):
        _C.take_ring(-1, -1)


def test_the_pool_keeps_one_ring_a_device_whatever_the_bounds():
    # Rings within other bounds are made as asked, and given back; the pool keeps the largest
    # one alone: page-locked memory never piles up.
    _C.release_staging_rings()
    assert _C.idle_ring_bytes() == 0
    largest = 0
    for bound in (8192, 65536, 8192, 16384, 1 << 20, 65536):
        lease = _C.take_ring(-1, bound)
        assert lease.ring.bytes <= bound
        largest = max(largest, lease.ring.bytes)
        del lease
        assert _C.idle_ring_bytes() == largest
    held = [_C.take_ring(-1, 1 << 20) for _ in range(3)]  # at once: the kept one and two more
    assert _C.idle_ring_bytes() == 0
    del held
    assert _C.idle_ring_bytes() == 1 << 20
    _C.release_staging_rings()
    assert _C.idle_ring_bytes() == 0


def test_a_ring_in_use_is_refused_and_a_second_thread_gets_its_own(workdir):
    ring = _C.staging_ring(-1, 2, 4096)
    path = os.path.join(workdir, "x.bin")
    write_file(path, random_bytes(20000))
    out = torch.zeros(20000, dtype=torch.uint8)
    job = ring.start("read", [path], [0], [0], [20000], [out.data_ptr()], [True], False, out)
    with pytest.raises(RuntimeError, match="another transfer is using this ring"):
        ring.start("read", [path], [0], [0], [1], [out.data_ptr()], [True], False, out)
    job.close()
    job = ring.start("read", [path], [0], [0], [1], [out.data_ptr()], [True], False, out)
    while job.pending:
        job.advance()
    job.close()
    # Threads loading at once through the kept ring: each gets one.
    errors, outs = [], []

    def load(seed):
        try:
            o = torch.zeros(20000, dtype=torch.uint8)
            outs.append(o)
            for _ in range(20):
                _staged.run("read", [(path, 0, o, "all")], CPU)
        except Exception as e:  # noqa: BLE001: reported below
            errors.append(e)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = open(path, "rb").read()
    assert all(o.numpy().tobytes() == expected for o in outs)


def test_kept_rings_are_freed_on_request_and_made_again_when_needed(workdir):
    import nvmeio_torch

    path = os.path.join(workdir, "x.bin")
    write_file(path, random_bytes(9000))
    out = torch.zeros(9000, dtype=torch.uint8)
    _staged.run("read", [(path, 0, out, "x")], CPU)
    assert _C.idle_ring_bytes() == 2 * 4096  # the ring, kept
    nvmeio_torch.release_staging_rings()
    assert _C.idle_ring_bytes() == 0
    out.zero_()
    _staged.run("read", [(path, 0, out, "x")], CPU)
    assert out.numpy().tobytes() == open(path, "rb").read()


def test_a_forked_child_makes_rings_of_its_own(workdir):
    path = os.path.join(workdir, "x.bin")
    write_file(path, random_bytes(20000, 9))
    out = torch.zeros(20000, dtype=torch.uint8)
    _staged.run("read", [(path, 0, out, "x")], CPU)  # the parent keeps a ring
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's ring would refuse it (its threads are the parent's)
        status = 1
        try:
            out.zero_()
            _staged.run("read", [(path, 0, out, "x")], CPU)
            status = 0 if out.numpy().tobytes() == open(path, "rb").read() else 2
        finally:
            os.write(write, bytes([status]))
            os._exit(0)
    os.close(write)
    status = os.read(read, 1)
    os.waitpid(pid, 0)
    assert status == b"\x00"
    _staged.run("read", [(path, 0, out, "x")], CPU)  # and the parent's still serves it


def test_a_stream_abandoned_midway_leaves_the_ring_usable(workdir):
    data, spans = _layout([5000] * 6, 4)
    path = os.path.join(workdir, "model.bin")
    write_file(path, data)
    outs = [torch.zeros(n, dtype=torch.uint8) for _, n in spans]
    items = [(path, at, out, f"t{i}") for i, ((at, _), out) in enumerate(zip(spans, outs))]
    stream = _staged.completions("read", items, CPU)
    next(stream)
    stream.close()
    _staged.run("read", items, CPU)
    assert all(torch.equal(o, data[at:at + n]) for o, (at, n) in zip(outs, spans))


# ---- the loaders' and savers' GPU paths, run on the host engine ----------------------------

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int64,
          torch.bool, torch.float64, torch.int32, torch.int16]


def _state(seed):
    g = torch.Generator().manual_seed(seed)
    state = {}
    for i, dtype in enumerate(DTYPES):
        shape = [(3 + i * 7) % 50 + 1, 129 + i]
        t = torch.randn(shape, generator=g) * 50
        state[f"w{i}"] = t.to(dtype) if dtype != torch.bool else t > 0
    state["scalar"] = torch.tensor(3.5)
    state["empty"] = torch.empty(0, 4)
    state["big"] = torch.randn(5000, generator=g)  # larger than the ring
    return state


def test_safetensors_device_path_is_bit_exact_for_every_dtype(workdir):
    state = _state(5)
    path = os.path.join(workdir, "m.safetensors")
    safetensors.save_file(state, path)
    header = safetensors._read_header(path)
    got = dict(safetensors._to_device([header], CPU))
    assert got.keys() == state.keys()
    for name, tensor in state.items():
        assert got[name].dtype == tensor.dtype and got[name].shape == tensor.shape, name
        assert torch.equal(got[name].view(-1).view(torch.uint8) if tensor.numel() else got[name],
                           tensor.view(-1).view(torch.uint8) if tensor.numel() else tensor), name


def test_safetensors_save_through_the_ring_writes_the_packages_bytes(workdir):
    state = _state(6)
    plain = os.path.join(workdir, "plain.safetensors")
    ringed = os.path.join(workdir, "ringed.safetensors")
    safetensors.save_file(state, plain)
    header, placed, _ = safetensors._layout(state, None)
    safetensors._save_through_rings(header, placed, ringed, True)
    assert open(plain, "rb").read() == open(ringed, "rb").read()


def test_checkpoint_load_through_the_ring_matches_torch_load(workdir, monkeypatch):
    state = _state(7)
    state["shared_view"] = state["big"][10:20]  # a view of a saved storage
    path = os.path.join(workdir, "ckpt.pt")
    torch.save(state, path)  # torch's own file: records 64-byte aligned
    expected = torch.load(path)
    monkeypatch.setattr(checkpoint, "_places_on_gpu", lambda *a: True)
    got = checkpoint.load(path)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    got["big"][10] = 12345.0  # the view still shares its storage
    assert got["shared_view"][0] == 12345.0


def test_checkpoint_save_through_the_ring_is_read_by_torch_with_its_crcs(workdir, monkeypatch):
    import zipfile

    state = _state(8)
    path = os.path.join(workdir, "ckpt.pt")
    monkeypatch.setattr(_torch_zip, "through_rings", lambda contents: True)
    checkpoint.save(state, path)
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None  # every record's CRC-32 is right
    got = torch.load(path)
    for name, tensor in state.items():
        assert torch.equal(got[name], tensor), name


def test_which_loads_go_through_the_ring():
    """A checkpoint goes through the ring when map_location sends storages to a GPU, or may
    keep saved CUDA locations; str and device forms that say CPU keep the arena path even for a
    checkpoint saved from a GPU."""
    from nvmeio_torch.checkpoint import _places_on_gpu, _restore_location

    saved_on_gpu, saved_on_cpu = b"...cuda:0...", b"...cpu..."
    for map_location in ("cpu", torch.device("cpu"), b"cpu"):
        restore = _restore_location(map_location)
        assert not _places_on_gpu(map_location, restore, saved_on_gpu)
    for map_location in (None, {"cpu": "cpu"}, lambda storage, location: storage):
        restore = _restore_location(map_location)
        assert _places_on_gpu(map_location, restore, saved_on_gpu)
        assert not _places_on_gpu(map_location, restore, saved_on_cpu)
    assert _places_on_gpu({"cpu": "cuda:0"}, _restore_location({"cpu": "cuda:0"}), saved_on_cpu)


def test_items_on_several_devices_go_one_transfer_each_with_their_crcs(workdir):
    path = os.path.join(workdir, "out.bin")
    open(path, "wb").close()
    tensors = [random_bytes(n, 40 + n) for n in (5000, 0, 3000)]
    items, at = [], 0
    for i, t in enumerate(tensors):
        items.append((path, at, t, f"t{i}"))
        at += t.numel()
    crcs = _staged.run_by_device("write", items, checksum=True)
    assert crcs == [zlib.crc32(t.numpy().tobytes()) for t in tensors]
    assert open(path, "rb").read() == b"".join(t.numpy().tobytes() for t in tensors)

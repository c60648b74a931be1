"""What the whole-file jobs share (nvmeio_torch._files): the atomic replacement, the handle,
and the helpers that bring a fresh arena into use ahead of the reads."""

import mmap
import os
import stat
import threading
import time
import types

import pytest
import torch

import nvmeio_torch
import nvmeio_torch.safetensors as nst
from nvmeio_torch import _C, _files
from conftest import libc, random_bytes, resident_pages


def test_a_finished_file_replaces_the_old_one_and_leaves_nothing_beside_it(workdir):
    path = os.path.join(workdir, "model.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    for durable in (True, False):
        with _files.atomic_file(path, durable=durable) as temporary:
            assert os.path.dirname(temporary) == workdir and temporary != path
            assert os.path.getsize(temporary) == 0
            with open(temporary, "wb") as f:
                f.write(b"new %d" % durable)
            with open(path, "rb") as f:
                assert f.read() != b"new %d" % durable  # not visible before the rename
        with open(path, "rb") as f:
            assert f.read() == b"new %d" % durable
    assert os.listdir(workdir) == ["model.bin"]


def test_a_failure_keeps_the_old_file_and_removes_the_temporary(workdir):
    path = os.path.join(workdir, "model.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    with pytest.raises(KeyError):
        with _files.atomic_file(path) as temporary:
            with open(temporary, "wb") as f:
                f.write(b"half")
            raise KeyError("the writer failed")
    with open(path, "rb") as f:
        assert f.read() == b"old"
    assert os.listdir(workdir) == ["model.bin"]


def test_a_missing_folder_is_an_oserror_naming_it(workdir):
    path = os.path.join(workdir, "no", "model.bin")
    with pytest.raises(FileNotFoundError) as raised:
        with _files.atomic_file(path):
            pass
    assert os.path.join(workdir, "no") in raised.value.filename


def test_make_handle_moves_whole_files(workdir):
    import torch

    h = _files.make_handle(queue_depth=8)
    assert (h.get_block_size(), h.get_queue_depth()) == (1 << 20, 8)
    assert 1 <= h.get_intra_op_parallelism() <= 4
    data = torch.randint(0, 256, (3 * (1 << 20) + 5,), dtype=torch.uint8)
    path = os.path.join(workdir, "whole.bin")
    assert h.sync_pwrite(data, path) == 1
    back = torch.zeros_like(data)
    assert h.sync_pread(back, path) == 1
    assert torch.equal(back, data) and os.path.getsize(path) == data.numel()


def test_a_replaced_file_keeps_its_permission_bits_as_open_wb_would(workdir):
    path = os.path.join(workdir, "private.bin")
    fresh = os.path.join(workdir, "fresh.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    os.chmod(path, 0o600)
    previous = os.umask(0o022)
    try:
        for target in (path, fresh):
            with _files.atomic_file(target) as temporary:
                with open(temporary, "wb") as f:
                    f.write(b"new")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # not widened to 0o644
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o644  # a new file: 0o666 less the umask


def test_a_symlink_is_followed_and_its_target_replaced_as_open_wb_would(workdir):
    target = os.path.join(workdir, "step100.bin")
    link = os.path.join(workdir, "latest.bin")
    with open(target, "wb") as f:
        f.write(b"old")
    os.symlink("step100.bin", link)
    with _files.atomic_file(link) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"new")
    assert os.path.islink(link) and os.readlink(link) == "step100.bin"
    with open(target, "rb") as f:
        assert f.read() == b"new"
    assert sorted(os.listdir(workdir)) == ["latest.bin", "step100.bin"]


def test_a_file_whose_name_is_near_the_longest_allowed_is_replaced(workdir):
    path = os.path.join(workdir, "m" * 250)
    with open(path, "wb") as f:
        f.write(b"old")
    with _files.atomic_file(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"new")
    with open(path, "rb") as f:
        assert f.read() == b"new"
    assert os.listdir(workdir) == ["m" * 250]


def test_make_handle_falls_back_to_libaio_where_the_kernel_refuses_io_uring(monkeypatch):
    import errno
    import types

    real = _files._C

    def aio_handle(**settings):
        if settings["backend"] == "io_uring":  # as io_uring_disabled=2 or a seccomp filter does
            raise OSError(errno.EPERM, "io_uring_setup refused")
        return real.aio_handle(**settings)

    monkeypatch.setattr(_files, "_C", types.SimpleNamespace(io_uring_available=True,
                                                            aio_handle=aio_handle))
    assert _files.make_handle().get_backend() == "libaio"
    with pytest.raises(OSError):  # asked for by name: no fallback
        _files.make_handle(backend="io_uring")


def arena_pages(arena):
    return resident_pages(arena.data_ptr(), arena.numel())


def test_populate_brings_pages_in_and_changes_no_byte():
    page = mmap.PAGESIZE
    if page != 4096:
        pytest.skip(f"pages of {page} bytes: the arena is aligned to 4096 only")
    arena = _C.aligned_tensor(64 << 20)
    # Its pages out of memory, and no huge page to bring 512 of them in at once.
    MADV_DONTNEED, MADV_NOHUGEPAGE = 4, 15
    assert libc.madvise(arena.data_ptr(), arena.numel(), MADV_NOHUGEPAGE) == 0
    assert libc.madvise(arena.data_ptr(), arena.numel(), MADV_DONTNEED) == 0
    arena[5 * page:6 * page] = 7  # one page written
    assert arena_pages(arena).count(True) == 1
    if not _C.populate(arena, page, 40 * page - 1):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
    resident = arena_pages(arena)
    assert resident[:41] == [False] + [True] * 40 and resident.count(True) == 40
    # A view's offsets count from its own first byte.
    assert _C.populate(arena[50 * page:], page, page)
    assert arena_pages(arena)[50:52] == [False, True]
    assert int(arena.sum()) == 7 * page  # (reading maps every page)


def populate_works():
    return _C.populate(_C.aligned_tensor(4096), 0, 4096)


def test_populate_takes_only_nvmeios_contiguous_tensors_and_ranges_inside_them():
    arena = _C.aligned_tensor(16384)
    with pytest.raises(ValueError, match="not one of nvmeio's"):
        _C.populate(torch.zeros(8192, dtype=torch.uint8), 0, 4096)
    with pytest.raises(ValueError, match="not contiguous"):
        _C.populate(arena.view(4, 4096).t(), 0, 4096)
    for offset, length in ((-1, 10), (0, 16385), (16384, 1), (4096, -1), (1, 2 ** 62)):
        with pytest.raises(ValueError, match="not within"):
            _C.populate(arena, offset, length)
    assert _C.populate(arena, 16384, 0)


def record_populate(monkeypatch, answer=None):
    """_C.populate wrapped to record each call's (arena pointer, offset, length)."""
    calls, real = [], _C.populate

    def populate(arena, offset, length):
        calls.append((arena.data_ptr(), offset, length))
        return real(arena, offset, length) if answer is None else answer
    monkeypatch.setattr(_C, "populate", populate)
    return calls


def covered(calls):
    """Bytes covered by the calls per arena (sorted), and whether no byte was covered twice."""
    per_arena = {}
    for pointer, offset, length in calls:
        per_arena.setdefault(pointer, []).append((offset, offset + length))
    disjoint = all(a[1] <= b[0] for spans in per_arena.values()
                   for a, b in zip(sorted(spans), sorted(spans)[1:]))
    return sorted(sum(e - b for b, e in spans) for spans in per_arena.values()), disjoint


class FakeArena:
    def __init__(self, size):
        self.size = size

    def numel(self):
        return self.size

    def element_size(self):
        return 1


@pytest.mark.parametrize("pieces", [1, 2, 3, 4, 16])
def test_the_populate_plan_covers_each_arena_once_in_chunks_across_the_workers_parts(pieces):
    c = _files.POPULATE_CHUNK
    sizes = [0, 1, 4095, 4096, c - 1, c, c + 1, pieces * c - 1, pieces * c + 4097, 5 * pieces * c]
    arenas = [FakeArena(n) for n in sizes]
    plan = _files._populate_chunks(arenas, pieces)
    for arena in arenas:
        spans = sorted((at, at + n) for a, at, n in plan if a is arena)
        assert all(0 < e - b <= c for b, e in spans)
        assert [b for b, _ in spans] == [0] + [e for _, e in spans[:-1]] if spans else arena.size == 0
        assert (spans[-1][1] if spans else 0) == arena.size
    # Arena by arena, and within the largest its parts taken in turn from their starts.
    order = [arenas.index(a) for a, _, _ in plan]
    assert order == sorted(order)
    first = [at for a, at, _ in plan if a is arenas[-1]][:pieces]
    assert first == [k * _files.align_up(-(-arenas[-1].size // pieces)) for k in range(pieces)]
    assert _files._populate_chunks([FakeArena(_files.POPULATE_MIN - 1)], pieces) == []


class PatientHandle:
    """A real handle whose reads are waited for only once the populate calls have covered
    ``expected`` bytes (or 10 s have passed), so that a test sees every planned chunk however
    the helper threads are scheduled."""

    def __init__(self, calls, expected):
        self.handle, self.calls, self.expected = _files.make_handle(), calls, expected

    def patience(self):
        deadline = time.monotonic() + 10
        while sum(c[2] for c in self.calls) < self.expected and time.monotonic() < deadline:
            time.sleep(0.001)

    def get_intra_op_parallelism(self):
        return self.handle.get_intra_op_parallelism()

    def async_pread_batch(self, *args):
        return self.handle.async_pread_batch(*args)

    def wait(self):
        self.patience()
        return self.handle.wait()

    def sync_pread_batch(self, *args):
        self.patience()
        return self.handle.sync_pread_batch(*args)


def data_bytes(path):
    """What a load reads of a safetensors file: from the 4 KiB boundary at or before its data."""
    with open(path, "rb") as f:
        header = int.from_bytes(f.read(8), "little")
    return os.path.getsize(path) - _files.align_down(8 + header)


def test_every_load_brings_its_whole_arena_in_from_helpers_and_keeps_exact_bytes(
        workdir, monkeypatch):
    if not populate_works():
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
    calls = record_populate(monkeypatch)
    tensors = {"a": random_bytes(36 << 20, seed=1), "b": random_bytes((16 << 20) + 5, seed=2)}
    shards = [os.path.join(workdir, f"model-{i}.safetensors") for i in range(3)]
    nst.save_file(tensors, shards[0])
    nst.save_file({"c": random_bytes(33 << 20, seed=3)}, shards[1])
    nst.save_file({}, shards[2])  # no data: no arena
    loaded = nst.load_file(shards[0], handle=PatientHandle(calls, data_bytes(shards[0])))
    assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert covered(calls) == ([data_bytes(shards[0])], True)
    calls.clear()
    both = sum(data_bytes(s) for s in shards[:2])
    assert len(nst.load_files(shards, handle=PatientHandle(calls, both))) == 3
    assert covered(calls) == (sorted(data_bytes(s) for s in shards[:2]), True)
    calls.clear()
    with nst.safe_open(shards[0], handle=PatientHandle(calls, 36 << 20)) as f:
        assert torch.equal(f.get_tensor("a"), tensors["a"])
    sizes, disjoint = covered(calls)
    assert disjoint and (36 << 20) <= sizes[0] < data_bytes(shards[0])  # its range, not the file
    calls.clear()
    checkpoint = os.path.join(workdir, "state.pt")
    nvmeio_torch.save(tensors, checkpoint)
    back = nvmeio_torch.load(checkpoint, handle=PatientHandle(calls, (52 << 20) + 5))
    assert all(torch.equal(back[k], tensors[k]) for k in tensors)
    sizes, disjoint = covered(calls)
    assert disjoint and len(sizes) == 1 and sizes[0] >= (52 << 20) + 5


def test_a_kernel_without_populate_stops_the_helpers_at_once_and_loads_exactly(
        workdir, monkeypatch):
    calls = record_populate(monkeypatch, answer=False)
    monkeypatch.setattr(_files, "POPULATE_CHUNK", 1 << 20)  # more chunks than helpers
    data = random_bytes(48 << 20, seed=3)
    path = os.path.join(workdir, "model.safetensors")
    nst.save_file({"x": data}, path)
    assert torch.equal(nst.load_file(path)["x"], data)
    assert 1 <= len(calls) <= _files.cpus(8)


class FailingHandle:
    """A handle whose reads fail as soon as they are waited for."""

    def get_intra_op_parallelism(self):
        return 2

    def async_pread_batch(self, tensors, path, offsets):
        return 0

    def wait(self):
        raise OSError(5, "failed as asked", "model.safetensors")


def test_a_failed_load_leaves_no_helper_running(workdir):
    path = os.path.join(workdir, "model.safetensors")
    nst.save_file({"x": random_bytes(64 << 20, seed=4)}, path)
    with pytest.raises(OSError, match="failed as asked"):
        nst.load_file(path, handle=FailingHandle())
    assert not [t for t in threading.enumerate() if t.name == "nvmeio-populate"]


def test_the_helpers_stop_when_the_reads_end(monkeypatch):
    """Each helper's populate call is held until the helpers are told to stop; the reads end
    while every helper is inside its first chunk, so each must take exactly one of the 64 and
    be let go by the end of the reads, not by its own time limit."""
    stops, started, released, calls = [], [], [], []

    class RecordedEvent(threading.Event):
        def __init__(self):
            super().__init__()
            stops.append(self)

    class RecordedThread(threading.Thread):
        def start(self):
            super().start()
            started.append(self)

    entered = threading.Condition()

    def held(arena, offset, length):
        with entered:
            calls.append(offset)
            entered.notify_all()
        let_go = stops[0].wait(timeout=30)
        released.append(let_go)
        return let_go  # False stops every helper, as a kernel refusing would
    monkeypatch.setattr(_C, "populate", held)
    monkeypatch.setattr(_files, "POPULATE_CHUNK", 1 << 20)  # 64 chunks
    monkeypatch.setattr(_files, "threading", types.SimpleNamespace(
        Event=RecordedEvent, Lock=threading.Lock, Thread=RecordedThread))
    with _files.populating([_C.aligned_tensor(64 << 20)]):
        with entered:  # the reads end once every helper started is populating
            assert entered.wait_for(lambda: len(calls) == len(started), timeout=30), \
                f"{len(calls)} of {len(started)} helpers began populating"
    assert 1 <= len(started) <= _files.cpus(8)
    assert len(calls) == len(started)  # none took a chunk after the reads ended
    assert released == [True] * len(started)  # each let go when the reads ended
    assert not [t for t in threading.enumerate() if t.name == "nvmeio-populate"]


def test_small_loads_start_no_helpers(workdir, monkeypatch):
    calls = record_populate(monkeypatch)
    path = os.path.join(workdir, "small.safetensors")
    nst.save_file({"x": random_bytes(1 << 20)}, path)
    nst.load_file(path)
    assert calls == []


def test_the_save_and_the_helpers_use_only_the_cpus_the_process_may_run_on(workdir, monkeypatch):
    # A process pinned to one CPU of many (taskset, a container's cpuset) gets one CRC thread
    # and one helper, not one per CPU of the machine.
    from nvmeio_torch import _torch_zip
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    pools = []
    real_pool = _torch_zip.ThreadPoolExecutor

    def recording_pool(max_workers):
        pools.append(max_workers)
        return real_pool(max_workers)
    monkeypatch.setattr(_torch_zip, "ThreadPoolExecutor", recording_pool)
    state = {"w": random_bytes(40 << 20, seed=5)}
    path = os.path.join(workdir, "state.pt")
    nvmeio_torch.save(state, path)
    assert pools == [1]
    assert _files.cpus() == 1 and _files.cpus(8) == 1
    assert torch.equal(nvmeio_torch.load(path)["w"], state["w"])

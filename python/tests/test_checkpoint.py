"""nvmeio_torch.save/load: torch's checkpoint format, both ways, with torch.save/torch.load."""

import collections
import errno
import os
import pickle
import platform
import random
import struct
import subprocess
import sys
import threading
import time
import zipfile
import zlib

import pytest
import torch

import nvmeio_torch
from nvmeio_torch import _C, _files, _zip


# ---------------------------------------------------------------------------------------------
# The object zoo


def zoo():
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 8, generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.randn(2, 4, generator=g)).sum().backward()
    optimizer.step()
    dtypes = {str(d): (torch.randn(5, generator=g) * 50).to(d) for d in (
        torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int16,
        torch.int32, torch.int64, torch.uint8)}
    dtypes["complex64"] = torch.randn(4, dtype=torch.complex64, generator=g)
    dtypes["complex128"] = torch.randn(3, dtype=torch.complex128, generator=g)
    dtypes["bool"] = torch.tensor([True, False, True])
    return {
        "dtypes": dtypes,
        "zero_dim": torch.tensor(3.25),
        "empty": torch.empty(0, 4),
        "empty_int": torch.empty(0, dtype=torch.int64),
        "base": base,
        "row": base[2],  # views sharing base's storage
        "slice": base[1:4, 2:6],
        "transposed": base.t(),
        "strided": base[::2, ::3],
        "expanded": torch.arange(3.0).expand(4, 3),
        "non_contiguous": torch.randn(4, 6, generator=g).t()[1:],
        "parameter": torch.nn.Parameter(torch.randn(3, generator=g)),
        "requires_grad": torch.randn(2, generator=g).requires_grad_(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "ordered": collections.OrderedDict([("z", 1), ("a", torch.ones(2))]),
        "nested": [1, (2.5, "three", None, True), {"k": [torch.zeros(1), b"bytes"]}],
        "plain": {"int": 2 ** 70, "float": -0.0, "complex": 1 - 2j, "set": {1, 2},
                  "frozenset": frozenset({"a"}), "str": "ünïcode", "bytes": b"\x00\xff"},
    }


def storage(t):  # untyped: torch 2.x deprecates typed storages
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage().untyped()


def assert_same(a, b, where="obj"):
    """Equal structure, types, values; tensors equal in dtype, shape, stride, offset."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, where
        assert a.shape == b.shape, where
        assert a.stride() == b.stride(), where
        assert a.storage_offset() == b.storage_offset(), where
        assert a.requires_grad == b.requires_grad, where
        assert storage(a).nbytes() == storage(b).nbytes(), where
        assert torch.equal(a.detach(), b.detach()), f"{where}: values differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors(v)


def sharing(obj):
    """Which tensors (by position) share a storage: a partition of their indices."""
    groups = {}
    for i, t in enumerate(tensors(obj)):
        groups.setdefault(storage(t).data_ptr(), []).append(i)
    return sorted(g for g in groups.values())


def check_round_trip(original, loaded):
    assert_same(original, loaded)
    assert sharing(original) == sharing(loaded)
    assert len(sharing(loaded)) < len(list(tensors(loaded)))  # the zoo does share storages


def local_data_offsets(path):
    """(name, data offset, size) of every record, from the local headers themselves."""
    out = []
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset)
            header = f.read(30)
            name_length, extra_length = struct.unpack("<HH", header[26:30])
            out.append((info.filename, info.header_offset + 30 + name_length + extra_length,
                        info.file_size))
    return out


def test_nvmeio_save_is_read_by_torch_load(workdir):
    path = os.path.join(workdir, "zoo.pt")
    original = zoo()
    nvmeio_torch.save(original, path)
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        names = z.namelist()
        assert names[0] == "zoo/data.pkl" and "zoo/version" in names
        assert z.read("zoo/version") == b"3\n"
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    # weights_only=False: the zoo holds sets and complex numbers, which torch 2.6+'s default
    # (weights_only=True) refuses whoever wrote the file.
    check_round_trip(original, torch.load(path, weights_only=False))


def test_torch_save_is_read_by_nvmeio_load(workdir):
    path = os.path.join(workdir, "zoo.pt")
    original = zoo()
    torch.save(original, path)
    check_round_trip(original, nvmeio_torch.load(path))


def test_nvmeio_save_is_read_by_nvmeio_load(workdir):
    path = os.path.join(workdir, "zoo.pt")
    original = zoo()
    nvmeio_torch.save(original, path)
    check_round_trip(original, nvmeio_torch.load(path))


@pytest.mark.parametrize("obj", [torch.arange(10), torch.tensor(1.5), [], {}, 7, None,
                                 torch.empty(0)], ids=repr)
def test_top_level_objects_round_trip(workdir, obj):
    path = os.path.join(workdir, "one.pt")
    nvmeio_torch.save(obj, path)
    assert_same(obj, torch.load(path))
    assert_same(obj, nvmeio_torch.load(path))


def test_data_records_start_at_aligned_offsets(workdir):
    path = os.path.join(workdir, "aligned.pt")
    nvmeio_torch.save({"a": torch.zeros(3), "b": torch.ones(1000, dtype=torch.int8),
                       "c": torch.empty(0), "d": torch.randn(5000)}, path)
    data = [(name, offset) for name, offset, _ in local_data_offsets(path) if "/data/" in name]
    assert len(data) == 4
    for name, offset in data:
        assert offset % 4096 == 0, f"{name} at {offset}"


def test_loaded_storages_view_one_arena(workdir):
    path = os.path.join(workdir, "arena.pt")
    torch.save({"a": torch.randn(1000), "b": torch.randn(3000, dtype=torch.float64)}, path)
    loaded = nvmeio_torch.load(path)
    a, b = loaded["a"].data_ptr(), loaded["b"].data_ptr()
    offsets = {name.rsplit("/", 1)[1]: offset for name, offset, _ in local_data_offsets(path)}
    # In the arena the records keep their distance in the file: one read, no copy per tensor.
    assert abs(b - a) == abs(offsets["1"] - offsets["0"])


def test_records_beyond_4_gib_use_zip64(workdir):
    """A sparse archive: a record larger than 4 GiB, and one whose header lies past 4 GiB."""
    path = os.path.join(workdir, "big.zip")
    big = (4 << 30) + 12345
    records = _zip.plan([("big/data.pkl", 3, False), ("big/data/0", big, True),
                         ("big/version", 2, False)])
    assert records[1].zip64 and records[2].header_offset > 1 << 32
    zero_crc = zlib.crc32(bytes(1 << 24))
    crc = 0
    for _ in range(big >> 24):
        crc = _zip.crc32_combine(crc, zero_crc, 1 << 24)
    crc = _zip.crc32_combine(crc, zlib.crc32(bytes(big % (1 << 24))), big % (1 << 24))
    records[0].crc, records[1].crc, records[2].crc = zlib.crc32(b"pkl"), crc, zlib.crc32(b"3\n")
    with open(path, "wb") as f:
        f.truncate(records[-1].end)
        for r, payload in zip(records, (b"pkl", b"", b"3\n")):
            f.seek(r.header_offset)
            f.write(_zip.local_header(r) + payload)
        f.seek(records[-1].end)
        f.write(_zip.central_directory(records, records[-1].end))
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        assert [i.file_size for i in infos] == [3, big, 2]
        assert [i.header_offset for i in infos] == [r.header_offset for r in records]
        assert z.read("big/version") == b"3\n"  # zipfile checks its CRC
        assert z.read("big/data.pkl") == b"pkl"
    with open(path, "rb") as f:
        entries, directory = _zip.read_directory(f.fileno(), os.fstat(f.fileno()).st_size, path)
        header = os.pread(f.fileno(), 30, records[1].header_offset)
    assert [(e.name, e.size, e.header_offset) for e in entries] == \
        [(r.name, r.size, r.header_offset) for r in records]
    assert directory == records[-1].end
    assert _zip.local_data_offset(header, records[1].header_offset, path, "") % 4096 == 0


def test_many_records_use_zip64_end_records(workdir):
    path = os.path.join(workdir, "many.zip")
    records = _zip.plan([(f"m/{i}", 0, False) for i in range(70000)])
    for r in records:
        r.crc = 0
    with open(path, "wb") as f:
        f.write(b"".join(_zip.local_header(r) for r in records))
        f.write(_zip.central_directory(records, records[-1].end))
    with zipfile.ZipFile(path) as z:
        assert len(z.infolist()) == 70000 and z.testzip() is None


@pytest.mark.parametrize("split", [0, 1, 7, 4096, 99999])
def test_crc32_combine_joins_two_crcs(split):
    data = os.urandom(100000)
    whole = zlib.crc32(data)
    left, right = zlib.crc32(data[:split]), zlib.crc32(data[split:])
    assert _zip.crc32_combine(left, right, len(data) - split) == whole


def test_crc32_pieces_equal_zlib():
    from concurrent.futures import ThreadPoolExecutor

    buffers = [os.urandom(n) for n in (0, 1, 1000, 250001)]
    with ThreadPoolExecutor(3) as executor:
        crcs = _zip.crc32_pieces(executor, piece=4096)
        indices = [crcs.add(b) for b in buffers]
        assert [crcs.result(i) for i in indices] == [zlib.crc32(b) for b in buffers]


def test_extension_crc32_equals_zlib():
    """Every length through the folded loop's steps (64-byte groups, 16-byte blocks, the bytes
    after them), at every start in a word, continuing any value; numpy arrays and tensors."""
    rng = random.Random(5)
    data = os.urandom(70000)
    lengths = list(range(0, 300)) + [rng.randrange(300, 65000) for _ in range(200)]
    for n in lengths:
        start = rng.randrange(8)
        value = rng.choice([0, 0xFFFFFFFF, rng.getrandbits(32)])
        piece = memoryview(data)[start:start + n]
        assert _C.crc32(piece, value) == zlib.crc32(piece, value), (n, start, value)
    tensor = torch.arange(10000, dtype=torch.float32)
    assert _C.crc32(tensor.numpy()) == zlib.crc32(tensor.numpy().tobytes())
    assert _C.crc32(data, -1) == zlib.crc32(data, -1)  # as zlib: the value's low 32 bits
    assert _C.crc32(data, 1 << 40 | 7) == zlib.crc32(data, 1 << 40 | 7)
    if platform.machine() == "x86_64":
        with open("/proc/cpuinfo") as cpuinfo:
            assert _C.crc32_folds == ("pclmulqdq" in cpuinfo.read())


def test_extension_crc32_refuses_what_is_not_contiguous():
    with pytest.raises((BufferError, TypeError)):
        _C.crc32(memoryview(bytes(100))[::2])
    with pytest.raises(TypeError):
        _C.crc32("text")


# ---------------------------------------------------------------------------------------------
# load: weights_only, map_location, what it refuses


class Custom:
    pass


class RunsCommand:
    def __reduce__(self):
        return (os.system, ("touch /nonexistent-nvmeio-test",))


def test_weights_only_refuses_other_globals_by_name(workdir):
    path = os.path.join(workdir, "custom.pt")
    torch.save({"w": torch.ones(2), "x": Custom()}, path)
    with pytest.raises(pickle.UnpicklingError, match=r"test_checkpoint\.Custom"):
        nvmeio_torch.load(path)
    loaded = nvmeio_torch.load(path, weights_only=False)
    assert isinstance(loaded["x"], Custom) and torch.equal(loaded["w"], torch.ones(2))


def test_weights_only_refuses_a_command(workdir):
    path = os.path.join(workdir, "evil.pt")
    torch.save([RunsCommand()], path)
    with pytest.raises(pickle.UnpicklingError, match=r"(posix|os)\.system"):
        nvmeio_torch.load(path)


@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"), {"cpu": "cpu"}, None])
def test_map_location_as_torch_load(workdir, map_location):
    path = os.path.join(workdir, "m.pt")
    nvmeio_torch.save({"t": torch.arange(4)}, path)
    assert torch.equal(nvmeio_torch.load(path, map_location=map_location)["t"], torch.arange(4))


def test_map_location_callable_sees_each_storage(workdir):
    path = os.path.join(workdir, "m.pt")
    a = torch.arange(4)
    nvmeio_torch.save({"a": a, "b": torch.ones(2), "c": a[1:]}, path)
    seen = []

    def where(storage, location):
        seen.append(location)
        return storage

    loaded = nvmeio_torch.load(path, map_location=where)
    assert seen == ["cpu", "cpu"] and torch.equal(loaded["c"], torch.arange(1, 4))


def test_legacy_files_are_refused_or_handed_to_torch(workdir):
    path = os.path.join(workdir, "legacy.pt")
    torch.save({"t": torch.arange(3)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(ValueError, match="legacy"):
        nvmeio_torch.load(path)
    assert torch.equal(nvmeio_torch.load(path, weights_only=False)["t"], torch.arange(3))


def test_loads_flags_are_keyword_only_as_torch_loads_are(workdir):
    path = os.path.join(workdir, "flags.pt")
    nvmeio_torch.save({"t": torch.arange(3)}, path)
    with pytest.raises(TypeError):
        nvmeio_torch.load(path, None, False)  # weights_only given by position
    assert torch.equal(nvmeio_torch.load(path, None, weights_only=False)["t"], torch.arange(3))


def test_a_trusted_legacy_file_loads_its_objects_whatever_torchs_default(workdir, monkeypatch):
    # A legacy file holding an object torch's weights-only unpickler refuses (a Counter), loaded
    # with weights_only=False under a torch.load whose default is weights_only=True (torch 2.6
    # on): the caller's word reaches torch.
    path = os.path.join(workdir, "legacy_object.pt")
    torch.save({"counts": collections.Counter("aab")}, path,
               _use_new_zipfile_serialization=False)
    real_load = torch.load

    def load_as_torch_2_6(f, map_location=None, *, weights_only=True, **kwargs):
        return real_load(f, map_location=map_location, weights_only=weights_only, **kwargs)

    monkeypatch.setattr(torch, "load", load_as_torch_2_6)
    loaded = nvmeio_torch.load(path, weights_only=False)
    assert loaded["counts"] == collections.Counter("aab")
    with pytest.raises(ValueError, match="legacy"):
        nvmeio_torch.load(path)


def test_malformed_archives_raise_value_error_naming_the_file(workdir):
    path = os.path.join(workdir, "bad.pt")
    nvmeio_torch.save({"t": torch.arange(1000)}, path)
    with open(path, "r+b") as f:  # cut the central directory
        f.truncate(os.path.getsize(path) - 30)
    with pytest.raises(ValueError, match="bad.pt"):
        nvmeio_torch.load(path)
    with open(path, "wb") as f:
        f.write(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="bad.pt"):
        nvmeio_torch.load(path)


def test_a_record_longer_than_its_place_in_the_file_is_refused(workdir):
    path = os.path.join(workdir, "bad.pt")
    nvmeio_torch.save({"t": torch.arange(1000), "u": torch.arange(10)}, path)
    data = bytearray(open(path, "rb").read())
    at = data.rindex(b"bad/data/0") - 46  # its entry in the central directory, the last mention
    assert data[at:at + 4] == b"PK\x01\x02"
    struct.pack_into("<II", data, at + 20, 8000 + 4096, 8000 + 4096)  # sizes reach the next record
    open(path, "wb").write(data)
    with pytest.raises(ValueError, match="bad/data/0"):
        nvmeio_torch.load(path)


def test_a_record_past_the_end_of_the_file_is_refused(workdir):
    path = os.path.join(workdir, "bad.pt")
    nvmeio_torch.save({"t": torch.arange(1000)}, path)
    data = bytearray(open(path, "rb").read())
    at = data.rindex(b"bad/data/0") - 46
    struct.pack_into("<I", data, at + 42, len(data) + 5000)  # its local header's offset
    open(path, "wb").write(data)
    with pytest.raises(ValueError, match="bad/data/0"):
        nvmeio_torch.load(path)


def test_a_missing_file_raises_file_not_found(workdir):
    with pytest.raises(FileNotFoundError):
        nvmeio_torch.load(os.path.join(workdir, "missing.pt"))


# ---------------------------------------------------------------------------------------------
# save: failures leave the old file


def entries_of(folder):
    return sorted(os.listdir(folder))


def test_an_unpicklable_object_raises_and_keeps_the_old_file(workdir):
    path = os.path.join(workdir, "keep.pt")
    nvmeio_torch.save({"old": torch.arange(5)}, path)
    before = open(path, "rb").read()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        nvmeio_torch.save({"new": torch.ones(3), "f": lambda x: x}, path)
    assert open(path, "rb").read() == before
    assert entries_of(workdir) == ["keep.pt"]


def test_a_missing_directory_raises_os_error_naming_the_path(workdir):
    path = os.path.join(workdir, "no", "such", "x.pt")
    with pytest.raises(OSError) as raised:
        nvmeio_torch.save({"t": torch.ones(2)}, path)
    assert raised.value.errno == errno.ENOENT and raised.value.filename == path


@pytest.fixture
def small_tmpfs(workdir):
    if os.geteuid() != 0:
        pytest.skip("mounting a full tmpfs needs root")
    mount = os.path.join(workdir, "small")
    os.mkdir(mount)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", mount],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", mount], check=True)


def test_a_full_disk_raises_enospc_and_keeps_the_old_file(small_tmpfs):
    path = os.path.join(small_tmpfs, "full.pt")
    nvmeio_torch.save({"old": torch.arange(100)}, path)
    before = open(path, "rb").read()
    with pytest.raises(OSError) as raised:
        nvmeio_torch.save({"new": torch.ones(1 << 20)}, path)  # 4 MiB into 1 MiB
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == path
    assert open(path, "rb").read() == before
    assert entries_of(small_tmpfs) == ["full.pt"]
    assert torch.equal(nvmeio_torch.load(path)["old"], torch.arange(100))


def test_save_without_durability_writes_the_same_file(workdir):
    os.mkdir(os.path.join(workdir, "a"))
    os.mkdir(os.path.join(workdir, "b"))
    a, b = os.path.join(workdir, "a", "same.pt"), os.path.join(workdir, "b", "same.pt")
    obj = zoo()
    nvmeio_torch.save(obj, a)
    nvmeio_torch.save(obj, b, durable=False)
    assert open(a, "rb").read() == open(b, "rb").read()


# ---------------------------------------------------------------------------------------------
# The GIL, and memory


class counting_handle:
    """A handle whose batch calls note how far a Python thread counted while they ran."""

    def __init__(self, handle, counter):
        self._handle = handle
        self._counter = counter
        self.counted = []

    def _counted(self, name):
        def call(*args):
            before = self._counter.count
            result = getattr(self._handle, name)(*args)
            self.counted.append((name, self._counter.count - before))
            return result
        return call

    def _started(self, name):
        def call(*args):
            self._started_at = (name, self._counter.count)
            return getattr(self._handle, name)(*args)
        return call

    def wait(self):
        result = self._handle.wait()
        # From submitting the batch to its completion (a save's CRCs run meanwhile).
        name, count = self._started_at
        self.counted.append((name + "..wait", self._counter.count - count))
        return result

    def __getattr__(self, name):
        if name in ("sync_pread_batch", "sync_pwrite_batch"):
            return self._counted(name)
        if name in ("async_pread_batch", "async_pwrite_batch"):
            return self._started(name)
        return getattr(self._handle, name)


class counter(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.count = 0
        self.stop = False

    def run(self):
        while not self.stop:
            self.count += 1
            time.sleep(0.0001)  # lets go of the GIL, so that the main thread gets it back


def test_the_gil_is_released_during_the_io(workdir):
    """With the switch interval long, a Python thread only runs while the main thread is in a
    call that released the GIL: the batch reads and writes must be such calls. A call that
    holds the GIL never lets it count; one that releases it may still be over before the thread
    is scheduled on a busy machine, so each is given a few tries."""
    path = os.path.join(workdir, "gil.pt")
    obj = {f"t{i}": torch.randn(1 << 20) for i in range(16)}  # 64 MiB
    thread = counter()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    saved = loaded = None
    try:
        thread.start()
        for _ in range(5):
            saving = counting_handle(_files.make_handle(), thread)
            nvmeio_torch.save(obj, path, handle=saving)
            saved = dict(saving.counted)["async_pwrite_batch..wait"]
            if saved > 0:
                break
        for _ in range(5):
            loading = counting_handle(_files.make_handle(), thread)
            result = nvmeio_torch.load(path, handle=loading)
            loaded = dict(loading.counted)["async_pread_batch..wait"]
            if loaded > 0:
                break
    finally:
        thread.stop = True
        sys.setswitchinterval(interval)
        thread.join()
    assert torch.equal(result["t15"], obj["t15"])
    assert saved > 0, "no Python thread ran while the data records were written"
    assert loaded > 0, "no Python thread ran while the records were read"


# Peak RSS from /proc (VmHWM, reset through clear_refs after the imports): the process's
# ru_maxrss would start at its parent's RSS, which fork() and exec() carry over.
RSS_CHILD = r"""
import sys
import torch, nvmeio_torch
from nvmeio_torch import _files

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

handle = _files.make_handle()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
base = status("VmHWM")
loaded = nvmeio_torch.load(sys.argv[1], handle=handle)
print(status("VmHWM") - base, sum(t.numel() * t.element_size() for t in loaded.values()))
"""


@pytest.mark.parametrize("writer", ["torch", "nvmeio"])
def test_load_peak_memory_is_the_bytes_loaded(workdir, writer):
    path = os.path.join(workdir, "rss.pt")
    obj = {f"t{i}": torch.full((4 << 20,), i, dtype=torch.float32) for i in range(6)}  # 96 MiB
    (torch.save if writer == "torch" else nvmeio_torch.save)(obj, path)
    del obj
    done = subprocess.run([sys.executable, "-c", RSS_CHILD, path], capture_output=True, text=True,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    grown, loaded = map(int, done.stdout.split())
    assert loaded == 96 << 20
    assert grown <= 1.1 * loaded, f"peak RSS grew by {grown} bytes to load {loaded}"


def test_untyped_storages_load_with_weights_only(workdir):
    """torch 2 pickles the storage of a tensor whose dtype has no typed storage class (uint16,
    float8...; rebuilt by _rebuild_tensor_v3) as the global torch.storage.UntypedStorage; an
    untyped storage saved on its own is pickled the same way here."""
    path = os.path.join(workdir, "u.pt")
    t = torch.arange(10, dtype=torch.int16)
    untyped = storage(t)
    nvmeio_torch.save({"s": untyped}, path)
    loaded = nvmeio_torch.load(path)["s"]
    assert bytes(loaded) == bytes(torch.load(path)["s"])


@pytest.mark.parametrize("value", [int, str, range, chr], ids=lambda v: v.__name__)
def test_python_2_names_of_builtins_in_protocol_2_pickles_load(workdir, value):
    # A protocol 2 pickle names int as __builtin__.long, str as unicode, range as xrange, chr
    # as unichr: pickle maps them back, and so must load, before its weights_only check.
    path = os.path.join(workdir, "builtins.pt")
    torch.save({"cast": value, "w": torch.ones(2)}, path)
    loaded = nvmeio_torch.load(path, weights_only=False)
    assert loaded["cast"] is value and torch.equal(loaded["w"], torch.ones(2))
    if value is range:  # allowed by weights_only, under its Python 3 name
        assert nvmeio_torch.load(path)["cast"] is range
    else:
        with pytest.raises(pickle.UnpicklingError, match=f"builtins.{value.__name__}"):
            nvmeio_torch.load(path)


def test_a_python_2_name_is_mapped_once(workdir):
    # whichdb is dbm.whichdb in Python 3, and Python 2's dbm module is dbm.ndbm: mapping the
    # name twice would look for dbm.ndbm.whichdb.
    import dbm

    path = os.path.join(workdir, "whichdb.pt")
    torch.save({"f": dbm.whichdb}, path)
    assert nvmeio_torch.load(path, weights_only=False)["f"] is dbm.whichdb


def test_a_checkpoint_written_in_place_while_it_loads_is_estale(workdir, monkeypatch):
    path = os.path.join(workdir, "ckpt.pt")
    nvmeio_torch.save({"w": torch.ones(1000)}, path)
    real = _files.read_spans

    def read_spans_of_a_file_written_meanwhile(handle, reads):
        with open(path, "r+b") as f:  # in place: same inode, other bytes
            f.seek(0, os.SEEK_END)
            f.write(b"\0" * 10)
        return real(handle, reads)

    monkeypatch.setattr(_files, "read_spans", read_spans_of_a_file_written_meanwhile)
    with pytest.raises(OSError, match="changed") as raised:
        nvmeio_torch.load(path)
    assert raised.value.errno == errno.ESTALE and raised.value.filename == path

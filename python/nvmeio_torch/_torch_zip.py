"""torch.save's format, for the modules that read and write it (checkpoint.py, dcp.py): the
pickler and unpickler torch.save and torch.load use, the zip archive of one object planned and
written at any aligned offset of a file (storages in one batch of the handle while their CRC-32s
are computed, then the pickle, headers and central directory in one more), and the archive's
directory read back and checked, at any offset too.
"""

import _compat_pickle
import importlib
import io
import pickle
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor

import torch

from . import _zip

_PROTOCOL = 2  # torch.save's default pickle protocol
_FORMAT_VERSION = b"3\n"  # what torch 1.6+ writes in <archive>/version for a pickled object


def _untyped(typed):
    storage = getattr(typed, "_untyped_storage", None)
    return storage if storage is not None else typed._storage


def _typed_numel(typed):
    return typed._size() if hasattr(typed, "_size") else typed.size()


def _typed_storage(untyped, dtype):
    try:
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)
    except TypeError:  # torch 1.x has no _internal (nor the warning it silences)
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype)


def _storage_bytes(untyped):
    """A flat uint8 tensor over the storage's bytes, on its device (CUDA storages go through the
    staging ring, others than CPU and CUDA are copied to the CPU)."""
    flat = torch.empty(0, dtype=torch.uint8, device=untyped.device).set_(untyped)
    return flat if flat.device.type in ("cpu", "cuda") else flat.cpu()


_ELEMENT_SIZES = {}


def _element_size(dtype):
    if dtype not in _ELEMENT_SIZES:  # itemsize: torch 2.1+ (an empty quantized tensor warns)
        size = getattr(dtype, "itemsize", None)
        _ELEMENT_SIZES[dtype] = size if size is not None else \
            torch.empty((), dtype=dtype).element_size()
    return _ELEMENT_SIZES[dtype]


class Pickler(pickle.Pickler):
    """Pickles as torch.save does: every storage becomes a persistent id naming its record."""

    def __init__(self, file):
        super().__init__(file, protocol=_PROTOCOL)
        self.storages = []  # (key, untyped storage), in the order first met
        self._keys = {}  # StorageImpl address -> key
        self._dtypes = {}  # data address -> dtype, to refuse one storage under two dtypes

    def persistent_id(self, obj):
        if isinstance(obj, torch.storage.TypedStorage):
            untyped = _untyped(obj)
            dtype = obj.dtype
            # torch 2.x's public pickle_storage_type warns that TypedStorage is deprecated.
            storage_type = getattr(torch, obj._pickle_storage_type()
                                   if hasattr(obj, "_pickle_storage_type")
                                   else obj.pickle_storage_type())
            numel = _typed_numel(obj)
        elif isinstance(obj, torch.UntypedStorage):
            untyped, dtype, storage_type = obj, torch.uint8, torch.UntypedStorage
            numel = obj.nbytes()
        else:
            return None
        if untyped.data_ptr() != 0:
            seen = self._dtypes.setdefault(untyped.data_ptr(), dtype)
            if seen != dtype:
                raise RuntimeError("Cannot save multiple tensors or storages that view the same "
                                   f"data as different types ({seen} and {dtype})")
        key = self._keys.get(untyped._cdata)
        if key is None:
            key = self._keys[untyped._cdata] = str(len(self._keys))
            self.storages.append((key, untyped))
        location = torch.serialization.location_tag(untyped)
        return ("storage", storage_type, key, location, numel)


class archive:
    """An object pickled as torch.save pickles it and laid out, from offset 0, as the zip
    archive torch.save writes, every data record's start a multiple of 4096: `records` (the
    pickle, one per storage, version, byteorder), `contents` (each storage's bytes, a flat uint8
    tensor on its device), `pickled`, and `length` (the archive's bytes, central directory
    included). The pickler's error is raised before anything is written."""

    def __init__(self, obj, name):
        buffer = io.BytesIO()
        pickler = Pickler(buffer)
        pickler.dump(obj)
        self.pickled = buffer.getbuffer()
        self.contents = [_storage_bytes(untyped) for _, untyped in pickler.storages]
        self.records = _zip.plan(
            [(f"{name}/data.pkl", len(self.pickled), False)]
            + [(f"{name}/data/{key}", t.numel(), True)
               for (key, _), t in zip(pickler.storages, self.contents)]
            + [(f"{name}/version", len(_FORMAT_VERSION), False),
               (f"{name}/byteorder", len(sys.byteorder), False)])
        for r in self.records:
            r.crc = 0  # the directory's length does not depend on the CRCs
        end = self.records[-1].end
        self.length = end + len(_zip.central_directory(self.records, end))

    @property
    def data_records(self):
        return self.records[1:1 + len(self.contents)]


def write_archives(placed, temporary, handle, raw=()):
    """Fills the empty file `temporary` with archives placed at offsets, `placed` being a list
    of (archive, offset), and `raw` bytes, (offset, bytes) at aligned offsets: every storage's
    bytes and the raw ones in one asynchronous batch while the storages' CRC-32s are computed
    (through the staging rings when some are on GPUs), then every pickle, header and central
    directory in one more."""
    data = [(r, t, base + r.data_offset) for archive, base in placed
            for r, t in zip(archive.data_records, archive.contents)]
    raw = [(torch.frombuffer(bytearray(b), dtype=torch.uint8), offset) for offset, b in raw if b]
    pieces = []
    if through_rings([t for _, t, _ in data]):
        _write_through_rings(data, temporary)
        pieces = raw
    else:
        _write_data(data, temporary, handle, raw)
    for archive, base in placed:
        pieces += [(torch.frombuffer(bytearray(b), dtype=torch.uint8), offset)
                   for offset, b in _metadata_pieces(archive, base)]
    handle.sync_pwrite_batch([t for t, _ in pieces], temporary, [o for _, o in pieces])


def through_rings(contents):
    """Whether a save's storages go through the staging rings: when some are on a GPU."""
    return any(t.device.type != "cpu" for t in contents)


def _write_through_rings(data, temporary):
    """The storages' bytes of a state on GPUs, `data` being (record, bytes, file offset): each
    device's records (the CPU's with the first) go through its staging ring (GPU -> page-locked
    slots -> O_DIRECT writes, overlapped), their CRC-32s computed from the slots before each is
    written."""
    from . import _staged

    members = [i for i, (r, _, _) in enumerate(data) if r.size]
    for r, _, _ in data:
        r.crc = 0
    crcs = _staged.run_by_device("write", [(temporary, data[i][2], data[i][1], data[i][0].name)
                                           for i in members], checksum=True)
    for i, crc in zip(members, crcs):
        data[i][0].crc = crc


def _write_data(data, temporary, handle, raw=()):
    """The storages' bytes, `data` being (record, bytes, file offset), and `raw` ((bytes,
    file offset)) in one asynchronous batch while the storages' CRC-32s are computed."""
    from ._files import cpus, draining

    writes = [(t, offset) for r, t, offset in data if r.size] + list(raw)
    with draining(handle) as queue:
        if writes:
            queue.pending = True  # first: an interrupt as the call returns still waits
            handle.async_pwrite_batch([t for t, _ in writes], temporary,
                                      [offset for _, offset in writes])
        # The CRCs are computed while the data is written.
        with ThreadPoolExecutor(max_workers=cpus()) as executor:  # the CPUs it may run on
            crcs = _zip.crc32_pieces(executor)
            indices = [crcs.add(t.numpy()) for _, t, _ in data]
            for (r, _, _), index in zip(data, indices):
                r.crc = crcs.result(index)


def _metadata_pieces(archive, base):
    """The (offset, bytes) of an archive at `base` other than its storages: the pickle with its
    header at the start, each data record's local header before its data, and the small records
    with the central directory after the last (its offsets relative to the archive's start)."""
    records = archive.records
    records[0].crc = zlib.crc32(archive.pickled)
    tail = records[1 + len(archive.contents):]
    tail[0].crc = zlib.crc32(_FORMAT_VERSION)
    tail[1].crc = zlib.crc32(sys.byteorder.encode())
    pieces = [(base, _zip.local_header(records[0]) + archive.pickled.tobytes())]
    pieces += [(base + r.header_offset, _zip.local_header(r)) for r in archive.data_records]
    end = records[-1].end
    pieces.append((base + tail[0].header_offset,
                   _zip.local_header(tail[0]) + _FORMAT_VERSION + _zip.local_header(tail[1])
                   + sys.byteorder.encode() + _zip.central_directory(records, end)))
    return pieces


_STORAGE_DTYPES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool, "ComplexDoubleStorage": torch.complex128,
    "ComplexFloatStorage": torch.complex64, "QUInt8Storage": torch.quint8,
    "QInt8Storage": torch.qint8, "QInt32Storage": torch.qint32,
    "QUInt4x2Storage": torch.quint4x2, "QUInt2x4Storage": torch.quint2x4,
    "UntypedStorage": torch.uint8,
}


class _StorageType:
    """What a pickled ``torch.<X>Storage`` global stands for: the dtype of its elements."""

    def __init__(self, dtype):
        self.dtype = dtype


def _storage_type(name):
    dtype = _STORAGE_DTYPES.get(name)
    if dtype is None:
        dtype = getattr(getattr(torch, name, None), "dtype", None)
    return _StorageType(dtype) if isinstance(dtype, torch.dtype) else None


def _weights_globals():
    """The globals weights_only admits: containers, torch's tensor rebuilders, dtypes, sizes,
    devices, and the builtins protocol 2 pickles plain values with."""
    allowed = {("collections", "OrderedDict"), ("torch", "Size"), ("torch", "Tensor"),
               ("torch", "device"), ("torch.nn.parameter", "Parameter"),
               ("torch.serialization", "_get_layout"), ("torch._tensor", "_rebuild_from_type_v2"),
               ("builtins", "complex"), ("builtins", "set"), ("builtins", "frozenset"),
               ("builtins", "bytearray"), ("builtins", "slice"), ("builtins", "range"),
               ("_codecs", "encode")}
    allowed |= {("torch._utils", name) for name in (
        "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
        "_rebuild_parameter_with_state", "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor",
        "_rebuild_meta_tensor_no_storage")}
    allowed |= {("torch", name) for name in dir(torch)
                if isinstance(getattr(torch, name, None), torch.dtype)}
    allowed |= {("torch", name) for name in dir(torch)
                if name.endswith("Tensor") and isinstance(getattr(torch, name, None), type)}
    allowed.add(("collections", "Counter"))
    allowed |= {("torch", name) for name in (  # quantized tensors' schemes
        "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
        "per_channel_symmetric", "per_channel_affine_float_qparams") if hasattr(torch, name)}
    allowed |= {("torch._utils", name) for name in (
        "_rebuild_wrapper_subclass", "_rebuild_qtensor", "_rebuild_nested_tensor",
        "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy")
        if hasattr(torch._utils, name)}
    return frozenset(allowed)


def _user_safe_globals():
    """What torch.serialization.add_safe_globals (or the safe_globals context) admits to
    weights_only loads, by the name a pickle gives it: the object's module and qualified name,
    or the name given beside it. Read at each refusal: users add globals at any time."""
    get = getattr(torch.serialization, "get_safe_globals", None)  # torch 2.4+
    admitted = {}
    for entry in get() if get is not None else ():
        if isinstance(entry, tuple):
            admitted[entry[1]] = entry[0]
        else:
            admitted[f"{entry.__module__}.{entry.__qualname__}"] = entry
    return admitted


_WEIGHTS_GLOBALS = None


def _python3_name(module, name):
    """(module, name) of a global as Python 3 knows it, from the name a protocol 2 pickle may
    give it (pickle's own mapping, which an overridden find_class would otherwise skip)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class Unpickler(pickle.Unpickler):
    def __init__(self, file, path, weights_only, persistent_load):
        super().__init__(file, encoding="utf-8")
        self._path = path
        self._weights_only = weights_only
        self._persistent_load = persistent_load

    def persistent_load(self, saved_id):
        return self._persistent_load(saved_id)

    def find_class(self, module, name):
        # Python 2's names first, as pickle maps them for protocols below 3 (torch.save writes
        # protocol 2): __builtin__.long is builtins.int, unicode str, xrange range, unichr chr;
        # then modules torch renamed. Mapped whatever the protocol: a later protocol's names
        # are Python 3's already. A mapped name is resolved here, not by pickle, which would map
        # it once more (Python 2's whichdb is dbm.whichdb, and Python 2's dbm is dbm.ndbm).
        python3 = _python3_name(module, name)
        mapped = python3 != (module, name)
        module, name = python3
        module = {"torch.tensor": "torch._tensor"}.get(module, module)
        # torch 2 pickles the storages of tensors rebuilt by _rebuild_tensor_v3 (dtypes without
        # a typed storage class: uint16/32/64, float8...) as torch.storage.UntypedStorage.
        if module in ("torch", "torch.storage") and isinstance(name, str) and \
                name.endswith("Storage"):
            storage_type = _storage_type(name)
            if storage_type is not None:
                return storage_type
        if self._weights_only:
            global _WEIGHTS_GLOBALS
            if _WEIGHTS_GLOBALS is None:
                _WEIGHTS_GLOBALS = _weights_globals()
            if (module, name) not in _WEIGHTS_GLOBALS:
                admitted = _user_safe_globals().get(f"{module}.{name}")
                if admitted is not None:
                    return admitted
                raise pickle.UnpicklingError(
                    f"nvmeio_torch.load({self._path!r}): weights_only=True refuses the global "
                    f"{module}.{name} (only tensors, containers and plain values are "
                    "unpickled); admit it with torch.serialization.add_safe_globals, or pass "
                    "weights_only=False if you trust this file")
        if mapped:
            return getattr(importlib.import_module(module), name)
        return super().find_class(module, name)


def _spans(entries, directory_offset):
    """Each entry's extent: from its local header to the next record's header (or the central
    directory), which holds its header, data and any data descriptor in a well-formed file."""
    ordered = sorted(entries, key=lambda e: e.header_offset)
    ends = {}
    for e, following in zip(ordered, ordered[1:] + [None]):
        ends[id(e)] = following.header_offset if following is not None else directory_offset
    return ends


def directory(fd, path, size, base=0):
    """The records of the torch.save archive `size` bytes long at `base` of the file open at
    `fd`, checked: (the pickle's entry, the byte order's or None, {storage key: entry}, the
    storages' name prefix, {id(entry): end of its extent}), offsets relative to `base`. Raises
    ValueError naming the file where the archive is not a torch.save one or is malformed."""
    entries, directory_offset = _zip.read_directory(fd, size, path, base)
    if not entries:
        raise ValueError(f"{path}: an empty zip archive, not a torch checkpoint")
    archive = entries[0].name.split("/", 1)[0] + "/"
    if "/" not in entries[0].name:
        raise ValueError(f"{path}: record {entries[0].name!r} is not in an archive folder, as "
                         "torch.save's records are")
    by_name = {e.name: e for e in entries}
    if archive + "constants.pkl" in by_name:
        raise ValueError(f"{path}: a TorchScript archive; load it with torch.jit.load")
    pickle_entry = by_name.get(archive + "data.pkl")
    if pickle_entry is None:
        raise ValueError(f"{path}: no {archive}data.pkl record: not a torch.save checkpoint")
    byteorder = by_name.get(archive + "byteorder")
    data_prefix = archive + "data/"
    data_entries = {e.name[len(data_prefix):]: e for e in entries
                    if e.name.startswith(data_prefix)}
    checked = [pickle_entry] + list(data_entries.values()) + ([byteorder] if byteorder else [])
    for e in checked:
        if e.method != 0 or e.compressed_size != e.size:
            raise ValueError(f"{path}: record {e.name!r} is compressed (method {e.method}); "
                             "torch.save stores its records uncompressed")
        if e.flags & 1:
            raise ValueError(f"{path}: record {e.name!r} is encrypted")
    span_ends = _spans(entries, directory_offset)
    for e in checked:
        if e.header_offset + _zip.LOCAL_HEADER_SIZE + e.size > span_ends[id(e)]:
            raise ValueError(f"{path}: record {e.name!r} ({e.size} bytes, header at "
                             f"{e.header_offset}) runs into the next record or past the "
                             "central directory")
    return pickle_entry, byteorder, data_entries, data_prefix, span_ends


def untyped_of(tensor):
    """The untyped storage under a tensor (torch 1.13 and 2.x)."""
    return tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else \
        _untyped(tensor.storage())


def persistent_loader(path, data_entries, data_prefix, storage_of):
    """The persistent_load of an unpickler of ``path``: checks each storage's persistent id and
    record, and makes each storage once, as ``storage_of(record, nbytes, location)`` returns
    it (an untyped storage), typed as the pickle says. ``unpickle`` uses it."""
    loaded = {}
    made = []  # (untyped storage, its bytes, its record's name)

    def persistent_load(saved_id):
        if not isinstance(saved_id, tuple) or len(saved_id) != 5:
            raise pickle.UnpicklingError(f"{path}: unexpected persistent id {saved_id!r}")
        typename, storage_type, key, location, numel = saved_id
        typename = typename.decode("ascii") if isinstance(typename, bytes) else typename
        if typename != "storage" or not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"{path}: unexpected persistent id {saved_id!r}")
        location = location.decode("ascii") if isinstance(location, bytes) else location
        if key not in loaded:
            e = data_entries.get(key)
            if e is None:
                raise ValueError(f"{path}: the pickle refers to a record {data_prefix}{key} "
                                 "the archive lacks")
            nbytes = numel * _element_size(storage_type.dtype)
            if nbytes > e.size:
                raise ValueError(f"{path}: record {e.name!r} holds {e.size} bytes, the pickle "
                                 f"wants {nbytes}")
            untyped = storage_of(e, nbytes, location)
            made.append((untyped, nbytes, e.name))
            loaded[key] = _typed_storage(untyped, storage_type.dtype)
        return loaded[key]

    def check():
        # A tensor whose view (offset, size, stride) runs past its storage grew a resizable
        # one: its bytes would then be memory the load never filled.
        for untyped, nbytes, name in made:
            if untyped.nbytes() != nbytes:
                raise ValueError(f"{path}: a tensor of record {name!r} reaches past its {nbytes} "
                                 "bytes (its offset, size or stride in the pickle): the file is "
                                 "damaged")

    persistent_load.check = check
    return persistent_load


def unpickle(pickled, path, weights_only, persistent_load):
    """The object ``pickled`` holds, its storages made by ``persistent_load`` (from
    ``persistent_loader``) and checked after. A pickle that does not load is a ValueError naming
    the file (the unpickler's own refusals name it already)."""
    try:
        result = Unpickler(io.BytesIO(pickled), path, weights_only, persistent_load).load()
    except Exception as error:
        if path in str(error):
            raise
        raise ValueError(f"{path}: its pickle does not load ({type(error).__name__}: {error}): "
                         "the file is damaged, or not torch's") from error
    persistent_load.check()
    return result


def data_start(e, read, span_ends, path):
    """Where record e's data starts in the file, from its local header in the arena of `read`
    (the spans it was read into). ValueError naming the file where the header is not there or
    the data runs into the next record or the central directory."""
    at = read.offset_of(e.header_offset, e.header_offset + _zip.LOCAL_HEADER_SIZE)
    if at is None:
        raise ValueError(f"{path}: record {e.name!r} has its local header at "
                         f"{e.header_offset}, past the end of the file")
    data = _zip.local_data_offset(read.arena.numpy()[at:at + _zip.LOCAL_HEADER_SIZE],
                                  e.header_offset, path, e.name)
    if data + e.size > span_ends[id(e)]:
        raise ValueError(f"{path}: record {e.name!r} (data at {data}, {e.size} "
                         "bytes) overlaps the next record or the central directory")
    return data

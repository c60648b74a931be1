"""Checkpoints in torch's own format: ``save``/``load`` as ``torch.save``/``torch.load`` have
them, with the bytes moved by nvmeio.

The file is what torch.save writes (torch 1.6 and later read it): a zip archive of stored
records ``<archive>/data.pkl`` (the object, pickled with protocol 2, each storage replaced by a
persistent id ``('storage', <Storage type>, key, location, numel)``), ``<archive>/data/<key>``
(each storage's bytes, once however many tensors view it), ``<archive>/version`` and
``<archive>/byteorder``. ``<archive>`` is the file's name without its extension, as torch.save
names it. nvmeio's files differ from torch's only where the zip format leaves room: every data
record starts at a multiple of 4096 bytes (torch: 64), so that it moves with O_DIRECT.

save: Python pickles and plans offsets; the storages go to the file in one asynchronous batch
(nvmeio's batch front end: O_DIRECT, the handle's workers) while their CRC-32s are computed in
threads; then the headers and the central directory, in one more batch.

load: the central directory is parsed, then every data record is read in one batch into one
arena of aligned memory (aligned supersets of the records' ranges); the storages view the arena
(it lives as long as any of them), and the pickle is read with a persistent_load that hands them
out. Unpickling is restricted to weights by default.

The format's machinery (pickler, unpickler, the archive's plan, writes and directory) is
_torch_zip.py's, which dcp.py shares.
"""

import collections
import inspect
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch

from . import _C, _torch_zip, _zip

__all__ = ["save", "load"]

def _archive_name(path):
    name = os.path.splitext(os.path.basename(path))[0]
    return name or "archive"


def save(obj, path, *, durable=True, handle=None):
    """Saves ``obj`` to ``path`` as ``torch.save(obj, path)`` would: a file torch.load reads.

    Any object torch.save takes; tensors of any dtype and layout, views of one storage saved
    once and restored sharing it. Every data record starts at a 4 KiB-aligned offset.

    The file is replaced atomically: written as a temporary beside ``path``, then renamed over
    it. With ``durable=True`` (the default) the data is flushed (``fdatasync``) before the
    rename and the directory synced after it: once save returns, the new file survives a crash
    or power loss, and a crash before that leaves the old file (or none) at ``path``, never a
    torn one. With ``durable=False`` the rename is still atomic for readers and for the process
    being killed, but after a power loss ``path`` may hold the old file or an empty or partial
    new one. A save killed midway can leave its temporary beside ``path``
    (``.<name>.<random>.tmp``); a save that raises removes it.

    ``handle``: the ``aio_handle`` that moves the bytes (default: ``make_handle()``), with no
    request pending (save waits for its own). Raises the pickler's error for an object that
    cannot be pickled (before any file is made), OSError with errno and ``path`` as its filename
    (the temporary as filename2) for I/O failures; ``path`` is then left as it was.
    """
    from ._files import atomic_file, handle_or_default

    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"nvmeio_torch.save: path must be a file name, not {type(path).__name__}"
                        " (torch.save writes to file objects)")
    path = os.fsdecode(os.fspath(path))
    archive = _torch_zip.archive(obj, _archive_name(path))
    handle = handle_or_default(handle)

    try:
        with atomic_file(path, durable=durable) as temporary:
            _torch_zip.write_archives([(archive, 0)], temporary, handle)
    except OSError as error:
        if error.filename == path:
            raise
        # The I/O names the temporary; the caller knows the checkpoint's path.
        raise OSError(error.errno, f"nvmeio_torch.save({path!r}): {error.strerror or error}",
                      path, None, error.filename) from error


def _restore_location(map_location):
    """torch.load's map_location rules: None, a location string, a torch.device, a dict from
    saved location to location, or a callable (storage, location) -> storage or None."""
    default = torch.serialization.default_restore_location
    if map_location is None:
        return default
    if isinstance(map_location, dict):
        return lambda storage, location: default(storage, map_location.get(location, location))
    if isinstance(map_location, (str, bytes)):
        where = map_location.decode() if isinstance(map_location, bytes) else map_location
        return lambda storage, location: default(storage, where)
    if isinstance(map_location, torch.device):
        return lambda storage, location: default(storage, str(map_location))
    if callable(map_location):
        def restore(storage, location):
            result = map_location(storage, location)
            return default(storage, location) if result is None else result
        return restore
    raise TypeError("nvmeio_torch.load: map_location must be None, a str, a torch.device, a "
                    f"dict or a callable, not {type(map_location).__name__}")


def _is_zip(head):
    return head[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def _probe(restore_location, location):
    """Where restore_location puts a storage saved at ``location``: it is called with an empty
    CPU storage, and the device of what it returns is the answer."""
    result = restore_location(_torch_zip.untyped_of(torch.empty(0, dtype=torch.uint8)), location)
    return getattr(result, "device", torch.device("cpu"))


def _places_on_gpu(map_location, restore_location, pickled):
    """True when some storage may be restored to a GPU: a str, device or dict map_location
    sends storages there, or the pickle names a CUDA location that it may keep (a callable is
    not asked here: it sees each storage once, and a callable that moves CPU-saved storages to
    a GPU moves them itself)."""
    if isinstance(map_location, (str, bytes, torch.device)):
        return _probe(restore_location, "cpu").type == "cuda"
    if isinstance(map_location, dict) and any("cuda" in str(v) for v in map_location.values()):
        return True
    return b"cuda" in pickled


def _load_through_rings(file, pickled, data_entries, data_prefix, span_ends, restore_location,
                        weights_only, verify_crc, handle):
    """load when storages go to GPUs: each storage is made where map_location puts it (a
    callable one is asked with an empty storage, once per storage) and its record is read
    straight into it through the staging ring of its device (``_staged``), the CPU's with the
    first; host memory stays at the rings'."""
    from . import _staged
    from ._files import read_spans, spans

    # The data records' local headers, for where each one's data starts.
    path = file.path
    headers = spans(file, [(e.header_offset, e.header_offset + _zip.LOCAL_HEADER_SIZE)
                           for e in data_entries.values()])
    read_spans(handle, [headers])

    def data_offset(e):
        return _torch_zip.data_start(e, headers, span_ends, path)

    items = []
    # The entries of the items read whole: their CRC-32s come with the reads. A storage that
    # takes less than its record (torch.save writes none) reads only its part, unchecked.
    checked = []

    def storage_of(e, nbytes, location):
        device = _probe(restore_location, location)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"{path}: map_location puts record {e.name!r} on {device}; "
                             "nvmeio_torch.load restores to the CPU and CUDA devices")
        flat = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes:
            items.append((file.fd, data_offset(e), flat, e.name))
            checked.append(e if nbytes == e.size else None)
        return _torch_zip.untyped_of(flat)

    persistent_load = _torch_zip.persistent_loader(path, data_entries, data_prefix, storage_of)
    result = _torch_zip.unpickle(pickled, path, weights_only, persistent_load)
    crcs = _staged.run_by_device("read", items, checksum=verify_crc)
    if verify_crc:
        for e, item, crc in zip(checked, items, crcs):
            if e is not None:
                _zip.check_crc(path, _zip.record_at(e, item[1]), e.crc, crc, _SKIP_CRC)
    _validate_sparse_tensors()
    return result


_SKIP_CRC = "verify_crc=False"


def _load_into_arena(file, pickled, data_entries, data_prefix, span_ends, restore_location,
                     weights_only, verify_crc, handle):
    """load when storages stay on the CPU: every data record's extent is read into one arena
    (a wave at a time when checked, each wave's CRC-32s computed while the next reads), and
    each storage views its record there (restore_location then places it)."""
    from ._files import cpus, read_in_waves, read_spans, spans

    path = file.path
    data = spans(file, [(e.header_offset, span_ends[id(e)]) for e in data_entries.values()])
    if verify_crc:
        with ThreadPoolExecutor(max_workers=cpus()) as executor:
            checks = _ChecksAsRead(path, data_entries.values(), data, span_ends, executor)
            read_in_waves(handle, data, checks.landed)
            checks.check()
    else:
        read_spans(handle, [data])

    def storage_of(e, nbytes, location):  # a storage of the record's bytes alone
        view = (_C.own_storage(data.arena, _record_at(e, data, span_ends, path), nbytes)
                if nbytes else torch.empty(0, dtype=torch.uint8))
        return restore_location(_torch_zip.untyped_of(view), location)

    persistent_load = _torch_zip.persistent_loader(path, data_entries, data_prefix, storage_of)
    result = _torch_zip.unpickle(pickled, path, weights_only, persistent_load)
    _validate_sparse_tensors()
    return result


def _validate_sparse_tensors():
    """torch.load's check of the sparse tensors just unpickled (where this torch has it)."""
    validate = getattr(torch._utils, "_validate_loaded_sparse_tensors", None)
    if validate is not None:
        validate()


class _ChecksAsRead:
    """The records' CRC-32s, computed on an executor's threads as the waves of the arena they
    are read into land (``read_in_waves``): a record is located once its local header has
    arrived, and each wave's part of its data is checksummed while the next wave reads."""

    def __init__(self, path, entries, read, span_ends, executor):
        self._path, self._read, self._span_ends = path, read, span_ends
        self._crcs = _zip.crc32_pieces(executor)
        self._waiting = collections.deque(sorted(entries, key=lambda e: e.header_offset))
        self._open = []  # located, data not all handed over: (entry, file offset, arena offset)
        self._located = []  # (entry, data's file offset, its CRC's index), in file order
        self._done = 0  # arena bytes [0, done) handed over

    def landed(self, end):
        """Arena bytes [0, end) have arrived."""
        read = self._read
        while self._waiting:
            e = self._waiting[0]
            header = read.offset_of(e.header_offset, e.header_offset + _zip.LOCAL_HEADER_SIZE)
            if header is not None and header + _zip.LOCAL_HEADER_SIZE > end:
                break  # not all of it here yet; a header not in the arena raises below
            start = _torch_zip.data_start(e, read, self._span_ends, self._path)
            self._waiting.popleft()
            self._located.append((e, start, self._crcs.add()))
            self._open.append((e, read.offset_of(start, start + e.size), len(self._located) - 1))
        still_open = []
        for e, at, n in self._open:
            lo, hi = max(at, self._done), min(at + e.size, end)
            if lo < hi:
                self._crcs.extend(self._located[n][2], read.arena[lo:hi].numpy())
            if at + e.size > end:
                still_open.append((e, at, n))
        self._open = still_open
        self._done = end

    def check(self):
        """ValueError for the first record, in file order, whose bytes are not the archive's."""
        for e, start, index in self._located:
            _zip.check_crc(self._path, _zip.record_at(e, start), e.crc,
                           self._crcs.result(index), _SKIP_CRC)


def _check_records(path, entries, read, span_ends):
    """The records' bytes, read into the arena of ``read``, against their CRC-32s."""
    records = []
    for e in entries:
        at = _record_at(e, read, span_ends, path)
        start = _torch_zip.data_start(e, read, span_ends, path)
        records.append((e, start, read.arena[at:at + e.size].numpy()))
    _zip.check_crcs(path, records, _SKIP_CRC)


def _record_at(e, read, span_ends, path):
    """Where e's data starts in the arena of ``read``, the spans its extent was read into."""
    data = _torch_zip.data_start(e, read, span_ends, path)
    return read.offset_of(data, data + e.size)  # inside e's extent, which was read whole


def _record_bytes(e, read, span_ends, path):
    """e's data, copied out of the arena of ``read``."""
    at = _record_at(e, read, span_ends, path)
    return read.arena[at:at + e.size].numpy().tobytes()


def _read_pickle(file, pickle_entry, byteorder, span_ends, handle, verify_crc):
    """The pickle's bytes, read (and checked) with the byte order's record into a small arena;
    ValueError when the file was saved with another byte order than this machine's."""
    from ._files import read_spans, spans

    path = file.path
    small_entries = [pickle_entry] + ([byteorder] if byteorder else [])
    small = spans(file, [(e.header_offset, span_ends[id(e)]) for e in small_entries])
    read_spans(handle, [small])
    if verify_crc:
        _check_records(path, small_entries, small, span_ends)
    if byteorder is not None:
        raw = _record_bytes(byteorder, small, span_ends, path)
        order = raw.decode("ascii", "replace")
        if order != sys.byteorder:
            raise ValueError(f"{path}: saved with {order}-endian data; this machine is "
                             f"{sys.byteorder}-endian")
    return _record_bytes(pickle_entry, small, span_ends, path)


def _load_legacy(file, head, map_location, weights_only):
    """load of a file that is no zip archive: a legacy torch file goes to torch.load (reading
    the file already open) when weights_only is False; anything else raises ValueError saying
    what the file is."""
    path = file.path
    if head[:2] == b"\x80\x02" or head[:1] == b"\x80":
        if not weights_only:  # said to torch too: from torch 2.6 its default is True
            trusted = ({"weights_only": False} if "weights_only" in
                       inspect.signature(torch.load).parameters else {})
            with os.fdopen(os.dup(file.fd), "rb") as f:
                return torch.load(f, map_location=map_location, **trusted)
        raise ValueError(
            f"{path}: a legacy (non-zip) torch checkpoint, written with "
            "_use_new_zipfile_serialization=False; nvmeio_torch.load reads the zip format "
            "only (weights_only=False hands legacy files to torch.load)")
    raise ValueError(f"{path}: not a torch checkpoint (neither a zip archive nor a "
                     "legacy torch file)")


def load(path, map_location=None, *, weights_only=True, mmap=None, verify_crc=True, handle=None):
    """Loads what ``torch.save`` (or ``save``) wrote to ``path``, as ``torch.load`` does.

    Reads any zip-format file torch.save writes (torch 1.6 and later), nvmeio's or torch's.
    Every data record is read through ``handle`` (default: ``make_handle()``, with no request
    pending) into one arena of 4 KiB-aligned memory; the loaded storages view it, so the bytes
    are in memory once. An arena of 32 MiB or more is brought into use by up to 8 helper threads
    while the reads go (``_files.populating``).
    Every record's bytes are checked against the CRC-32 the archive holds for it, on every
    CPU once read (torch.load checks none): a damaged file raises ValueError naming the record
    and its offset. ``verify_crc=False`` skips the check.

    The flags are keyword-only, as torch.load's are. ``mmap=True`` hands the file to
    ``torch.load(mmap=True)``, which maps it instead of reading it (nothing is checked then);
    ``mmap=False`` or None reads it.
    ``map_location``: as torch.load's (a str such as ``"cpu"``, a torch.device, a dict from
    saved location to location, or a callable ``(storage, location)``).
    ``weights_only=True`` (the default, safer than torch 1.13's): only tensors, containers
    (dict, OrderedDict, list, tuple, set), plain Python values, dtypes, sizes and devices are
    unpickled, and what ``torch.serialization.add_safe_globals`` admits; any other global
    raises ``pickle.UnpicklingError`` naming it. Pass ``weights_only=False`` only for files you
    trust (it runs whatever the pickle names).

    A legacy (non-zip) torch file, written with ``_use_new_zipfile_serialization=False``:
    ``ValueError`` saying so when weights_only is True; handed to ``torch.load`` with
    ``weights_only=False`` when it is False (torch 2.6 and later would refuse its objects).
    Raises OSError (errno, path) for I/O failures and ValueError naming the file for a
    malformed archive.
    """
    from ._files import handle_or_default, opened

    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"nvmeio_torch.load: path must be a file name, not {type(path).__name__}"
                        " (torch.load reads file objects)")
    path = os.fsdecode(os.fspath(path))
    if mmap:
        if "mmap" not in inspect.signature(torch.load).parameters:
            raise ValueError(f"nvmeio_torch.load({path!r}, mmap=True): torch "
                             f"{torch.__version__} cannot map a checkpoint (torch 2.1 can)")
        return torch.load(path, map_location=map_location, weights_only=weights_only, mmap=True)
    restore_location = _restore_location(map_location)
    # Opened once: the directory, the pickle and every storage are read through this
    # descriptor, so a file replaced meanwhile is loaded whole, the old one or the new one.
    with opened(path) as file:
        head = os.pread(file.fd, 4, 0)
        if not _is_zip(head):
            return _load_legacy(file, head, map_location, weights_only)
        pickle_entry, byteorder, data_entries, data_prefix, span_ends = _torch_zip.directory(
            file.fd, path, file.size)
        # The pickle's (and byte order's) extents into a small arena; then the storages: read
        # into one arena they view when they stay on the CPU, else through the GPUs' rings.
        handle = handle_or_default(handle)
        pickled = _read_pickle(file, pickle_entry, byteorder, span_ends, handle, verify_crc)
        on_gpu = _places_on_gpu(map_location, restore_location, pickled)
        load_storages = _load_through_rings if on_gpu else _load_into_arena
        loaded = load_storages(file, pickled, data_entries, data_prefix, span_ends,
                               restore_location, weights_only, verify_crc, handle)
        file.check_unchanged()  # not written in place while it loaded
        return loaded

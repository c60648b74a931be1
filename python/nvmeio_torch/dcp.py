"""torch.distributed.checkpoint (DCP) storage through nvmeio: ``FileSystemWriter`` and
``FileSystemReader``, named as torch's, so that a job changes one import::

    from nvmeio_torch.dcp import FileSystemWriter, FileSystemReader
    dcp.save(state_dict, storage_writer=FileSystemWriter("/nvme/ckpt"))      # torch >= 2
    dcp.load(state_dict, storage_reader=FileSystemReader("/nvme/ckpt"))
    # torch 1.13: torch.distributed._shard.checkpoint.save_state_dict / load_state_dict

The layout is torch's own, so either side reads the other's checkpoints: per-rank files
``__{rank}_{k}.distcp`` holding one record per item (a tensor as ``torch.save`` writes it, an
object's bytes as they are), and ``.metadata``, DCP's pickled ``Metadata`` whose
``storage_data`` maps each item to torch's ``_StorageInfo(relative_path, offset, length)``.
Where nvmeio differs, the format leaves room: each record starts at a multiple of 4096 bytes,
its tensor data too, and moves with O_DIRECT in one batch per file (many items in flight, one
queue kept full).

Commit: each rank flushes its files and the folder before its write returns; the coordinator
then writes ``.metadata`` atomically (temporary, fdatasync, rename, folder sync). A save into a
folder that holds a checkpoint writes files of new names (each rank picks ``k`` past every one
there as it plans, and creates each file exclusively), so the old ``.metadata`` keeps pointing
at the old, whole files until the rename; the old files are removed after it. A save killed at
any point leaves the old checkpoint or the new one. Saved without collectives (torch >= 2.6's
``use_collectives=False``) each rank commits alone: its files, then its own
``__{rank}.metadata``, atomically; there is no checkpoint-wide commit then.

Reads group a rank's items per file, sorted, in one batch: a tensor slice DCP asks for whose
bytes are contiguous in the record goes straight into its destination (contiguous, on the
CPU), anything else is read whole into a buffer and narrowed and copied as DCP asks. Tensors
on a GPU are copied to the CPU before a save and from it after a load (torch's writer does the
same).

torch 1.13 under Python 3.11 cannot import its DCP (``ValueError: mutable default <class
'...TensorProperties'>``, a dataclass default torch 2.0 fixed); importing this module imports it
with that one default made a ``default_factory``, as torch 2.0 has it (``_import_torch_dcp``).
"""

import dataclasses
import errno
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import os
import pickle
import re
import sys
import uuid
import zipfile
from pathlib import Path

import torch

from . import _dcp_staging, _torch_zip, _zip
from ._files import align_up, atomic_file, handle_or_default, sync_folder

__all__ = ["FileSystemWriter", "FileSystemReader"]

# ---------------------------------------------------------------------------------------------
# torch's DCP, on torch 1.13 and 2.x

_PATCHED_MODULE = "torch.distributed._shard.sharded_tensor.metadata"
_MUTABLE_DEFAULT = "field(default=TensorProperties())"
_FIXED_DEFAULT = "field(default_factory=TensorProperties)"


class _FixedDefaultLoader(importlib.machinery.SourceFileLoader):
    """Loads torch 1.13's sharded_tensor/metadata.py with the default torch 2.0 fixed."""

    def get_code(self, fullname):
        source = importlib.util.decode_source(self.get_data(self.path))
        return compile(source.replace(_MUTABLE_DEFAULT, _FIXED_DEFAULT), self.path, "exec",
                       dont_inherit=True)


class _FixedDefaultFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _PATCHED_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _FixedDefaultLoader(name, spec.origin)
        return spec


def _import_torch_dcp():
    """torch's DCP package: ``torch.distributed.checkpoint`` (torch >= 2.0) or
    ``torch.distributed._shard.checkpoint`` (1.13, imported through _FixedDefaultFinder where
    Python's dataclasses refuse its default)."""
    if not torch.distributed.is_available():
        raise ImportError("nvmeio_torch.dcp: this torch is built without torch.distributed")
    try:
        return importlib.import_module("torch.distributed.checkpoint")
    except ImportError:
        pass
    finder = None
    if sys.version_info >= (3, 11) and _PATCHED_MODULE not in sys.modules:
        finder = _FixedDefaultFinder()
        sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("torch.distributed._shard.checkpoint")
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)


_dcp = _import_torch_dcp()
_filesystem = importlib.import_module(_dcp.__name__ + ".filesystem")
_StorageInfo = _filesystem._StorageInfo  # pickled into .metadata: torch's reader needs its own
_planner = importlib.import_module(_dcp.__name__ + ".planner")
_storage = importlib.import_module(_dcp.__name__ + ".storage")
_metadata = importlib.import_module(_dcp.__name__ + ".metadata")

_STAGER_BASES = (_dcp_staging.AsyncStager,) if _dcp_staging.AsyncStager is not None else ()

_SUFFIX = ".distcp"
_DATA_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_METADATA = ".metadata"
_RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")  # a rank's, saved without collectives
# atomic_file's temporaries of .metadata and of __{rank}.metadata
_METADATA_TEMPORARY = re.compile(r"^\.(\.metadata|__\d+\.metadata)\.[0-9a-f]{12}\.tmp$")
_DCP_VERSION = getattr(_filesystem, "CURRENT_DCP_VERSION", None)  # the format torch writes
_ARCHIVE = "archive"  # the folder torch.save names records in when writing to a stream
_WEIGHTS_ONLY = "weights_only" in inspect.signature(torch.load).parameters
_BUFFERED = 256 << 20  # a load's buffered records (slices not read in place) held at once


@dataclasses.dataclass(frozen=True)
class _FilePlan:
    """What a rank's plan carries to its write: its file names' prefix, ``__{rank}_``. The
    numbers after it are the rank's own at each save (``FileSystemWriter._new_file``), so that a
    plan DCP caches and gives back later names no file of an earlier save."""
    prefix: str


def _done(value):
    future = torch.futures.Future()
    future.set_result(value)
    return future


def _checkpoint_path(checkpoint_id):
    if not isinstance(checkpoint_id, (str, os.PathLike)):
        raise TypeError(f"nvmeio_torch.dcp: a checkpoint is a folder name (str or os.PathLike), "
                        f"not {type(checkpoint_id).__name__}")
    return Path(os.fspath(checkpoint_id))


def _without_own_handle(storage):
    """A writer's or reader's state to pickle (torch's async_save may send it to another
    process): the handle it made for itself is left out, to be made afresh there; a caller's
    handle is kept, and cannot be pickled."""
    state = dict(storage.__dict__)
    if state.get("_own_handle"):
        state["_handle"] = None
    return state


def _is_folder_name(checkpoint_id):
    return isinstance(checkpoint_id, (str, os.PathLike)) and "://" not in os.fspath(checkpoint_id)


# ---------------------------------------------------------------------------------------------
# Writing


def _metadata_temporary_of(entry):
    """The metadata file whose temporary ``entry`` is (``atomic_file``'s name), or None."""
    found = _METADATA_TEMPORARY.match(entry)
    return found.group(1) if found else None


def _new_id():
    return str(uuid.uuid4())


def _writer_extensions(name, extensions):
    """torch's stream transforms to write through (``_extensions``), checked."""
    extensions = list(extensions or ())
    for extension in extensions:
        if not callable(getattr(extension, "transform_to", None)) or not callable(
                getattr(extension, "get_descriptor", None)):
            raise ValueError(f"{name}: _extensions takes torch's StreamTransformExtension "
                             f"instances, not {type(extension).__name__}")
    return extensions


def _serialization_format(name, chosen):
    """torch's SerializationFormat (>= 2.7): TORCH_SAVE, the one nvmeio writes."""
    if chosen is None or getattr(chosen, "value", chosen) == "torch_save":
        return chosen
    raise ValueError(f"{name}: serialization_format={chosen!r} is not supported; nvmeio writes "
                     "torch.save records (SerializationFormat.TORCH_SAVE)")


class _Kept(io.RawIOBase):
    """The bytes a chain of stream transforms writes, kept when the chain is closed (a
    transform's close cascades to what it wraps)."""

    def __init__(self):
        super().__init__()
        self.kept = io.BytesIO()

    def writable(self):
        return True

    def write(self, data):
        return self.kept.write(data)

    def close(self):  # the bytes stay readable in ``kept``
        super().close()


def _transformed(extensions, item, data):
    """An item's record passed through torch's stream transforms as torch's writer passes it:
    (the record's bytes, the transforms' descriptors for its ``_StorageInfo``)."""
    kept = _Kept()
    stream = kept
    for extension in extensions:
        stream = extension.transform_to(stream)
    if item.type == _planner.WriteItemType.BYTE_IO:
        stream.write(data.getbuffer() if isinstance(data, io.BytesIO) else bytes(data))
    else:
        torch.save(_trimmed(data), stream)
    stream.close()
    return kept.kept.getvalue(), [extension.get_descriptor() for extension in reversed(extensions)]


def _trimmed(tensor):
    """What a tensor item saves, as torch's writer has it: detached, on the CPU (a GPU tensor
    is copied), cloned when its storage holds more than its elements."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if _torch_zip.untyped_of(tensor).nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


class FileSystemWriter(_storage.StorageWriter, *_STAGER_BASES):
    """DCP's ``StorageWriter`` on nvmeio, in torch's layout (module docstring), taking the
    arguments of torch's ``FileSystemWriter`` in its order.

    ``path``: the checkpoint's folder (made if missing). ``single_file_per_rank``: one file per
    rank (the default, as torch >= 2.0's), else one per item. ``sync_files``: flush each file
    and the folder before the rank's write returns (as torch's, default True); without it a
    power loss may leave ``.metadata`` pointing at data not on the disk. ``overwrite``: as torch
    >= 2.4's, default True; False refuses a folder that holds a checkpoint
    (``FileExistsError`` naming its metadata file). ``per_thread_copy_ahead``: as torch's, about
    the bytes of copies (GPU tensors copied to the CPU, views cloned out of larger storages)
    held before they are written; tensors that need no copy are written in one batch whatever
    their size. ``cache_staged_state_dict``: ``dcp.async_save`` stages into buffers kept for the
    next save (``_dcp_staging``). ``_extensions``: torch's stream transforms (e.g.
    ``ZStandard()``), applied to each item as torch's writer applies them; such records are
    built in memory and lose the 4096-byte alignment. ``serialization_format``: torch's
    ``SerializationFormat.TORCH_SAVE`` only (SAFETENSORS is refused with ValueError).
    ``thread_count`` is taken for torch's callers and not used: nvmeio moves a rank's bytes with
    its handle's workers. ``handle``: the ``aio_handle`` that moves them (default:
    ``make_handle()``, one per writer). Any other keyword is refused with ValueError naming it.
    """

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False,
                 overwrite=True, _extensions=None, serialization_format=None, *, handle=None,
                 **options):
        super().__init__()
        name = "nvmeio_torch.dcp.FileSystemWriter"
        if options:
            raise ValueError(f"{name}: no option {sorted(options)[0]!r} (it takes torch "
                             "FileSystemWriter's arguments and handle=)")
        self.path = _checkpoint_path(path)
        self.single_file_per_rank = bool(single_file_per_rank)
        self.sync_files = bool(sync_files)
        if not isinstance(thread_count, int) or thread_count < 1:
            raise ValueError(f"{name}: thread_count must be a positive int, not "
                             f"{thread_count!r}")
        self.thread_count = thread_count
        if not isinstance(per_thread_copy_ahead, int) or per_thread_copy_ahead < 0:
            raise ValueError(f"{name}: per_thread_copy_ahead must be a number of bytes (an int "
                             f">= 0), not {per_thread_copy_ahead!r}")
        self.per_thread_copy_ahead = per_thread_copy_ahead
        if cache_staged_state_dict and _dcp_staging.AsyncStager is None:
            raise ValueError(f"{name}: cache_staged_state_dict needs torch's AsyncStager "
                             f"(torch >= 2.3; this is {torch.__version__})")
        self.cache_staged_state_dict = bool(cache_staged_state_dict)
        self._stage = _dcp_staging.state_dict_stage(cache_staged_state_dict)
        self.overwrite = bool(overwrite)
        self.extensions = _writer_extensions(name, _extensions)
        self.serialization_format = _serialization_format(name, serialization_format)
        self._handle = handle  # None: made at the first use, and left out of pickles
        self._own_handle = handle is None
        self.is_coordinator = False
        self.rank = None  # torch >= 2.6 names it at each save (set_up_storage_writer)
        self.use_collectives = True
        self.save_id = _new_id()
        self._next = 0  # the number after this rank's prefix its next file tries
        self._stale = set()  # what finish removes after the commit

    # torch >= 2: the checkpoint may be named at each save.
    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = _checkpoint_path(checkpoint_id)
        self.save_id = _new_id()

    @property
    def checkpoint_id(self):
        """The folder the next save writes (torch's name for it)."""
        return self.path

    def __getstate__(self):
        return _without_own_handle(self)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _is_folder_name(checkpoint_id)

    def storage_meta(self):
        meta = getattr(_metadata, "StorageMeta", None)
        if meta is None:
            return None
        fields = {f.name for f in dataclasses.fields(meta)}
        return meta(checkpoint_id=self.path,
                    **({"save_id": self.save_id} if "save_id" in fields else {}))

    def set_up_storage_writer(self, is_coordinator, *args, rank=None, use_collectives=True,
                              **kwargs):
        """torch passes ``rank`` and ``use_collectives`` (>= 2.6). Without collectives each rank
        plans, writes and commits alone: files ``__{rank}_{k}.distcp`` and its own metadata,
        ``__{rank}.metadata`` (module docstring)."""
        self.is_coordinator = is_coordinator
        self.rank = rank
        self.use_collectives = bool(use_collectives)

    def init(self, is_coordinator):  # torch 1.13's name for set_up_storage_writer
        self.set_up_storage_writer(is_coordinator)

    def _alone(self):
        """Whether this rank saves without collectives: its own files, its own metadata."""
        return not self.use_collectives and self.rank is not None

    def _metadata_name(self):
        return f"__{self.rank}{_METADATA}" if self._alone() else _METADATA

    # -- stager (torch >= 2.3's AsyncStager): dcp.async_save calls these
    _synchronize_after_execute = False

    def stage(self, state_dict):
        """A copy of ``state_dict`` on the CPU for ``dcp.async_save`` (``_dcp_staging``)."""
        return self._stage(state_dict)

    def synchronize_staging(self):
        """Staging is done when ``stage`` returns."""

    def close(self):
        """Drops the cached staging buffers."""
        self._stage.close()

    def prepare_local_plan(self, plan):
        """On every rank (a folder per node too): makes the folder, and sets the number this
        rank's file names start from past every data file there. Without collectives, the plan
        gets the rank's prefix here (no coordinator gives one)."""
        self.path.mkdir(parents=True, exist_ok=True)
        used = [int(m.group(2)) for m in map(_DATA_FILE.match, os.listdir(self.path)) if m]
        self._next = max(used) + 1 if used else 0
        if self._alone():
            plan = dataclasses.replace(plan, storage_data=_FilePlan(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans):
        """On the coordinator (or on each rank without collectives, with its own plan only):
        refuses an existing checkpoint without ``overwrite``, gives each plan its rank's file
        prefix, and notes what ``finish`` removes once the new checkpoint is committed: the
        folder's data files, metadata files and temporaries (without collectives: this rank's
        files, and the folder's ``.metadata``, which would hide the ranks' own). Files that
        appear later (a save still running beside this one) are left."""
        self.path.mkdir(parents=True, exist_ok=True)
        listing = os.listdir(self.path)
        if not self.overwrite:
            for held in (_METADATA, self._metadata_name()):
                if held in listing:
                    raise FileExistsError(errno.EEXIST, "nvmeio_torch.dcp.FileSystemWriter: the "
                                          "folder holds a checkpoint and overwrite=False",
                                          str(self.path / held))
        if self._alone():
            prefix, mine = f"__{self.rank}_", f"__{self.rank}{_METADATA}"
            self._stale = {e for e in listing if (e.startswith(prefix) and _DATA_FILE.match(e))
                           or _metadata_temporary_of(e) == mine or e == _METADATA}
        else:
            self._stale = {e for e in listing if _DATA_FILE.match(e) or _RANK_METADATA.match(e)
                           or _metadata_temporary_of(e) is not None}
        return [plan if isinstance(plan.storage_data, _FilePlan) else
                dataclasses.replace(plan, storage_data=_FilePlan(f"__{rank}_"))
                for rank, plan in enumerate(plans)]

    def write_data(self, plan, planner):
        # Before any file is made: a tensor on a device with no bytes to read (meta), and a
        # sparse one (no storage of its values alone: torch's writer fails on it midway) are
        # refused, naming them, as the other savers refuse them. Quantized tensors are saved
        # whole, scale and zero point with them, as torch.save saves them.
        tensor_items = [item for item in plan.items
                        if item.type != _planner.WriteItemType.BYTE_IO]
        tensors = [planner.resolve_data(item) for item in tensor_items]
        for item, tensor in zip(tensor_items, tensors):
            if tensor.device.type not in ("cpu", "cuda"):
                raise ValueError(f"{item.index.fqn}: on {tensor.device}; nvmeio_torch saves "
                                 "tensors on the CPU and CUDA devices")
            if tensor.layout != torch.strided or getattr(tensor, "is_nested", False):
                kind = "nested" if getattr(tensor, "is_nested", False) else str(tensor.layout)
                raise ValueError(f"{item.index.fqn}: a {kind} tensor on {tensor.device}; "
                                 "nvmeio_torch's DCP writer saves dense tensors")
        try:
            return self._write_plan(plan, planner)
        finally:  # the staging cache, if these are its tensors, may be refilled from now on
            self._stage.written(tensors)

    def _write_plan(self, plan, planner):
        """The rank's files: one, or one per item; flushed, and the folder too, when
        sync_files."""
        # A plan DCP cached (DefaultSavePlanner(enable_plan_caching=True)) comes back with the
        # prefix it was given then; the numbers are this save's own.
        prefix = plan.storage_data.prefix
        if self.single_file_per_rank:
            groups = [plan.items]
        else:
            groups = [[item] for item in plan.items]
        self._handle = handle_or_default(self._handle)
        results = []
        for items in groups:
            results += self._write_file(prefix, items, planner)
        if self.sync_files:
            sync_folder(self.path)
        return _done(results)

    def _new_file(self, prefix):
        """Makes a file of a name no other file has (``{prefix}{k}.distcp``, ``k`` from
        ``_next`` on): the old checkpoint's files stay whole until the commit."""
        while True:
            name = f"{prefix}{self._next}{_SUFFIX}"
            self._next += 1
            try:
                os.close(os.open(self.path / name,
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
                return name
            except FileExistsError:
                continue

    def _write_file(self, prefix, items, planner):
        """Writes `items` to a new file, each record at the next multiple of 4096: the
        tensors' data and the objects' bytes in one batch, the pickles, headers and central
        directories in one more; in several such pairs where the tensors copied to be saved
        (GPU tensors, views of larger storages) pass ``per_thread_copy_ahead`` bytes, so that
        the copies held at once stay near it. Flushed when sync_files."""
        # Made here, then moved by the handle, which opens it with O_DIRECT; this process holds
        # no other descriptor on it while the bytes move.
        name = self._new_file(prefix)
        path = self.path / name
        try:
            results = self._write_records(str(path), name, items, planner)
            if self.sync_files:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        return results

    def _write_records(self, path, name, items, planner):
        placed, raw, results = [], [], []
        end = copied = 0
        for item in items:
            data = planner.resolve_data(item)
            start = align_up(end)
            descriptors = None
            if self.extensions:
                data, descriptors = _transformed(self.extensions, item, data)
                raw.append((start, data))
                length = len(data)
            elif item.type == _planner.WriteItemType.BYTE_IO:
                data = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                raw.append((start, data))
                length = len(data)
            else:
                tensor = _trimmed(data)
                if tensor.data_ptr() != data.data_ptr() or tensor.device != data.device:
                    copied += tensor.numel() * tensor.element_size()
                archive = _torch_zip.archive(tensor, _ARCHIVE)
                placed.append((archive, start))
                length = archive.length
            info = _StorageInfo(name, start, length)
            if descriptors:
                info.transform_descriptors = descriptors
            results.append(_storage.WriteResult(index=item.index, size_in_bytes=length,
                                                storage_data=info))
            end = start + length
            if copied >= self.per_thread_copy_ahead:
                _torch_zip.write_archives(placed, path, self._handle, raw)
                placed, raw, copied = [], [], 0
        if placed or raw:
            _torch_zip.write_archives(placed, path, self._handle, raw)
        return results

    def finish(self, metadata, results):
        """On the coordinator (on every rank without collectives), once the files it names are
        durable: writes the metadata file atomically, then removes the files noted at planning
        that it does not name (an older checkpoint's, a failed or killed save's)."""
        storage = {}
        for rank_results in results:
            storage.update({r.index: r.storage_data for r in rank_results})
        metadata.storage_data = storage
        if hasattr(metadata, "version"):
            metadata.version = _DCP_VERSION
        if hasattr(metadata, "storage_meta"):
            metadata.storage_meta = self.storage_meta()
        name = self._metadata_name()
        with atomic_file(self.path / name, durable=True) as temporary:
            with open(temporary, "wb") as f:
                pickle.dump(metadata, f)
        named = {info.relative_path for info in storage.values()} | {name}
        # .metadata first: without collectives it names the other ranks' old files too.
        for entry in sorted(self._stale - named, key=lambda e: e != _METADATA):
            try:
                os.unlink(self.path / entry)
            except FileNotFoundError:
                pass
        self._stale = set()


# ---------------------------------------------------------------------------------------------
# Reading


def _narrowed(tensor, offsets, lengths):
    for dim, (start, length) in enumerate(zip(offsets, lengths)):
        tensor = tensor.narrow(dim, start, length)
    return tensor


def _crc32(tensor):
    return _zip.crc32_of(tensor.numpy()) if tensor.numel() else 0


def _check_crc(path, info, record, expected, got):
    """ValueError naming the file, the zip record and the item's offset where the CRC-32 of
    the bytes read is not the one the archive's directory gives."""
    _zip.check_crc(path, f"record {record!r} of the item at offset {info.offset}", expected,
                   got, "FileSystemReader(verify_crc=False)")


def _check_archive_crcs(path, info, data):
    """The CRC-32 of each stored record of a torch.save archive held in ``data`` (an item of
    type BYTE_IO, or a transformed record once restored): torch.load does not check them.
    Bytes that are no zip archive are left to the planner as they are."""
    try:
        members = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return
    view = memoryview(data)
    for member in members:
        header = member.header_offset
        if (member.compress_type != zipfile.ZIP_STORED
                or header + _zip.LOCAL_HEADER_SIZE > len(view)):
            continue
        start = _zip.local_data_offset(view[header:header + _zip.LOCAL_HEADER_SIZE], header,
                                       path, member.filename)
        _check_crc(path, info, member.filename, member.CRC,
                   _zip.crc32_of(view[start:start + member.file_size]))


class _Record:
    """One tensor record of a data file: the tensor it holds, built over a buffer not yet read
    (``buffer``, the storage's bytes, read only where a slice cannot go straight), where that
    storage's bytes lie in the file (``data_offset``), and its CRC-32 and size as the archive's
    directory gives them. A record that is not a torch.save archive of one tensor, or whose
    parts overlap, raises ValueError naming the file and the record's offset."""

    def __init__(self, fd, path, info, verify_crc):
        base = info.offset
        where = f"{path} (the record of {info.length} bytes at offset {base})"
        pickle_entry, _, data_entries, _, span_ends = _torch_zip.directory(
            fd, where, info.length, base)
        self.storages = []

        def data_offset(e):  # relative to the record, checked against the next part's start
            header = _zip._pread_exact(fd, _zip.LOCAL_HEADER_SIZE, base + e.header_offset, where)
            start = _zip.local_data_offset(header, e.header_offset, where, e.name)
            if start + e.size > span_ends[id(e)]:
                raise ValueError(f"{where}: record {e.name!r} (data at {start}, {e.size} bytes) "
                                 "overlaps the next record or the central directory")
            return start

        def storage_of(e, nbytes, location):
            buffer = torch.empty(nbytes, dtype=torch.uint8)
            self.storages.append((buffer, base + data_offset(e), e))
            return _torch_zip.untyped_of(buffer)

        pickle_at = base + data_offset(pickle_entry)
        pickled = _zip._pread_exact(fd, pickle_entry.size, pickle_at, where)
        if verify_crc:  # its offset, size and stride: a damaged one would place the data amiss
            _check_crc(path, info, pickle_entry.name, pickle_entry.crc, _zip.crc32_of(pickled))
        persistent_load = _torch_zip.persistent_loader(where, data_entries, "data/", storage_of)
        # weights_only, admitting what torch.serialization.add_safe_globals admits, as
        # torch.load(weights_only=True) does in torch's reader.
        tensor = _torch_zip.unpickle(pickled, where, True, persistent_load)
        if not isinstance(tensor, torch.Tensor) or len(self.storages) != 1:
            raise ValueError(f"{where}: not a record of one tensor")
        self.tensor = tensor
        self.buffer, self.data_offset, entry = self.storages[0]
        self.name, self.crc, self.size = entry.name, entry.crc, entry.size
        self.needed = False

    def whole(self, nbytes, start):
        """Whether ``nbytes`` bytes from ``start`` of the storage are all its record holds:
        then their CRC-32 is the record's."""
        return start == 0 and nbytes == self.size


_TORCH_1_13_DCP = "torch.distributed._shard.checkpoint"


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles ``.metadata``; a checkpoint saved on torch 1.13 names DCP's classes in
    ``torch.distributed._shard.checkpoint``, which torch 2 keeps only as an alias whose
    submodules would be second copies of the classes its planner checks for: those names are
    read as torch 2's own."""

    def find_class(self, module, name):
        if _dcp.__name__ != _TORCH_1_13_DCP and (module == _TORCH_1_13_DCP or
                                                 module.startswith(_TORCH_1_13_DCP + ".")):
            module = _dcp.__name__ + module[len(_TORCH_1_13_DCP):]
        return super().find_class(module, name)


class FileSystemReader(_storage.StorageReader):
    """DCP's ``StorageReader`` on nvmeio: reads checkpoints in torch's layout, written by
    nvmeio's writer or torch's (module docstring), taking the arguments of torch's
    ``FileSystemReader``. ``path``: the checkpoint's folder. ``_extension_registry``: torch's
    ``ExtensionRegistry`` of the stream transforms records may name (default: torch's, which
    knows ``stream.zstd``, readable where the ``zstandard`` or ``pyzstd`` package is installed).
    ``verify_crc``: check each record's CRC-32 against its archive's directory where the load
    reads all of it (default True; a slice of a record is not checked). ``handle``: the
    ``aio_handle`` that moves the bytes (default: ``make_handle()``). Any other keyword is
    refused with ValueError naming it."""

    def __init__(self, path, _extension_registry=None, *, verify_crc=True, handle=None,
                 **options):
        super().__init__()
        if options:
            raise ValueError(f"nvmeio_torch.dcp.FileSystemReader: no option "
                             f"{sorted(options)[0]!r} (it takes torch FileSystemReader's "
                             "arguments, verify_crc= and handle=)")
        self.path = _checkpoint_path(path)
        self.storage_data = {}
        if _extension_registry is not None and not callable(
                getattr(_extension_registry, "from_descriptor_list", None)):
            raise ValueError(f"nvmeio_torch.dcp.FileSystemReader: _extension_registry takes "
                             f"torch's ExtensionRegistry, not "
                             f"{type(_extension_registry).__name__}")
        self._extension_registry = _extension_registry
        self.verify_crc = bool(verify_crc)
        self.rank = None
        self.use_collectives = True
        self.load_id = _new_id()
        self._handle = handle  # None: made at the first use, and left out of pickles
        self._own_handle = handle is None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = _checkpoint_path(checkpoint_id)
        self.storage_data = {}
        self.load_id = _new_id()

    @property
    def checkpoint_id(self):
        """The folder the next load reads (torch's name for it)."""
        return self.path

    def __getstate__(self):
        return _without_own_handle(self)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _is_folder_name(checkpoint_id)

    def _metadata_path(self):
        return self.path / (_METADATA if self.rank is None else f"__{self.rank}{_METADATA}")

    def read_metadata(self, *args, rank=None, **kwargs):
        """The checkpoint's ``.metadata``; with ``rank`` (torch >= 2.6 asks so where that is
        missing), the rank's own ``__{rank}.metadata`` of a save without collectives."""
        from ._files import open_regular

        path = self.path / (_METADATA if rank is None else f"__{rank}{_METADATA}")
        with open(open_regular(path), "rb") as f:  # a FIFO is refused, not waited on
            try:
                metadata = _MetadataUnpickler(f).load()
            except (pickle.UnpicklingError, EOFError, AttributeError, ImportError,
                    IndexError, TypeError, ValueError) as error:
                raise ValueError(f"{path}: not a checkpoint's metadata ({error!r})") from error
        if not isinstance(metadata, _metadata.Metadata):
            raise ValueError(f"{path}: holds a {type(metadata).__name__}, not DCP's Metadata")
        meta = getattr(_metadata, "StorageMeta", None)
        if meta is not None and "load_id" in {f.name for f in dataclasses.fields(meta)}:
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = meta()
            metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(self, metadata, is_coordinator, *args, rank=None,
                              use_collectives=True, **kwargs):
        self.storage_data = metadata.storage_data
        self.use_collectives = bool(use_collectives)
        self.rank = None if use_collectives else rank
        if not isinstance(self.storage_data, dict):
            raise ValueError(f"{self._metadata_path()}: holds no storage data (not written by a "
                             "file system writer)")

    def init(self, metadata, is_coordinator):  # torch 1.13's name for set_up_storage_reader
        self.set_up_storage_reader(metadata, is_coordinator)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        per_file = {}
        for item in plan.items:
            info = self.storage_data.get(item.storage_index)
            if info is None:
                raise ValueError(f"{self._metadata_path()}: no storage for {item.storage_index}")
            per_file.setdefault(info.relative_path, []).append((info, item))
        self._handle = handle_or_default(self._handle)
        for name, items in per_file.items():
            self._read_file(str(self.path / name), sorted(items, key=lambda x: x[0].offset),
                            planner)
        return _done(None)

    def _transforms(self, path, info, item):
        """The stream transforms ``info`` names, from the registry, or ValueError naming the
        record, its offset and the transform that cannot be read here."""
        descriptors = getattr(info, "transform_descriptors", None) or ()
        if not descriptors:
            return ()
        registry = self._extension_registry
        if registry is None:
            extension = importlib.import_module(_dcp.__name__ + "._extension")
            registry = self._extension_registry = extension.ExtensionRegistry()
        try:
            return registry.from_descriptor_list(descriptors)
        except Exception as error:  # the registry's and the extensions' own (ValueError)
            raise ValueError(f"{path}: {item.storage_index.fqn}, the record at offset "
                             f"{info.offset} ({info.length} bytes), is written through "
                             f"{list(descriptors)}, which cannot be read here: {error}") from error

    def _restored(self, path, info, transforms, raw):
        """A transformed record's bytes as they were before the transforms."""
        stream = io.BytesIO(raw)
        for extension in transforms:
            stream = extension.transform_from(stream)
        data = stream.read()
        if self.verify_crc:
            _check_archive_crcs(path, info, data)
        return data

    def _read_file(self, path, items, planner):
        """The items of one file in batches of reads, each followed by the copies DCP asks
        for: one batch, unless the records read into buffers (those not going straight into
        their destinations) pass _BUFFERED bytes, so that the buffers held at once stay near
        it. The file is opened once: its records and every byte read come through that
        descriptor."""
        from ._files import opened
        from ._staged import _bytes_view

        reads, after, records = [], [], {}
        buffered = 0

        def flush():
            if reads:
                self._handle.sync_pread_batch([t for t, _ in reads], fd, [o for _, o in reads])
            for step in after:
                step()
            reads.clear()
            after.clear()
            records.clear()

        with opened(path) as file:
            fd = file.fd
            for info, item in items:
                if buffered >= _BUFFERED:
                    flush()
                    buffered = 0
                transforms = self._transforms(path, info, item)
                if transforms or item.type == _planner.LoadItemType.BYTE_IO:
                    buffer = torch.empty(info.length, dtype=torch.uint8)
                    reads.append((buffer, info.offset))
                    buffered += info.length
                    after.append(lambda info=info, item=item, transforms=transforms,
                                 buffer=buffer: self._load_whole(path, info, item, transforms,
                                                                 buffer, planner))
                    continue
                record = records.get((info.offset, info.length))
                if record is None:
                    record = records[(info.offset, info.length)] = _Record(fd, path, info,
                                                                           self.verify_crc)
                source = _narrowed(record.tensor, item.storage_offsets, item.lengths)
                target = planner.resolve_tensor(item).detach()
                if target.size() != source.size():
                    raise ValueError(f"{path}: {item.storage_index.fqn} at offset {info.offset}: "
                                     f"DCP asks for {tuple(target.size())}, the record holds "
                                     f"{tuple(source.size())}")
                if (target.device.type == "cpu" and target.dtype == source.dtype
                        and target.is_contiguous() and source.is_contiguous()):
                    nbytes = source.numel() * source.element_size()
                    start = source.storage_offset() * source.element_size()
                    if nbytes:
                        reads.append((_bytes_view(target), record.data_offset + start))
                    check = self.verify_crc and record.whole(nbytes, start)

                    def commit(item=item, target=target, record=record, check=check,
                               info=info):
                        if check:
                            _check_crc(path, info, record.name, record.crc,
                                       _crc32(_bytes_view(target)))
                        planner.commit_tensor(item, target)
                    after.append(commit)
                    continue
                if not record.needed and record.buffer.numel():
                    record.needed = True
                    reads.append((record.buffer, record.data_offset))
                    buffered += record.buffer.numel()
                    if self.verify_crc and record.whole(record.buffer.numel(), 0):
                        after.append(lambda record=record, info=info: _check_crc(
                            path, info, record.name, record.crc, _crc32(record.buffer)))

                def copy(item=item, target=target, source=source):
                    target.copy_(source)
                    planner.commit_tensor(item, target)
                after.append(copy)
            flush()

    def _load_whole(self, path, info, item, transforms, buffer, planner):
        """An item read whole into ``buffer``: the bytes of a BYTE_IO item, or a transformed
        record (restored, then loaded as torch's reader loads it)."""
        data = buffer.numpy().tobytes()
        if transforms:
            data = self._restored(path, info, transforms, data)
        elif self.verify_crc:
            _check_archive_crcs(path, info, data)
        if item.type == _planner.LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(data))
            return
        tensor = torch.load(io.BytesIO(data), map_location="cpu",
                            **({"weights_only": True} if _WEIGHTS_ONLY else {}))
        source = _narrowed(tensor, item.storage_offsets, item.lengths)
        target = planner.resolve_tensor(item).detach()
        if target.size() != source.size():
            raise ValueError(f"{path}: {item.storage_index.fqn} at offset {info.offset}: DCP "
                             f"asks for {tuple(target.size())}, the record holds "
                             f"{tuple(source.size())}")
        target.copy_(source)
        planner.commit_tensor(item, target)

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
folder that holds a checkpoint writes files of new names (``k`` past every one there), so the
old ``.metadata`` keeps pointing at the old, whole files until the rename; the old files are
removed after it. A save killed at any point leaves the old checkpoint or the new one.

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
import io
import os
import pickle
import re
import sys
from pathlib import Path

import torch

from . import _torch_zip, _zip
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

_SUFFIX = ".distcp"
_DATA_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_METADATA = ".metadata"
_METADATA_TEMPORARY = re.compile(r"^\.\.metadata\.[0-9a-f]{12}\.tmp$")  # atomic_file's
_ARCHIVE = "archive"  # the folder torch.save names records in when writing to a stream
_BUFFERED = 256 << 20  # a load's buffered records (slices not read in place) held at once


@dataclasses.dataclass(frozen=True)
class _FilePlan:
    """What the coordinator gives one rank: its file names' prefix, and the first ``k``."""
    prefix: str
    first: int


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


def _trimmed(tensor):
    """What a tensor item saves, as torch's writer has it: detached, on the CPU (a GPU tensor
    is copied), cloned when its storage holds more than its elements."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if _torch_zip.untyped_of(tensor).nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


class FileSystemWriter(_storage.StorageWriter):
    """DCP's ``StorageWriter`` on nvmeio, in torch's layout (module docstring).

    ``path``: the checkpoint's folder (made if missing). ``single_file_per_rank``: one file per
    rank (the default, as torch >= 2.0's), else one per item. ``sync_files``: flush each file
    and the folder before the rank's write returns (as torch's, default True); without it a
    power loss may leave ``.metadata`` pointing at data not on the disk. ``overwrite``: as torch
    >= 2.4's, default True; False refuses a folder that holds a ``.metadata``
    (``FileExistsError``). ``per_thread_copy_ahead``: as torch's, about the bytes of copies
    (GPU tensors copied to the CPU, views cloned out of larger storages) held before they are
    written; tensors that need no copy are written in one batch whatever their size.
    ``thread_count`` and ``cache_staged_state_dict`` are torch's and taken for its callers, not
    used: nvmeio moves a rank's bytes with its handle's workers, and stages nothing itself.
    ``handle``: the ``aio_handle`` that moves them (default: ``make_handle()``, one per
    writer).
    """

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False,
                 overwrite=True, *, handle=None):
        super().__init__()
        self.path = _checkpoint_path(path)
        self.single_file_per_rank = bool(single_file_per_rank)
        self.sync_files = bool(sync_files)
        if not isinstance(thread_count, int) or thread_count < 1:
            raise ValueError(f"nvmeio_torch.dcp.FileSystemWriter: thread_count must be a "
                             f"positive int, not {thread_count!r}")
        self.thread_count = thread_count
        if not isinstance(per_thread_copy_ahead, int) or per_thread_copy_ahead < 0:
            raise ValueError(f"nvmeio_torch.dcp.FileSystemWriter: per_thread_copy_ahead must be "
                             f"a number of bytes (an int >= 0), not {per_thread_copy_ahead!r}")
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.overwrite = bool(overwrite)
        self._handle = handle  # None: made at the first use, and left out of pickles
        self._own_handle = handle is None
        self.is_coordinator = False
        self._stale = set()  # the coordinator's: what finish removes after the commit

    # torch >= 2: the checkpoint may be named at each save.
    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = _checkpoint_path(checkpoint_id)

    def __getstate__(self):
        return _without_own_handle(self)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _is_folder_name(checkpoint_id)

    def storage_meta(self):
        meta = getattr(_metadata, "StorageMeta", None)
        return meta(checkpoint_id=self.path) if meta is not None else None

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator

    def init(self, is_coordinator):  # torch 1.13's name for set_up_storage_writer
        self.set_up_storage_writer(is_coordinator)

    def prepare_local_plan(self, plan):
        self.path.mkdir(parents=True, exist_ok=True)  # on every rank: a folder per node too
        return plan

    def prepare_global_plan(self, plans):
        """On the coordinator: refuses an existing checkpoint without ``overwrite``, names each
        rank's files past every data file the folder holds, and notes those files (and any
        temporary a killed save left) for ``finish`` to remove once the new checkpoint is
        committed. Files that appear later (a save still running beside this one) are left."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.overwrite and (self.path / _METADATA).exists():
            raise FileExistsError(errno.EEXIST, "nvmeio_torch.dcp.FileSystemWriter: the folder "
                                  "holds a checkpoint and overwrite=False",
                                  str(self.path / _METADATA))
        listing = os.listdir(self.path)
        self._stale = {e for e in listing if _DATA_FILE.match(e) or _METADATA_TEMPORARY.match(e)}
        used = [int(m.group(2)) for m in map(_DATA_FILE.match, listing) if m]
        first = max(used) + 1 if used else 0
        return [dataclasses.replace(plan, storage_data=_FilePlan(f"__{rank}_", first))
                for rank, plan in enumerate(plans)]

    def write_data(self, plan, planner):
        # Before any file is made: a tensor on a device with no bytes to read (meta) is refused,
        # naming it, as the other savers refuse it.
        for item in plan.items:
            if item.type != _planner.WriteItemType.BYTE_IO:
                device = planner.resolve_data(item).device
                if device.type not in ("cpu", "cuda"):
                    raise ValueError(f"{item.index.fqn}: on {device}; nvmeio_torch saves tensors "
                                     "on the CPU and CUDA devices")
        files = plan.storage_data
        if self.single_file_per_rank:
            groups = [plan.items]
        else:
            groups = [[item] for item in plan.items]
        self._handle = handle_or_default(self._handle)
        results = []
        for k, items in enumerate(groups):
            name = f"{files.prefix}{files.first + k}{_SUFFIX}"
            results += self._write_file(name, items, planner)
        if self.sync_files:
            sync_folder(self.path)
        return _done(results)

    def _write_file(self, name, items, planner):
        """Writes `items` to the new file `name`, each record at the next multiple of 4096: the
        tensors' data and the objects' bytes in one batch, the pickles, headers and central
        directories in one more; in several such pairs where the tensors copied to be saved
        (GPU tensors, views of larger storages) pass ``per_thread_copy_ahead`` bytes, so that
        the copies held at once stay near it. Flushed when sync_files."""
        path = self.path / name
        # Made here (a name no other save uses), then moved by the handle, which opens it
        # with O_DIRECT; this process holds no other descriptor on it while the bytes move.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
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
            if item.type == _planner.WriteItemType.BYTE_IO:
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
            results.append(_storage.WriteResult(index=item.index, size_in_bytes=length,
                                                storage_data=_StorageInfo(name, start, length)))
            end = start + length
            if copied >= self.per_thread_copy_ahead:
                _torch_zip.write_archives(placed, path, self._handle, raw)
                placed, raw, copied = [], [], 0
        if placed or raw:
            _torch_zip.write_archives(placed, path, self._handle, raw)
        return results

    def finish(self, metadata, results):
        """On the coordinator, once every rank's files are durable: writes ``.metadata``
        atomically, then removes the files noted at planning that it does not name (an older
        checkpoint's, a failed or killed save's)."""
        storage = {}
        for rank_results in results:
            storage.update({r.index: r.storage_data for r in rank_results})
        metadata.storage_data = storage
        if hasattr(metadata, "storage_meta") and metadata.storage_meta is None:
            metadata.storage_meta = self.storage_meta()
        with atomic_file(self.path / _METADATA, durable=True) as temporary:
            with open(temporary, "wb") as f:
                pickle.dump(metadata, f)
        named = {info.relative_path for info in storage.values()}
        for entry in sorted(self._stale - named):
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


class _Record:
    """One tensor record of a data file: the tensor it holds, built over a buffer not yet read
    (``buffer``, the storage's bytes, read only where a slice cannot go straight), and where
    that storage's bytes lie in the file (``data_offset``). A record that is not a torch.save
    archive of one tensor, or whose parts overlap, raises ValueError naming the file and the
    record's offset."""

    def __init__(self, fd, path, info):
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
            self.storages.append((buffer, base + data_offset(e)))
            return _torch_zip.untyped_of(buffer)

        pickled = _zip._pread_exact(fd, pickle_entry.size, base + data_offset(pickle_entry),
                                    where)
        persistent_load = _torch_zip.persistent_loader(where, data_entries, "data/", storage_of)
        tensor = _torch_zip.Unpickler(io.BytesIO(pickled), where, True, persistent_load).load()
        if not isinstance(tensor, torch.Tensor) or len(self.storages) != 1:
            raise ValueError(f"{where}: not a record of one tensor")
        self.tensor = tensor
        self.buffer, self.data_offset = self.storages[0]
        self.needed = False


class FileSystemReader(_storage.StorageReader):
    """DCP's ``StorageReader`` on nvmeio: reads checkpoints in torch's layout, written by
    nvmeio's writer or torch's (module docstring). ``path``: the checkpoint's folder;
    ``handle``: the ``aio_handle`` that moves the bytes (default: ``make_handle()``)."""

    def __init__(self, path, *, handle=None):
        super().__init__()
        self.path = _checkpoint_path(path)
        self.storage_data = {}
        self._handle = handle  # None: made at the first use, and left out of pickles
        self._own_handle = handle is None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = _checkpoint_path(checkpoint_id)
        self.storage_data = {}

    def __getstate__(self):
        return _without_own_handle(self)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _is_folder_name(checkpoint_id)

    def read_metadata(self, *args, **kwargs):
        from ._files import open_regular

        path = self.path / _METADATA
        with open(open_regular(path), "rb") as f:  # a FIFO is refused, not waited on
            try:
                metadata = pickle.load(f)
            except (pickle.UnpicklingError, EOFError, AttributeError, ImportError,
                    IndexError, TypeError, ValueError) as error:
                raise ValueError(f"{path}: not a checkpoint's metadata ({error!r})") from error
        if not isinstance(metadata, _metadata.Metadata):
            raise ValueError(f"{path}: holds a {type(metadata).__name__}, not DCP's Metadata")
        return metadata

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.storage_data = metadata.storage_data
        if not isinstance(self.storage_data, dict):
            raise ValueError(f"{self.path / _METADATA}: holds no storage data (not written by a "
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
                raise ValueError(f"{self.path / _METADATA}: no storage for {item.storage_index}")
            per_file.setdefault(info.relative_path, []).append((info, item))
        self._handle = handle_or_default(self._handle)
        for name, items in per_file.items():
            self._read_file(str(self.path / name), sorted(items, key=lambda x: x[0].offset),
                            planner)
        return _done(None)

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
                if item.type == _planner.LoadItemType.BYTE_IO:
                    buffer = torch.empty(info.length, dtype=torch.uint8)
                    reads.append((buffer, info.offset))
                    buffered += info.length
                    after.append(lambda item=item, buffer=buffer: planner.load_bytes(
                        item, io.BytesIO(buffer.numpy().tobytes())))
                    continue
                record = records.get((info.offset, info.length))
                if record is None:
                    record = records[(info.offset, info.length)] = _Record(fd, path, info)
                source = _narrowed(record.tensor, item.storage_offsets, item.lengths)
                target = planner.resolve_tensor(item).detach()
                if target.size() != source.size():
                    raise ValueError(f"{path}: {item.storage_index.fqn} at offset {info.offset}: "
                                     f"DCP asks for {tuple(target.size())}, the record holds "
                                     f"{tuple(source.size())}")
                if (target.device.type == "cpu" and target.dtype == source.dtype
                        and target.is_contiguous() and source.is_contiguous()):
                    if source.numel():
                        start = source.storage_offset() * source.element_size()
                        reads.append((_bytes_view(target), record.data_offset + start))
                    after.append(lambda item=item, target=target: planner.commit_tensor(
                        item, target))
                    continue
                if not record.needed and record.buffer.numel():
                    record.needed = True
                    reads.append((record.buffer, record.data_offset))
                    buffered += record.buffer.numel()

                def copy(item=item, target=target, source=source):
                    target.copy_(source)
                    planner.commit_tensor(item, target)
                after.append(copy)
            flush()

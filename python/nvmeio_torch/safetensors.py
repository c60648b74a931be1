"""safetensors files through nvmeio: ``load_file``, ``save_file`` and ``safe_open`` as the
``safetensors`` package has them, plus ``load_files`` and ``stream`` for sharded models.

A file is an 8-byte little-endian header length N, N bytes of JSON (``{name: {"dtype",
"shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, padded with spaces to a
multiple of 8), then the data section, whose offsets count from byte 8 + N.

Reading: the header is checked whole before any tensor byte is read (every malformed file
raises :class:`SafetensorError`, a ``ValueError``, naming the file and the tensor; I/O failures
raise ``OSError`` naming the file). The tensors are not 4 KiB-aligned in the file, so nvmeio reads
aligned supersets of them, in one or a few large requests, into one arena from
``_C.aligned_tensor`` that the returned tensors view: no second copy of the bytes. The one
exception is a tensor whose byte offset in the arena is not a multiple of its element size
(files from writers that do not sort by element width): it is copied out of the arena.

Writing: the package's layout, byte for byte (tensors sorted by dtype, widest first, then by
name, packed without gaps; compact JSON with ``__metadata__`` first), written through the
handle's batch front end into a temporary file renamed over the target.

Differences from the ``safetensors`` package: ``save_file`` makes non-contiguous tensors
contiguous instead of refusing them; tensors that share memory are refused with a
``ValueError`` (the package raises ``RuntimeError``).
"""

import contextlib
import ctypes
import errno
import json
import os
import struct
import threading
import weakref
from collections import OrderedDict

import torch

from . import _C, _staged
from ._files import ALIGN as _ALIGN, align_down as _align_down, align_up as _align_up, \
    atomic_file, draining, handle_or_default, open_regular, opened, read_spans, spans

__all__ = ["SafetensorError", "load_file", "load_files", "safe_open", "save_file", "stream"]

HEADER_LIMIT = 100_000_000  # the package refuses larger headers
_U64_MAX = (1 << 64) - 1

# The format's dtypes, narrowest first: the package's writer sorts by this rank, widest first.
_RANK = ("BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
         "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64",
         "F64", "I64", "U64")
_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
         "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
         "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
         "U64": 64}
# torch's names for them; the ones this torch lacks (float8 before 2.1, uint16-64 before 2.3)
# are refused when a tensor of that dtype is read or written.
_TORCH_NAMES = {"BOOL": "bool", "F4": "float4_e2m1fn_x2", "U8": "uint8", "I8": "int8",
                "F8_E5M2": "float8_e5m2",
                "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
                "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
                "I16": "int16", "U16": "uint16", "F16": "float16", "BF16": "bfloat16",
                "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
                "F64": "float64", "I64": "int64", "U64": "uint64"}
_TO_TORCH = {code: getattr(torch, name) for code, name in _TORCH_NAMES.items()
             if isinstance(getattr(torch, name, None), torch.dtype)}
_FROM_TORCH = {dtype: code for code, dtype in _TO_TORCH.items()}
# Values a torch element of the code's dtype packs: float4_e2m1fn_x2 holds two F4 values, so the
# file's shape has a last dimension twice torch's (as the package writes and reads it).
_PACKED = {"F4": 2}


def _torch_shape(header, entry):
    """The torch shape of entry's tensor: the file's, but for the values packed in a torch
    element."""
    packed = _PACKED.get(entry.dtype)
    if packed is None:
        return entry.shape
    if not entry.shape or entry.shape[-1] % packed:
        _fail(header.path, f"{entry.dtype} tensor of shape {list(entry.shape)}: torch's "
              f"{_TORCH_NAMES[entry.dtype]} holds {packed} values an element, so the last "
              f"dimension must be a multiple of {packed}", entry.name)
    return entry.shape[:-1] + (entry.shape[-1] // packed,)


class SafetensorError(ValueError):
    """A malformed safetensors file, or a request the format cannot hold."""


def _fail(path, message, name=None):
    where = f"{os.fspath(path)}" + (f": tensor {name!r}" if name is not None else "")
    raise SafetensorError(f"{where}: {message}")


class _Entry:
    """One tensor of a file: its dtype code, shape and byte range in the data section."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    @property
    def nbytes(self):
        return self.end - self.begin


class _Header:
    """A checked header: entries in file order, the data section's start, and the file it was
    read from (``_files.opened``), through which every byte is then read."""

    def __init__(self, file, data_start, entries, metadata):
        self.file = file
        self.path = file.path
        self.file_size = file.size
        self.data_start = data_start
        self.entries = entries  # OrderedDict name -> _Entry, by offset
        self.metadata = metadata


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise SafetensorError(f"key {key!r} appears twice in one JSON object")
        seen[key] = value
    return seen


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


def _entry_size(path, name, dtype, shape):
    """Bytes a tensor of this dtype and shape takes, refusing what overflows 64 bits."""
    elements = 1
    for dim in shape:
        elements *= dim
        if elements > _U64_MAX:
            _fail(path, f"shape {shape} overflows 64 bits", name)
    bits = elements * _BITS[dtype]
    if bits > _U64_MAX:
        _fail(path, f"shape {shape} of {dtype} overflows 64 bits", name)
    if bits % 8:
        _fail(path, f"shape {shape} of {dtype} does not end on a byte", name)
    return bits // 8


def _parse_header(path, text):
    """Checks the JSON header ``text`` (bytes) as the package does: every tensor's dtype, shape
    and offsets, the offsets packed from 0 without gap or overlap. Returns (entries by offset,
    metadata or None, the data section's length the entries say)."""
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as error:
        _fail(path, f"the header is not UTF-8 ({error})")
    except SafetensorError as error:
        _fail(path, f"the header is not valid: {error}")
    except (ValueError, RecursionError) as error:
        _fail(path, f"the header is not JSON ({error})")
    if not isinstance(header, dict):
        _fail(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(value, str) for value in metadata.values()):
            _fail(path, "__metadata__ is not an object of strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict):
            _fail(path, "the entry is not an object", name)
        for key in ("dtype", "shape", "data_offsets"):
            if key not in info:
                _fail(path, f"the entry has no {key!r}", name)
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in _BITS:
            _fail(path, f"unknown dtype {dtype!r}", name)
        if not isinstance(shape, list) or not all(_is_count(dim) for dim in shape):
            _fail(path, f"shape {shape!r} is not a list of non-negative integers", name)
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(offset) for offset in offsets) or offsets[0] > offsets[1]):
            _fail(path, f"data_offsets {offsets!r} is not [begin, end] with begin <= end", name)
        size = _entry_size(path, name, dtype, shape)
        if offsets[1] - offsets[0] != size:
            _fail(path, f"data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes; "
                  f"{dtype} of shape {shape} takes {size}", name)
        entries.append(_Entry(name, dtype, tuple(shape), offsets[0], offsets[1]))
    entries.sort(key=lambda entry: (entry.begin, entry.end))
    end, previous = 0, None
    for entry in entries:
        if entry.begin < end:
            _fail(path, f"data_offsets [{entry.begin}, {entry.end}] overlap tensor "
                  f"{previous.name!r} at [{previous.begin}, {previous.end}]", entry.name)
        if entry.begin > end:
            _fail(path, f"data_offsets [{entry.begin}, {entry.end}] leave a gap of "
                  f"{entry.begin - end} bytes before it", entry.name)
        end, previous = entry.end, entry
    return entries, metadata, end


def _pread_exact(fd, path, length, offset):
    data = bytearray()
    while len(data) < length:
        piece = os.pread(fd, length - len(data), offset + len(data))
        if not piece:
            _fail(path, f"the file ended at {offset + len(data)} while reading its header")
        data += piece
    return bytes(data)


def _read_header(path):
    """Opens a file and reads and checks its header (small buffered reads; the data is read by
    nvmeio through the same descriptor, which the returned header holds)."""
    path = os.fspath(path)
    file = opened(path)
    fd = file.fd
    try:
        size = file.size
        if size < 8:
            _fail(path, f"the file has {size} bytes, fewer than the 8 of the header length")
        (length,) = struct.unpack("<Q", _pread_exact(fd, path, 8, 0))
        if length > HEADER_LIMIT:
            _fail(path, f"header length {length} is over the limit of {HEADER_LIMIT} bytes")
        if 8 + length > size:
            _fail(path, f"header length {length} runs past the end of the file ({size} bytes)")
        text = _pread_exact(fd, path, length, 8)
        entries, metadata, data_len = _parse_header(path, text)
        data_start = 8 + length
        if data_start + data_len != size:
            if entries and data_start + data_len > size:
                last = entries[-1]
                _fail(path, f"data_offsets [{last.begin}, {last.end}] run past the end of the "
                      f"data ({size - data_start} bytes)", last.name)
            _fail(path, f"the tensors end at byte {data_start + data_len} but the file has {size}")
    except BaseException:
        file.close()
        raise
    return _Header(file, data_start, OrderedDict((entry.name, entry) for entry in entries),
                   metadata)


@contextlib.contextmanager
def _closing(headers):
    """Closes the headers' files when the block ends."""
    try:
        yield headers
    finally:
        for header in headers:
            header.file.close()


# ---- writing -----------------------------------------------------------------------------------

def _check_no_sharing(items):
    """Refuses tensors whose bytes overlap: the file would hold them twice and load them apart."""
    spans = []
    for name, _, tensor in items:
        if tensor.numel() == 0 or tensor.device.type == "meta":
            continue
        extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        start = tensor.data_ptr()
        spans.append((str(tensor.device), start, start + extent * tensor.element_size(), name))
    spans.sort()
    for (device, _, end, name), (next_device, next_start, _, next_name) in zip(spans, spans[1:]):
        if device == next_device and next_start < end:
            raise ValueError(f"save_file: tensors {name!r} and {next_name!r} share memory; "
                             "save one of them, or a .clone() of the other")


def _layout(tensors, metadata):
    """The package's layout: (header bytes with the 8-byte length, [(name, tensor, data
    offset)] in file order, data section length)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"save_file: expected a dict of str to torch.Tensor, got {type(tensors)}")
    items = []
    for name, tensor in tensors.items():
        if not isinstance(name, str):
            raise ValueError(f"save_file: tensor names must be str, got {name!r}")
        if name == "__metadata__":
            raise ValueError("save_file: '__metadata__' is the format's own key, not a tensor name")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"save_file: {name!r} is a {type(tensor)}, not a torch.Tensor")
        if getattr(tensor, "is_nested", False):
            raise ValueError(f"save_file: {name!r} is a nested tensor; save its components")
        if tensor.layout != torch.strided:
            raise ValueError(f"save_file: {name!r} is a {tensor.layout} tensor; make it dense")
        code = _FROM_TORCH.get(tensor.dtype)
        if code is None:
            raise ValueError(f"save_file: {name!r} has dtype {tensor.dtype}, which safetensors "
                             "cannot hold")
        items.append((name, code, tensor))
    _check_no_sharing(items)
    items.sort(key=lambda item: (-_RANK.index(item[1]), item[0]))
    header = {}
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("save_file: metadata must be a dict of str to str")
        header["__metadata__"] = metadata
    placed, offset = [], 0
    for name, code, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        shape = list(tensor.shape)
        if code in _PACKED:
            if not shape:
                raise ValueError(f"save_file: {name!r} is a 0-d {tensor.dtype} tensor; "
                                 "safetensors' shape counts its packed values: give it a dimension")
            shape[-1] *= _PACKED[code]
        header[name] = {"dtype": code, "shape": shape,
                        "data_offsets": [offset, offset + nbytes]}
        placed.append((name, tensor, offset))
        offset += nbytes
    try:
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"save_file: a name or metadata string is not valid Unicode ({error})")
    text += b" " * (-len(text) % 8)
    if len(text) > HEADER_LIMIT:
        raise ValueError(f"save_file: the header would take {len(text)} bytes, over the "
                         f"format's limit of {HEADER_LIMIT}")
    return struct.pack("<Q", len(text)) + text, placed, offset


def _bytes_of(tensor):
    """A tensor's bytes as a flat uint8 CPU tensor, in the format's C order."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    tensor = tensor.resolve_conj().resolve_neg().contiguous()
    return tensor.reshape(-1).view(torch.uint8)


def save_file(tensors, filename, metadata=None, *, durable=True, handle=None):
    """Writes ``tensors`` (a dict of str to tensor) to ``filename`` as the ``safetensors``
    package writes it, byte for byte.

    The file is replaced atomically: written beside ``filename``, flushed (``fdatasync`` unless
    ``durable=False``), renamed over it and the directory synced; on any failure the temporary
    is removed and ``filename`` is left as it was. The bytes move in one batch of the handle
    (``handle``, or a fresh one from ``_files.make_handle()``). Non-contiguous tensors are
    made contiguous first; tensors that share memory raise ``ValueError``.
    """
    header, placed, _ = _layout(tensors, metadata)
    if any(t.numel() and t.device.type != "cpu" for _, t, _ in placed):
        return _save_through_rings(header, placed, filename, durable)
    buffers = [torch.frombuffer(bytearray(header), dtype=torch.uint8)]
    offsets = [0]
    for _, tensor, offset in placed:
        if tensor.numel():
            buffers.append(_bytes_of(tensor))
            offsets.append(len(header) + offset)
    handle = handle_or_default(handle)
    with atomic_file(filename, durable=durable) as temporary:
        handle.sync_pwrite_batch(buffers, temporary, offsets)


def _save_through_rings(header, placed, filename, durable):
    """save_file of tensors on GPUs: GPU -> page-locked ring -> O_DIRECT writes, overlapped, one
    transfer per device (``_staged``), the header and any CPU tensor with the first; the same
    bytes as saving their CPU copies."""
    with atomic_file(filename, durable=durable) as temporary:
        items = [(temporary, 0, torch.frombuffer(bytearray(header), dtype=torch.uint8),
                  "the header")]
        for name, tensor, offset in placed:
            if tensor.numel():
                tensor = tensor.detach().resolve_conj().resolve_neg().contiguous()
                items.append((temporary, len(header) + offset, _staged._bytes_view(tensor), name))
        _staged.run_by_device("write", items)


# ---- reading -----------------------------------------------------------------------------------

def _device(device):
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cuda", device)
    return torch.device(device)


def _torch_dtype(header, entry):
    dtype = _TO_TORCH.get(entry.dtype)
    if dtype is None:
        _fail(header.path, f"dtype {entry.dtype} has no torch dtype in torch {torch.__version__}",
              entry.name)
    return dtype


def _view(header, entry, arena, arena_offset):
    """The tensor ``entry`` over its bytes in ``arena``, which holds the file from byte
    ``arena_offset``, with a storage of exactly those bytes (``_C.own_storage``: the rest of
    the arena is neither saved with it nor reachable through ``resize_``); copied only where
    its offset in the arena is off its element size."""
    dtype = _torch_dtype(header, entry)
    shape = _torch_shape(header, entry)
    if entry.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    at = header.data_start + entry.begin - arena_offset
    if at % max(1, _BITS[entry.dtype] // 8):
        tensor = torch.empty(shape, dtype=dtype)
        tensor.reshape(-1).view(torch.uint8).copy_(arena[at:at + entry.nbytes])
        return tensor
    return _C.own_storage(arena, at, entry.nbytes).view(dtype).view(shape)


def _span(header, begin, end):
    """The aligned superset [start, stop) of file bytes [begin, end), within the file."""
    return _align_down(begin), min(_align_up(end), header.file_size)


def _check_unchanged(header):
    """ESTALE where the file was written or resized in place since its header was read."""
    header.file.check_unchanged()


def _to_device(headers, device, names=None, max_bytes=None):
    """The tensors of ``headers`` (those in ``names``, when given) made on ``device`` and read
    straight into them through the staging ring (``_staged``): a generator of ``(name,
    tensor)`` as each tensor's bytes have arrived. Host memory: the ring's."""
    tensors, items = [], []
    for header in headers:
        for name, entry in header.entries.items():
            if names is not None and name not in names:
                continue
            tensor = torch.empty(_torch_shape(header, entry), dtype=_torch_dtype(header, entry),
                                 device=device)
            tensors.append((name, tensor))
            items.append((header.file.fd, header.data_start + entry.begin, tensor, name))
    for i in _staged.completions("read", items, device, max_bytes=max_bytes):
        yield tensors[i]
    for header in headers:
        _check_unchanged(header)


def _load(headers, device, handle):
    """Every tensor of ``headers``' files: one arena per file, all files' reads in flight at
    once, then the tensors as views of them; on a GPU, read into them through the ring."""
    for header in headers:
        for entry in header.entries.values():
            _torch_dtype(header, entry)
    if device.type != "cpu":
        loaded = dict(_to_device(headers, device))
        return {name: loaded[name] for header in headers for name in header.entries}
    handle = handle_or_default(handle)
    reads = [spans(header.file, [(header.data_start, header.file_size)])
             if header.file_size > header.data_start else None for header in headers]
    read_spans(handle, [r for r in reads if r is not None])
    arenas = [(None, 0) if r is None else (r.arena, r.intervals[0][0]) for r in reads]
    tensors = {}
    for header, (arena, start) in zip(headers, arenas):
        _check_unchanged(header)
        for name, entry in header.entries.items():
            tensor = _view(header, entry, arena, start)
            tensors[name] = tensor if device.type == "cpu" else tensor.to(device)
    return tensors


def load_file(filename, device="cpu", *, handle=None):
    """All tensors of a safetensors file, as ``safetensors.torch.load_file`` returns them.

    The header is checked first (``SafetensorError``, a ``ValueError``, names the file and the
    tensor). Then the data section is read by nvmeio into one 4 KiB-aligned arena the tensors
    view, in one batch from the 4 KiB boundary at or before it: no second copy, except a tensor
    whose offset in the arena is not a multiple of its element size, which is copied out.
    Tensors keep the arena alive. ``device="cuda:N"`` (or N): the tensors are made there and the
    file's bytes go straight to them, read with O_DIRECT into a ring of page-locked slots (4 x
    64 MiB by default) while the slots read before are copied to the GPU: host memory stays at
    the ring's, whatever the file's size (``_staged``).
    An arena of 32 MiB or more is brought into use by up to 8 helper threads while the reads go
    (``_files.populating``).
    """
    device = _device(device)
    with _closing([_read_header(filename)]) as headers:
        return _load(headers, device, handle)


class safe_open:
    """An open safetensors file, as the package's ``safe_open`` (``framework="pt"``).

    The file is opened, and its header read and checked, when it is made; ``get_tensor`` and
    ``get_slice`` then read only the bytes they need (an aligned superset, into a fresh arena),
    through that descriptor: a file replaced under its name meanwhile is not seen, and one
    written or resized in place raises ``OSError`` ``ESTALE``. Usable as a context manager;
    closed (or garbage-collected), it closes the file and refuses further reads, its slices too.
    """

    def __init__(self, filename, framework="pt", device="cpu", *, handle=None):
        if framework not in ("pt", "torch", "pytorch"):
            raise ValueError(f"safe_open: framework {framework!r}: only 'pt' is supported")
        self._device = _device(device)
        self._header = _read_header(filename)
        self._handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._header is not None:
            self._header.file.close()
        self._header = None
        self._handle = None

    def _open_header(self):
        if self._header is None:
            raise SafetensorError("safe_open: the file is closed")
        return self._header

    def _entry(self, name):
        header = self._open_header()
        entry = header.entries.get(name)
        if entry is None:
            _fail(header.path, "the file does not contain this tensor", name)
        return header, entry

    def _read(self, header, begin, end):
        """File bytes [begin, end) as (arena, file offset of the arena's first byte)."""
        read = spans(header.file, [(begin, end)])
        self._handle = handle_or_default(self._handle)
        read_spans(self._handle, [read])
        arena, start = read.arena, read.intervals[0][0]
        _check_unchanged(header)
        return arena, start

    def keys(self):
        """The tensor names, sorted."""
        return sorted(self._open_header().entries)

    def offset_keys(self):
        """The tensor names in file order."""
        return list(self._open_header().entries)

    def metadata(self):
        """The ``__metadata__`` dict, or None where the file has none."""
        metadata = self._open_header().metadata
        return None if metadata is None else dict(metadata)

    def get_tensor(self, name):
        header, entry = self._entry(name)
        _torch_dtype(header, entry)
        if self._device.type != "cpu":
            return dict(_to_device([header], self._device, names={name}))[name]
        if entry.nbytes == 0:
            tensor = _view(header, entry, None, 0)
        else:
            arena, start = self._read(header, header.data_start + entry.begin,
                                      header.data_start + entry.end)
            tensor = _view(header, entry, arena, start)
        return tensor if self._device.type == "cpu" else tensor.to(self._device)

    def get_tensors(self):
        """Every tensor, read as ``load_file`` reads them."""
        return _load([self._open_header()], self._device, self._handle)

    def get_slice(self, name):
        """A lazy view of one tensor: ``get_shape()``, ``get_dtype()`` and ``[...]``, which
        reads only the rows of the first dimension the index selects."""
        header, entry = self._entry(name)
        return _Slice(self, header, entry)


class _Slice:
    def __init__(self, owner, header, entry):
        self._owner, self._header, self._entry = owner, header, entry

    def get_shape(self):
        return list(self._entry.shape)

    def get_dtype(self):
        return self._entry.dtype

    def __getitem__(self, index):
        header, entry = self._header, self._entry
        dtype = _torch_dtype(header, entry)
        index = index if isinstance(index, tuple) else (index,)
        shape = entry.shape
        if entry.dtype in _PACKED and any(
                part is Ellipsis or (i >= len(shape) - 1 and part != slice(None))
                for i, part in enumerate(index)):
            raise ValueError(
                f"{header.path}: tensor {entry.name!r}: {entry.dtype} packs {_PACKED[entry.dtype]}"
                " values in each torch element, so a slice within its last dimension would mix "
                "the file's units and torch's; slice the other dimensions, or get it whole")
        lo, hi = 0, (shape[0] if shape else None)
        if len(shape) == 1 and entry.dtype in _PACKED:  # its rows are parts of bytes
            hi = None
        elif shape and index:
            first = index[0]
            if isinstance(first, int) and not isinstance(first, bool):
                i = first + shape[0] if first < 0 else first
                if not 0 <= i < shape[0]:
                    raise IndexError(f"{header.path}: tensor {entry.name!r}: index {first} is "
                                     f"out of range for dimension 0 of size {shape[0]}")
                lo, hi, index = i, i + 1, (0,) + index[1:]
            elif isinstance(first, slice):
                start, stop, step = first.indices(shape[0])
                if step > 0:
                    stop = max(start, stop)
                    lo, hi, index = start, stop, (slice(0, stop - start, step),) + index[1:]
        result = self._part(dtype, lo, hi)[index].contiguous()
        device = self._owner._device
        return result if device.type == "cpu" else result.to(device)

    def _part(self, dtype, lo, hi):
        """Rows [lo, hi) of dimension 0, read alone (the whole tensor when hi is None)."""
        header, entry = self._owner._open_header(), self._entry
        if hi is None:
            part_shape, begin, end = entry.shape, entry.begin, entry.end
        else:
            row_bytes = entry.nbytes // entry.shape[0] if entry.shape[0] else 0
            part_shape = (hi - lo,) + tuple(entry.shape[1:])
            begin, end = entry.begin + lo * row_bytes, entry.begin + hi * row_bytes
        piece = _Entry(entry.name, entry.dtype, part_shape, begin, end)
        if end == begin:
            return torch.empty(_torch_shape(header, piece), dtype=dtype)
        arena, start = self._owner._read(header, header.data_start + begin, header.data_start + end)
        return _view(header, piece, arena, start)


# ---- sharded models ----------------------------------------------------------------------------

def _read_index(path):
    """(shard paths in name order, {shard path: names the index puts there})."""
    path = os.fspath(path)
    with open(open_regular(path), "rb") as f:
        text = f.read()
    try:
        index = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as error:
        _fail(path, f"the index is not JSON ({error})")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(shard, str) for shard in weight_map.values()):
        _fail(path, "the index has no \"weight_map\" of tensor names to shard file names")
    directory = os.path.dirname(path)
    names = {}
    for name, shard in weight_map.items():
        if os.path.isabs(shard) or ".." in shard.split("/") or not shard:
            _fail(path, f"shard {shard!r} is not a file name beside the index", name)
        names.setdefault(os.path.join(directory, shard), set()).add(name)
    return sorted(names), names


def _gather(index_or_paths):
    """The checked headers of a model: an index file (``*.json``), one safetensors file, or a
    list of them. Tensor names must be unique across files and agree with the index."""
    expected = None
    if isinstance(index_or_paths, (str, bytes, os.PathLike)):
        source = os.fspath(index_or_paths)
        if isinstance(source, bytes):
            source = os.fsdecode(source)
        if source.endswith(".json"):
            paths, expected = _read_index(source)
        else:
            paths = [source]
    else:
        source = None
        paths = [os.fspath(path) for path in index_or_paths]
    headers, owner = [], {}
    try:
        for path in paths:
            _gather_one(path, source, expected, headers, owner)
    except BaseException:
        for header in headers:
            header.file.close()
        raise
    return headers


def _gather_one(path, source, expected, headers, owner):
    """_gather's step for one file: its header, checked against the others and the index,
    appended to ``headers`` (its file closed on a failure)."""
    try:
        header = _read_header(path)
    except FileNotFoundError as error:
        if expected is None:
            raise
        raise FileNotFoundError(error.errno, f"a shard named in {source} is missing",
                                path) from None
    try:
        for name in header.entries:
            if name in owner:
                _fail(path, f"the tensor is also in {owner[name]}", name)
            owner[name] = path
            if expected is not None and name not in expected[path]:
                _fail(path, f"the tensor is not in the index {source} for this shard", name)
        if expected is not None:
            for name in sorted(expected[path] - set(header.entries)):
                _fail(path, f"the index {source} puts the tensor in this shard; it is not there",
                      name)
    except BaseException:
        header.file.close()
        raise
    headers.append(header)


def load_files(index_or_paths, device="cpu", *, handle=None):
    """Every tensor of a sharded model in one dict: ``index_or_paths`` is the
    ``model.safetensors.index.json`` (shards beside it), one file, or a list of files.

    All headers are read and checked before any data; every shard is then read as ``load_file``
    reads one (one arena per shard that its tensors view), all shards' reads in flight at once.
    """
    device = _device(device)
    with _closing(_gather(index_or_paths)) as headers:
        return _load(headers, device, handle)


class _Chunk:
    """Tensors of one file read together: file bytes [start, stop) into one arena."""

    __slots__ = ("header", "start", "stop", "entries")

    def __init__(self, header, start, stop):
        self.header, self.start, self.stop, self.entries = header, start, stop, []

    @property
    def nbytes(self):
        return 0 if self.start is None else _align_up(self.stop - self.start)


def _chunk_target(max_bytes):
    """stream's usual chunk (and arena) size: a third of the cap, in whole 4 KiB pages."""
    return max(_align_down(max_bytes // 3), _ALIGN)


def _plan_chunks(headers, max_bytes):
    """Tensors in file order, grouped into chunks of at most a third of ``max_bytes``, so that
    the chunk being consumed and the next ones in flight fit the cap together."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < _ALIGN:
        raise ValueError(f"stream: max_bytes must be an int of at least {_ALIGN}, got "
                         f"{max_bytes!r}")
    target = _chunk_target(max_bytes)
    chunks = []
    for header in headers:
        current = None
        for entry in header.entries.values():
            _torch_dtype(header, entry)
            if entry.nbytes == 0:
                if current is None:
                    current = _Chunk(header, None, None)
                    chunks.append(current)
                current.entries.append(entry)
                continue
            start, stop = _span(header, header.data_start + entry.begin,
                                header.data_start + entry.end)
            if _align_up(stop - start) > max_bytes:
                _fail(header.path, f"the tensor takes {_align_up(stop - start)} bytes read "
                      f"aligned, over stream's max_bytes={max_bytes}", entry.name)
            if current is not None and current.start is not None and \
                    _align_up(stop - current.start) <= target:
                current.stop = stop
            else:
                current = _Chunk(header, start, stop)
                chunks.append(current)
            current.entries.append(entry)
    return chunks


def stream(index_or_paths, max_bytes=256 << 20, device="cpu", *, handle=None, observe=None):
    """Iterates ``(name, tensor)`` over a model (as ``load_files`` takes it) in file order,
    holding at most ``max_bytes`` in nvmeio's buffers, the next tensors' reads in flight while
    the caller consumes the previous ones.

    Tensors are read in chunks of up to ``max_bytes // 3`` (aligned supersets, one arena per
    chunk, one batch each); while the caller consumes one chunk's tensors, the next chunk is read
    in the background, if the two fit in ``max_bytes`` (a chunk of one wide tensor may not leave
    room: it is then read when its turn comes). A tensor wider than ``max_bytes`` raises
    ``SafetensorError`` naming it, here, before any read.

    Each yielded tensor views its chunk's arena. Arenas are reused, but only once no tensor of
    their chunk is left anywhere (views and slices included), so a caller may keep any tensor
    and it stays valid; a kept tensor keeps its chunk's arena out of the stream's use, outside
    the cap. A caller that keeps at most the last tensor yielded (a ``for`` loop's variable)
    stays within ``max_bytes``: the chunk it pins, the chunk being consumed and the one in flight.

    ``observe``, if given, is called with a dict per event (``"submit"``, ``"wait"``,
    ``"release"``, ``"yield"``, ``"close"``; with ``chunk``, ``bytes`` (and ``fresh``, whether
    the arena is newly allocated) or ``name``, and
    ``resident``, the bytes of the arenas the stream owns) for tests and monitoring.

    ``device="cuda:N"``: each chunk's tensors are made on the device and read straight into
    through a staging ring of page-locked slots within ``max_bytes`` (``_staged``), each yielded
    as soon as its bytes are there; only ``"yield"`` and ``"close"`` are observed.
    """
    headers = _gather(index_or_paths)
    try:
        chunks = _plan_chunks(headers, max_bytes)
        device = _device(device)
    except BaseException:
        for header in headers:
            header.file.close()
        raise
    if device.type != "cpu":
        return _closed_at_end(headers, _stream_to_device(chunks, max_bytes, device, observe))
    return _closed_at_end(headers, _stream(chunks, max_bytes, device, handle, observe))


def _closed_at_end(headers, tensors):
    """The generator ``tensors``, the headers' files closed once it ends or is closed."""
    with _closing(headers):
        yield from tensors


def _stream_to_device(chunks, max_bytes, device, observe):
    """stream on a GPU: chunk by chunk, each chunk's tensors made on the device and read into
    through a ring within ``max_bytes``, yielded as each one's bytes have arrived."""
    slots, size = _staged.ring_shape_for(max_bytes)
    resident = slots * size
    for i, chunk in enumerate(chunks):
        names = {entry.name for entry in chunk.entries}
        for name, tensor in _to_device([chunk.header], device, names, max_bytes):
            if observe is not None:
                observe(dict(event="yield", chunk=i, name=name, resident=resident))
            yield name, tensor
    if observe is not None:
        observe(dict(event="close", resident=0))


class _Arena:
    """One of stream's arenas: ``lent`` once the stream has moved past its chunk while the
    caller still holds some of its tensors; ``free`` once no tensor views it."""

    __slots__ = ("tensor", "nbytes", "lent", "free", "reused")

    def __init__(self, nbytes):
        self.tensor = _C.aligned_tensor(nbytes)
        self.nbytes, self.lent, self.free, self.reused = nbytes, False, True, False


class _ArenaPool:
    """stream's arenas, reused once every tensor of the chunk read into one is gone (so that a
    stream touches fresh memory only for its first few chunks). The bytes it owns (arenas in
    flight, being consumed, or idle) stay within ``cap``; an arena the caller still holds after
    the stream moved on is the caller's until its last tensor goes, and is then taken back
    only if it fits."""

    def __init__(self, cap, size):
        self.cap, self.size = cap, size
        self.idle = []
        self.owned = 0
        self.open = True
        # A chunk's last tensor may die on any thread (its finaliser runs there), or in a
        # garbage collection inside one of these methods: a re-entrant lock.
        self.lock = threading.RLock()

    def take(self, nbytes):
        """An arena of at least ``nbytes`` bytes, or None when the cap leaves no room."""
        with self.lock:
            return self._take(nbytes)

    def _take(self, nbytes):
        fits = [arena for arena in self.idle if arena.nbytes >= nbytes]
        if fits:
            arena = min(fits, key=lambda a: a.nbytes)
            self.idle.remove(arena)
            arena.free = False
            arena.reused = True
            return arena
        size = max(nbytes, self.size)
        while self.idle and self.owned + size > self.cap:
            self.owned -= self.idle.pop().nbytes
        if self.owned + size > self.cap:
            return None
        arena = _Arena(size)
        arena.free = False
        self.owned += size
        return arena

    def tensor_over(self, arena, nbytes):
        """A uint8 tensor over the arena's first ``nbytes`` whose storage is its own: when it
        and every view of it are gone, the arena is known free (the buffer object it is built
        on is finalised; that finaliser's reference keeps the memory valid until then)."""
        buffer = (ctypes.c_uint8 * nbytes).from_address(arena.tensor.data_ptr())
        weakref.finalize(buffer, self._views_gone, arena)
        return torch.frombuffer(buffer, dtype=torch.uint8)

    def release(self, arena):
        """The stream has moved past the arena's chunk."""
        with self.lock:
            if arena.free:
                self.idle.append(arena)
            else:
                arena.lent = True
                self.owned -= arena.nbytes

    def _views_gone(self, arena):
        with self.lock:
            arena.free = True
            if arena.lent:
                arena.lent = False
                if self.open and self.owned + arena.nbytes <= self.cap:
                    self.idle.append(arena)
                    self.owned += arena.nbytes

    def close(self):
        with self.lock:
            self.open = False
            self.idle.clear()
            self.owned = 0


class _Held:
    """A chunk of a stream read or being read: its index, its arena (None for a chunk with no
    bytes) and whether its bytes have arrived."""

    __slots__ = ("index", "arena", "arrived")

    def __init__(self, index, arena, arrived):
        self.index = index
        self.arena = arena
        self.arrived = arrived


def _stream(chunks, max_bytes, device, handle, observe):
    handle = handle_or_default(handle)
    pool = _ArenaPool(max_bytes, _chunk_target(max_bytes))
    held = []  # _Held of the chunks read or in flight, in order
    submitted = 0
    queue = draining(handle)  # whether a read is in flight

    def note(event, **info):
        if observe is not None:
            observe(dict(event=event, resident=pool.owned, **info))

    def submit(i):
        """Starts chunk i's read; False when the cap leaves no room for its arena now."""
        chunk = chunks[i]
        arena = None
        if chunk.start is not None:
            arena = pool.take(chunk.stop - chunk.start)
            if arena is None:
                return False
            queue.pending = True  # first: an interrupt as the call returns still waits
            handle.async_pread_batch([arena.tensor[:chunk.stop - chunk.start]],
                                     chunk.header.file.fd, [chunk.start])
        held.append(_Held(i, arena, arena is None))
        note("submit", chunk=i, bytes=0 if arena is None else arena.nbytes,
             fresh=arena is not None and not arena.reused)
        return True

    def release_before(index):
        """Hands the arenas of the chunks before ``index`` back to the pool."""
        while held and held[0].index < index:
            released = held.pop(0)
            if released.arena is not None:
                pool.release(released.arena)
            note("release", chunk=released.index)

    try:
        for i, chunk in enumerate(chunks):
            release_before(i)
            if submitted == i:
                if not submit(i):
                    raise AssertionError("stream: no room for the chunk being read")
                submitted += 1
            if not held[0].arrived:
                queue.wait()
                for state in held:
                    state.arrived = True
                note("wait", chunk=i)
            _check_unchanged(chunk.header)
            # One chunk ahead: the wait for it then waits for nothing else (wait() takes all).
            if submitted == i + 1 < len(chunks) and submit(i + 1):
                submitted += 1
            arena = held[0].arena
            data = None if arena is None else pool.tensor_over(arena, chunk.stop - chunk.start)
            for entry in chunk.entries:
                tensor = _view(chunk.header, entry, data, chunk.start)
                if device.type != "cpu":
                    tensor = tensor.to(device)
                note("yield", chunk=i, name=entry.name)
                yield entry.name, tensor
            # Drop this frame's references, so a consumed chunk lives only in what the caller kept.
            arena = data = tensor = None
        release_before(len(chunks))
        arena = None
        pool.close()
        note("close")
    except BaseException:
        queue.drop()  # a read nobody will use; the error that stopped the stream goes on
        raise
    finally:
        pool.close()

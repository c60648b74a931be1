"""The zip archive torch.save writes, planned in Python: stored (uncompressed) records, headers
and central directory built from sizes and CRC-32s, ZIP64 where a size or an offset needs it,
and the reader's side (end record, central directory, local headers). No byte of a record's
data passes through here; callers move those with nvmeio and pass the CRCs in.

Also CRC-32 of large buffers at memory speed: pieces in threads, each folded by the extension's
crc32 (carry-less multiplication; zlib.crc32 where the CPU has none), joined with crc32_combine.
Both release the GIL.
"""

import os
import struct
import zlib

from . import _C
from ._files import ALIGN, align_down, align_up  # noqa: F401 (the zip layout's alignment)

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # local file header, 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # central directory header, 46 bytes
_END = struct.Struct("<IHHHHIIH")  # end of central directory, 22 bytes
_END64 = struct.Struct("<IQHHIIQQQQ")  # ZIP64 end of central directory, 56 bytes
_LOCATOR64 = struct.Struct("<IIQI")  # ZIP64 end of central directory locator, 20 bytes
_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = 0x04034B50, 0x02014B50, 0x06054B50
_END64_SIG, _LOCATOR64_SIG = 0x06064B50, 0x07064B50
_ZIP64_EXTRA, _PAD_EXTRA = 0x0001, 0x4246  # the padding field's id is torch's ("FB")
_LIMIT16, _LIMIT32 = 0xFFFF, 0xFFFFFFFF
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01: records carry no time, as torch's
_UTF8_FLAG = 0x0800


# ---------------------------------------------------------------------------------------------
# CRC-32

_CRC_POLY = 0xEDB88320  # CRC-32's polynomial, bit-reflected: bit 31 is x^0


def _multmodp(a, b):
    """a * b modulo the CRC polynomial, both in the reflected bit order."""
    product = 0
    bit = 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1
    return product


_X2N = [1 << 30]  # _X2N[k] = x^(2^k) modulo the polynomial
for _ in range(63):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def _x8nmodp(n):
    """x^(8n) modulo the polynomial: the shift n zero bytes give a CRC's register."""
    product, k = 1 << 31, 3
    while n:
        if n & 1:
            product = _multmodp(_X2N[k], product)
        n >>= 1
        k += 1
    return product


def crc32_combine(crc1, crc2, length2):
    """The CRC-32 of A+B from crc1 = crc32(A), crc2 = crc32(B) and length2 = len(B)."""
    return _multmodp(_x8nmodp(length2), crc1) ^ crc2


# zlib.crc32's equal, faster where the CPU folds (x86 PCLMULQDQ; docs/PYTHON.md, Checkpoints).
crc32_of = _C.crc32 if _C.crc32_folds else zlib.crc32


class crc32_pieces:
    """CRC-32 of buffers computed in pieces on an executor's threads: add() each buffer (a
    C-contiguous buffer of bytes; extend() continues one), then result(i) joins the pieces of
    the i-th in order."""

    def __init__(self, executor, piece=16 << 20):
        self._executor = executor
        self._piece = piece
        self._buffers = []

    def add(self, buffer=b""):
        self._buffers.append([])
        self.extend(len(self._buffers) - 1, buffer)
        return len(self._buffers) - 1

    def extend(self, index, buffer):
        """Continues the index-th buffer with these bytes."""
        view = memoryview(buffer).cast("B")
        self._buffers[index] += [
            (self._executor.submit(crc32_of, view[start:start + self._piece]),
             min(self._piece, len(view) - start))
            for start in range(0, len(view), self._piece)]

    def result(self, index):
        crc = 0
        for future, length in self._buffers[index]:
            crc = crc32_combine(crc, future.result(), length)
        return crc


def check_crcs(path, records, skip_hint):
    """Checks each record's bytes against the CRC-32 the archive holds for it. ``records``:
    (entry, file offset of its data, buffer of its data); the CRCs are computed on every CPU.
    ValueError naming the file, the first record (in file order) that differs and where its data
    lies, with ``skip_hint`` (how the caller skips the check)."""
    from concurrent.futures import ThreadPoolExecutor

    from ._files import cpus

    records = sorted(records, key=lambda r: r[1])
    with ThreadPoolExecutor(max_workers=cpus()) as executor:
        crcs = crc32_pieces(executor)
        indices = [crcs.add(buffer) for _, _, buffer in records]
        for (e, offset, _), index in zip(records, indices):
            check_crc(path, record_at(e, offset), e.crc, crcs.result(index), skip_hint)


def record_at(e, offset):
    """Entry e, and where its data lies, for a message."""
    return f"record {e.name!r} ({e.size} bytes of data at offset {offset})"


def check_crc(path, what, expected, found, skip_hint):
    """ValueError where ``found``, the CRC-32 of the bytes of ``what`` (a record, and where its
    data lies), is not ``expected``, the one its archive holds. An expected 0 is none recorded:
    what torch.save writes with ``torch.utils.serialization.config.save.compute_crc32`` off
    (one in 2**32 records of data has it too, and goes unchecked)."""
    if expected != 0 and found != expected:
        raise ValueError(
            f"{path}: {what} has CRC-32 {found:#010x} where the archive says {expected:#010x}: "
            f"the file is damaged ({skip_hint} loads it unchecked)")


# ---------------------------------------------------------------------------------------------
# Writing


class record:
    """One record of a planned archive: where its local header and its data go."""

    __slots__ = ("name", "encoded", "size", "header_offset", "data_offset", "zip64", "padding",
                 "crc")

    def __init__(self, name, size, header_offset, aligned):
        self.name = name
        self.encoded = name.encode("utf-8")
        self.size = size
        self.header_offset = header_offset
        self.zip64 = size >= _LIMIT32
        fixed = header_offset + _LOCAL.size + len(self.encoded) + (20 if self.zip64 else 0)
        if aligned:
            # A padding extra field (4 bytes of field header, then filler) moves the data to
            # the next aligned offset, as torch pads its records to 64 bytes.
            self.data_offset = align_up(fixed + 4)
            self.padding = self.data_offset - fixed - 4
        else:
            self.data_offset = fixed
            self.padding = None
        self.crc = None

    @property
    def end(self):
        return self.data_offset + self.size


def plan(records, start=0):
    """Lays out records, given as (name, size, aligned) one after another from `start`: each
    local header right after the previous record's data, an aligned record's data at the
    next multiple of ALIGN. Returns the list of `record`s; the central directory goes at the
    last one's end."""
    planned = []
    offset = start
    for name, size, aligned in records:
        planned.append(record(name, size, offset, aligned))
        offset = planned[-1].end
    return planned


def _flags(r):
    return _UTF8_FLAG if not r.encoded.isascii() else 0


def local_header(r):
    """The local file header of record r (its CRC set), with its extra fields."""
    extra = b""
    size32 = r.size
    if r.zip64:
        extra += struct.pack("<HHQQ", _ZIP64_EXTRA, 16, r.size, r.size)
        size32 = _LIMIT32
    if r.padding is not None:
        extra += struct.pack("<HH", _PAD_EXTRA, r.padding) + b"Z" * r.padding
    header = _LOCAL.pack(_LOCAL_SIG, 45 if r.zip64 else 20, _flags(r), 0, 0, _DOS_DATE, r.crc,
                         size32, size32, len(r.encoded), len(extra))
    out = header + r.encoded + extra
    assert r.header_offset + len(out) == r.data_offset
    return out


def central_directory(records, offset):
    """The central directory at `offset` (the last record's end), and the end records after
    it: ZIP64 ones where an offset, a size or the count passes the 32/16-bit fields."""
    parts = []
    for r in records:
        values = []
        size32 = offset32 = None
        if r.size >= _LIMIT32:
            values += [r.size, r.size]
            size32 = _LIMIT32
        if r.header_offset >= _LIMIT32:
            values.append(r.header_offset)
            offset32 = _LIMIT32
        extra = (struct.pack("<HH", _ZIP64_EXTRA, 8 * len(values))
                 + struct.pack(f"<{len(values)}Q", *values)) if values else b""
        version = 45 if values else 20
        parts.append(_CENTRAL.pack(
            _CENTRAL_SIG, version | (3 << 8), version, _flags(r), 0, 0, _DOS_DATE, r.crc,
            r.size if size32 is None else size32, r.size if size32 is None else size32,
            len(r.encoded), len(extra), 0, 0, 0, 0o100644 << 16,
            r.header_offset if offset32 is None else offset32))
        parts.append(r.encoded)
        parts.append(extra)
    directory = b"".join(parts)
    count = len(records)
    size = len(directory)
    if count >= _LIMIT16 or size >= _LIMIT32 or offset >= _LIMIT32:
        end64_offset = offset + size
        directory += _END64.pack(_END64_SIG, _END64.size - 12, 45 | (3 << 8), 45, 0, 0, count,
                                 count, size, offset)
        directory += _LOCATOR64.pack(_LOCATOR64_SIG, 0, end64_offset, 1)
        directory += _END.pack(_END_SIG, 0, 0, min(count, _LIMIT16), min(count, _LIMIT16),
                               min(size, _LIMIT32), min(offset, _LIMIT32), 0)
    else:
        directory += _END.pack(_END_SIG, 0, 0, count, count, size, offset, 0)
    return directory


# ---------------------------------------------------------------------------------------------
# Reading


class entry:
    """A record as the central directory describes it."""

    __slots__ = ("name", "size", "compressed_size", "method", "flags", "crc", "header_offset")

    def __init__(self, name, size, compressed_size, method, flags, crc, header_offset):
        self.name = name
        self.size = size
        self.compressed_size = compressed_size
        self.method = method
        self.flags = flags
        self.crc = crc
        self.header_offset = header_offset


def _malformed(path, what):
    return ValueError(f"{path}: not a valid zip archive: {what}")


def _pread_exact(fd, length, offset, path):
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise _malformed(path, f"{length} bytes at offset {offset} run past the end of the file")
    return data


def read_directory(fd, file_size, path, base=0):
    """Parses the end records and the central directory of the zip archive open at fd, or of
    the one `file_size` bytes long at offset `base` of it (offsets relative to `base`, as a
    torch.save record inside a larger file has them). Returns (entries, directory_offset).
    Raises ValueError naming the file where the archive is malformed."""
    tail_length = min(file_size, _END.size + 0xFFFF)
    tail = _pread_exact(fd, tail_length, base + file_size - tail_length, path)
    at = tail.rfind(struct.pack("<I", _END_SIG))
    if at < 0 or at + _END.size > len(tail):
        raise _malformed(path, "no end of central directory record")
    end_offset = file_size - tail_length + at
    (_, _, _, _, count, size, offset, _) = _END.unpack_from(tail, at)
    if count == _LIMIT16 or size == _LIMIT32 or offset == _LIMIT32:
        if end_offset < _LOCATOR64.size:
            raise _malformed(path, "ZIP64 end record expected but missing")
        locator = _pread_exact(fd, _LOCATOR64.size, base + end_offset - _LOCATOR64.size, path)
        sig, _, end64_offset, _ = _LOCATOR64.unpack(locator)
        if sig != _LOCATOR64_SIG:
            raise _malformed(path, "ZIP64 end record locator missing")
        end64 = _pread_exact(fd, _END64.size, base + end64_offset, path)
        fields = _END64.unpack(end64)
        if fields[0] != _END64_SIG:
            raise _malformed(path, f"no ZIP64 end record at offset {end64_offset}")
        count, size, offset = fields[7], fields[8], fields[9]
    if offset + size > file_size:
        raise _malformed(path, f"central directory at {offset} (+{size}) runs past the end "
                               f"of the file ({file_size} bytes)")
    directory = _pread_exact(fd, size, base + offset, path)
    entries = []
    at = 0
    for index in range(count):
        if at + _CENTRAL.size > len(directory):
            raise _malformed(path, f"central directory ends inside entry {index}")
        (sig, _, _, flags, method, _, _, crc, csize, usize, name_length, extra_length,
         comment_length, _, _, _, header_offset) = _CENTRAL.unpack_from(directory, at)
        if sig != _CENTRAL_SIG:
            raise _malformed(path, f"central directory entry {index} has a bad signature")
        at += _CENTRAL.size
        raw_name = directory[at:at + name_length]
        name = raw_name.decode("utf-8" if flags & _UTF8_FLAG else "cp437")
        extra = directory[at + name_length:at + name_length + extra_length]
        at += name_length + extra_length + comment_length
        if at > len(directory):
            raise _malformed(path, f"central directory ends inside entry {name!r}")
        # ZIP64: the 8-byte values follow in this order for the fields set to all ones.
        wanted = [f for f, v in (("usize", usize), ("csize", csize), ("offset", header_offset))
                  if v == _LIMIT32]
        if wanted:
            values = _zip64_values(extra, len(wanted), path, name)
            got = dict(zip(wanted, values))
            usize = got.get("usize", usize)
            csize = got.get("csize", csize)
            header_offset = got.get("offset", header_offset)
        entries.append(entry(name, usize, csize, method, flags, crc, header_offset))
    return entries, offset


def _zip64_values(extra, count, path, name):
    at = 0
    while at + 4 <= len(extra):
        field_id, length = struct.unpack_from("<HH", extra, at)
        if field_id == _ZIP64_EXTRA:
            if length < 8 * count or at + 4 + length > len(extra):
                break
            return struct.unpack_from(f"<{count}Q", extra, at + 4)
        at += 4 + length
    raise _malformed(path, f"record {name!r} lacks its ZIP64 sizes")


def local_data_offset(header, header_offset, path, name):
    """The data offset of a record from its local header's first 30 bytes (`header`, a buffer)
    at header_offset."""
    sig, _, _, _, _, _, _, _, _, name_length, extra_length = _LOCAL.unpack_from(header, 0)
    if sig != _LOCAL_SIG:
        raise _malformed(path, f"no local header for record {name!r} at offset {header_offset}")
    return header_offset + _LOCAL.size + name_length + extra_length


LOCAL_HEADER_SIZE = _LOCAL.size

"""nvmeio_torch.load checks every record against its CRC-32 (torch.load checks none); a damaged
file is a ValueError naming the record and where its data lies, unless verify_crc=False."""

import os
import re
import struct
import zipfile
import zlib

import pytest
import torch

import nvmeio_torch
from nvmeio_torch import _staged


def data_offset(path, name):
    """Where record `name`'s data starts, from its local header."""
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        info = z.getinfo(name)
        f.seek(info.header_offset)
        header = f.read(30)
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        return info.header_offset + 30 + name_length + extra_length


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x5A]))


def storage_record(path):
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if "/data/" in n]
    return max(names, key=lambda n: zipfile.ZipFile(path).getinfo(n).file_size)


@pytest.mark.parametrize("writer", ["nvmeio", "torch"])
def test_a_flipped_byte_in_a_storage_raises_naming_the_record(workdir, writer):
    path = os.path.join(workdir, f"{writer}.pt")
    state = {"w": torch.arange(40000, dtype=torch.float32), "b": torch.ones(3)}
    (nvmeio_torch.save if writer == "nvmeio" else torch.save)(state, path)
    name = storage_record(path)
    at = data_offset(path, name) + 4 * 12345
    flip_byte(path, at)
    expected = (rf"{re.escape(path)}: record '{name}' \(160000 bytes of data at offset "
                rf"{at - 4 * 12345}\) has CRC-32 .*verify_crc=False")
    with pytest.raises(ValueError, match=expected):
        nvmeio_torch.load(path)
    unchecked = nvmeio_torch.load(path, verify_crc=False)["w"]
    differs = (unchecked != state["w"]).nonzero().flatten().tolist()
    assert differs == [12345]  # the damage, loaded as it lies, and nothing else


def test_a_flipped_byte_in_the_pickle_raises_before_unpickling(workdir):
    path = os.path.join(workdir, "state.pt")
    nvmeio_torch.save({"w": torch.ones(10), "name": "a" * 200}, path)
    with zipfile.ZipFile(path) as z:
        pickle_name = next(n for n in z.namelist() if n.endswith("data.pkl"))
        pickled = z.read(pickle_name)
    at = data_offset(path, pickle_name) + pickled.index(b"a" * 200) + 100
    flip_byte(path, at)
    with pytest.raises(ValueError, match=rf"record '{pickle_name}'.*CRC-32"):
        nvmeio_torch.load(path)
    assert nvmeio_torch.load(path, verify_crc=False)["name"] != "a" * 200


def test_staged_reads_report_the_crc_of_the_bytes_they_read(workdir):
    # The checksums the GPU path of load compares: each item's CRC-32, from the staging ring's
    # slots, equal to zlib's of the file's bytes.
    path = os.path.join(workdir, "bytes.bin")
    data = os.urandom(3 << 20)
    with open(path, "wb") as f:
        f.write(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        spans = [(0, 4097), (5000, 1 << 20), ((2 << 20) + 3, 1000000)]
        items = [(fd, start, torch.empty(n, dtype=torch.uint8), f"item{i}")
                 for i, (start, n) in enumerate(spans)]
        crcs = _staged.run_by_device("read", items, checksum=True)
    finally:
        os.close(fd)
    assert crcs == [zlib.crc32(data[start:start + n]) for start, n in spans]
    for (start, n), item in zip(spans, items):
        assert item[2].numpy().tobytes() == data[start:start + n]


def test_records_across_waves_are_checked_whole(workdir, monkeypatch):
    # Checked as they are read, a wave at a time: records of odd sizes straddle the waves
    # (1 MiB here), and damage in any part of one, in any wave, is found.
    from nvmeio_torch import _files

    monkeypatch.setattr(_files, "WAVE", 1 << 20)
    path = os.path.join(workdir, "waves.pt")
    g = torch.Generator().manual_seed(5)
    state = {f"t{i}": torch.randn(n, generator=g) for i, n in
             enumerate([100, 300000, 7, 700001, 50000, 1, 400003])}
    nvmeio_torch.save(state, path)
    loaded = nvmeio_torch.load(path)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    with zipfile.ZipFile(path) as z:
        big = [i for i in z.infolist() if i.file_size > (2 << 20)]
    for info in big:  # its first byte, one past a wave's end, and its last byte
        start = data_offset(path, info.filename)
        wave_end = ((start >> 20) + 1) << 20
        for at in (start, wave_end, start + info.file_size - 1):
            flip_byte(path, at)
            with pytest.raises(ValueError, match=rf"record '{info.filename}'.*CRC-32"):
                nvmeio_torch.load(path)
            flip_byte(path, at)  # undone: the file is whole again
        assert all(torch.equal(nvmeio_torch.load(path)[k], v) for k, v in state.items())


def test_a_file_saved_without_crcs_loads(workdir):
    # torch.save with compute_crc32 off (torch 2.6+) records every CRC as 0: none to check.
    config = pytest.importorskip("torch.utils.serialization").config
    if not hasattr(config.save, "compute_crc32"):
        pytest.skip(f"torch {torch.__version__} always computes CRCs")
    path = os.path.join(workdir, "nocrc.pt")
    state = {"w": torch.randn(1000), "s": "text"}
    config.save.compute_crc32 = False
    try:
        torch.save(state, path)
    finally:
        config.save.compute_crc32 = True
    with zipfile.ZipFile(path) as z:
        assert all(info.CRC == 0 for info in z.infolist())
    loaded = nvmeio_torch.load(path)
    assert torch.equal(loaded["w"], state["w"]) and loaded["s"] == "text"


def test_a_damaged_pickle_raises_naming_the_file(workdir):
    # Every byte of the pickle flipped in turn: checked, each load raises the CRC error; unchecked
    # (verify_crc=False, or a file saved without CRCs) it may load another valid object, but an
    # error names the file (never a bare KeyError or MemoryError from the unpickler) and no
    # tensor reaches past its record (torch's own loader refuses those too).
    import pickle

    path = os.path.join(workdir, "state.pt")
    state = {"a": torch.arange(64.0).reshape(8, 8), "b": torch.arange(10)}
    nvmeio_torch.save(state, path)
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("data.pkl"))
        size = z.getinfo(name).file_size
    start = data_offset(path, name)
    unchecked, unnamed = [], []
    for at in range(start, start + size):
        flip_byte(path, at)
        with pytest.raises(ValueError, match=r"CRC-32"):
            nvmeio_torch.load(path)
        try:
            nvmeio_torch.load(path, verify_crc=False)
        except (ValueError, pickle.UnpicklingError) as error:
            if path not in str(error):
                unnamed.append((at - start, repr(error)))
        except Exception as error:  # anything else is unnamed by construction
            unnamed.append((at - start, repr(error)))
        flip_byte(path, at)
    assert unnamed == []

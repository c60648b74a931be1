"""Files other writers made (python/tests/elsewhere/make.py, run with torch 2.11 and the
safetensors package 0.8.0): nvmeio_torch reads them exactly, and writes the package's bytes."""

import importlib.util
import os
import struct
import zipfile

import torch

import nvmeio_torch
import nvmeio_torch.safetensors as nst

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elsewhere")
_spec = importlib.util.spec_from_file_location("elsewhere_make", os.path.join(HERE, "make.py"))
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)

CHECKPOINT = os.path.join(HERE, "torch2_checkpoint.pt")
PACKAGE = os.path.join(HERE, "package.safetensors")


def storage_pointer(t):
    return make.storage(t).data_ptr()


def data_offsets(path):
    """Where each record's data starts, from its local header."""
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        out = []
        for info in z.infolist():
            f.seek(info.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", f.read(4))
            out.append(info.header_offset + 30 + name_length + extra_length)
        return out


def test_a_torch_2_checkpoint_loads_exactly():
    # torch 2.x's own records (.format_version, .storage_alignment, .data/serialization_id) are
    # in the file: it is not one torch 1.13 could have written.
    with zipfile.ZipFile(CHECKPOINT) as z:
        assert "torch2_checkpoint/.data/serialization_id" in z.namelist()
    # Its records start at torch's 64-byte offsets, not nvmeio's 4 KiB: read in aligned supersets.
    offsets = data_offsets(CHECKPOINT)
    assert all(o % 64 == 0 for o in offsets) and any(o % 4096 for o in offsets)
    for weights_only in (True, False):
        loaded = nvmeio_torch.load(CHECKPOINT, weights_only=weights_only)
        assert make.same(make.checkpoint(), loaded)
        assert storage_pointer(loaded["row"]) == storage_pointer(loaded["base"])
        assert storage_pointer(loaded["slice"]) == storage_pointer(loaded["base"])


def test_the_packages_safetensors_file_loads_exactly():
    assert make.same_tensors(make.tensors(), nst.load_file(PACKAGE))
    with nst.safe_open(PACKAGE) as f:
        assert f.metadata() == make.METADATA
        assert sorted(f.keys()) == sorted(make.tensors())
        assert torch.equal(f.get_slice("odd")[2:5, :, 3], make.tensors()["odd"][2:5, :, 3])


def test_save_file_writes_the_packages_bytes(tmp_path):
    path = str(tmp_path / "ours.safetensors")
    nst.save_file(make.tensors(), path, metadata=make.METADATA)
    with open(path, "rb") as ours, open(PACKAGE, "rb") as theirs:
        assert ours.read() == theirs.read()

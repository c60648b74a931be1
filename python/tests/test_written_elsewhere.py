"""Files other writers made (python/tests/elsewhere/make.py, run with torch 2.11 and the
safetensors package 0.8.0): nvmeio_torch reads them exactly, and writes the package's bytes."""

import os
import sys
import zipfile

import torch

import nvmeio_torch
import nvmeio_torch.safetensors as nst

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elsewhere")
sys.path.insert(0, HERE)
import make  # noqa: E402

CHECKPOINT = os.path.join(HERE, "torch2_checkpoint.pt")
PACKAGE = os.path.join(HERE, "package.safetensors")


def storage_pointer(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else \
        t.storage().data_ptr()


def test_a_torch_2_checkpoint_loads_exactly():
    # torch 2.x's own records (.format_version, .storage_alignment, .data/serialization_id) are
    # in the file: it is not one torch 1.13 could have written.
    with zipfile.ZipFile(CHECKPOINT) as z:
        assert "torch2_checkpoint/.data/serialization_id" in z.namelist()
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

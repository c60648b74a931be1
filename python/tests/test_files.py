"""The atomic replacement the whole-file jobs share (nvmeio_torch._files)."""

import os

import pytest

from nvmeio_torch import _files


def test_a_finished_file_replaces_the_old_one_and_leaves_nothing_beside_it(workdir):
    path = os.path.join(workdir, "model.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    for durable in (True, False):
        with _files.atomic_file(path, durable=durable) as temporary:
            assert os.path.dirname(temporary) == workdir and temporary != path
            assert os.path.getsize(temporary) == 0
            with open(temporary, "wb") as f:
                f.write(b"new %d" % durable)
            with open(path, "rb") as f:
                assert f.read() != b"new %d" % durable  # not visible before the rename
        with open(path, "rb") as f:
            assert f.read() == b"new %d" % durable
    assert os.listdir(workdir) == ["model.bin"]


def test_a_failure_keeps_the_old_file_and_removes_the_temporary(workdir):
    path = os.path.join(workdir, "model.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    with pytest.raises(KeyError):
        with _files.atomic_file(path) as temporary:
            with open(temporary, "wb") as f:
                f.write(b"half")
            raise KeyError("the writer failed")
    with open(path, "rb") as f:
        assert f.read() == b"old"
    assert os.listdir(workdir) == ["model.bin"]


def test_a_missing_folder_is_an_oserror_naming_it(workdir):
    path = os.path.join(workdir, "no", "model.bin")
    with pytest.raises(FileNotFoundError) as raised:
        with _files.atomic_file(path):
            pass
    assert os.path.join(workdir, "no") in raised.value.filename


def test_make_handle_moves_whole_files(workdir):
    h = _files.make_handle()
    assert h.get_intra_op_parallelism() >= 1 and h.get_block_size() == 1 << 20

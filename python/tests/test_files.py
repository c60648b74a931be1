"""The atomic replacement the whole-file jobs share (nvmeio_torch._files)."""

import os
import stat

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
    import torch

    h = _files.make_handle(queue_depth=8)
    assert (h.get_block_size(), h.get_queue_depth()) == (1 << 20, 8)
    assert 1 <= h.get_intra_op_parallelism() <= 4
    data = torch.randint(0, 256, (3 * (1 << 20) + 5,), dtype=torch.uint8)
    path = os.path.join(workdir, "whole.bin")
    assert h.sync_pwrite(data, path) == 1
    back = torch.zeros_like(data)
    assert h.sync_pread(back, path) == 1
    assert torch.equal(back, data) and os.path.getsize(path) == data.numel()


def test_a_replaced_file_keeps_its_permission_bits_as_open_wb_would(workdir):
    path = os.path.join(workdir, "private.bin")
    fresh = os.path.join(workdir, "fresh.bin")
    with open(path, "wb") as f:
        f.write(b"old")
    os.chmod(path, 0o600)
    previous = os.umask(0o022)
    try:
        for target in (path, fresh):
            with _files.atomic_file(target) as temporary:
                with open(temporary, "wb") as f:
                    f.write(b"new")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # not widened to 0o644
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o644  # a new file: 0o666 less the umask


def test_a_symlink_is_followed_and_its_target_replaced_as_open_wb_would(workdir):
    target = os.path.join(workdir, "step100.bin")
    link = os.path.join(workdir, "latest.bin")
    with open(target, "wb") as f:
        f.write(b"old")
    os.symlink("step100.bin", link)
    with _files.atomic_file(link) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"new")
    assert os.path.islink(link) and os.readlink(link) == "step100.bin"
    with open(target, "rb") as f:
        assert f.read() == b"new"
    assert sorted(os.listdir(workdir)) == ["latest.bin", "step100.bin"]


def test_a_file_whose_name_is_near_the_longest_allowed_is_replaced(workdir):
    path = os.path.join(workdir, "m" * 250)
    with open(path, "wb") as f:
        f.write(b"old")
    with _files.atomic_file(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"new")
    with open(path, "rb") as f:
        assert f.read() == b"new"
    assert os.listdir(workdir) == ["m" * 250]


def test_make_handle_falls_back_to_libaio_where_the_kernel_refuses_io_uring(monkeypatch):
    import errno
    import types

    real = _files._C

    def aio_handle(**settings):
        if settings["backend"] == "io_uring":  # as io_uring_disabled=2 or a seccomp filter does
            raise OSError(errno.EPERM, "io_uring_setup refused")
        return real.aio_handle(**settings)

    monkeypatch.setattr(_files, "_C", types.SimpleNamespace(io_uring_available=True,
                                                            aio_handle=aio_handle))
    assert _files.make_handle().get_backend() == "libaio"
    with pytest.raises(OSError):  # asked for by name: no fallback
        _files.make_handle(backend="io_uring")

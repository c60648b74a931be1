"""Loads racing a writer that replaces the file atomically (as save does), in two processes:
every reader opens each file once and reads every byte through that descriptor, so each load
is the old file or the new one, whole, and never an error. And the handle's descriptor form
writes into the descriptor's file, never into whatever file has its name by then."""

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import nvmeio_torch
import nvmeio_torch.safetensors as st
from nvmeio_torch import _files, checkpoint

RACE_SECONDS = 2.5  # each race; the writer stops by itself after RACE_SECONDS + 10
ELEMENTS = 64 << 10  # 256 KiB of float32: several reads per load, and many loads a second

# Replaces `target` by copies of the given files in turn, as fast as it can, until `stop`
# exists or its time is up.
REPLACER = textwrap.dedent("""
    import os, shutil, sys, time
    target, stop, limit, *versions = sys.argv[1:]
    deadline = time.monotonic() + float(limit)
    n = 0
    while not os.path.exists(stop) and time.monotonic() < deadline:
        fresh = f"{target}.{n % 2}.tmp"
        shutil.copyfile(versions[n % len(versions)], fresh)
        os.replace(fresh, target)
        n += 1
    print(n)
""")


class replacing:
    """A process replacing `target` by copies of `versions` in turn while the block runs."""

    def __init__(self, target, versions):
        self.target, self.versions = target, versions
        self.stop = target + ".stop"

    def __enter__(self):
        shutil.copyfile(self.versions[0], self.target)
        self.process = subprocess.Popen(
            [sys.executable, "-c", REPLACER, self.target, self.stop, str(RACE_SECONDS + 10)]
            + self.versions, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        open(self.stop, "w").close()
        out, _ = self.process.communicate(timeout=30)
        self.replaced = int(out)
        assert self.process.returncode == 0
        return False


def race(target, versions, load_once):
    """Loads `target` for RACE_SECONDS while another process replaces it; `load_once` returns
    the version it found, or raises AssertionError for a torn load. Returns {version: loads}."""
    with replacing(target, versions) as writer:
        seen, failures = {}, []
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            try:
                version = load_once()
            except (OSError, ValueError, AssertionError) as error:
                failures.append(repr(error))
                continue
            seen[version] = seen.get(version, 0) + 1
    assert not failures, f"{len(failures)} bad loads of {len(failures) + sum(seen.values())}: " \
                         f"{failures[:3]}"
    assert writer.replaced > 10 and sum(seen.values()) > 10, (writer.replaced, seen)
    assert len(seen) == len(versions), f"the race never showed every version: {seen}"
    return seen


def consistent(step, w):
    """The version a loaded pair holds; AssertionError where the pair mixes two saves."""
    step = int(step)
    assert torch.equal(w, torch.full((ELEMENTS,), float(step))), \
        f"step {step} with the weights of another save"
    return step


@pytest.mark.parametrize("path", ["arena", "ring"])
def test_torch_format_loads_are_never_torn_by_an_atomic_replace(workdir, path, monkeypatch):
    if path == "ring":  # the GPU loads' pipeline, on the ring's host engine
        monkeypatch.setattr(checkpoint, "_places_on_gpu", lambda *a: True)
    versions = []
    for v in (1, 2):
        path = os.path.join(workdir, f"v{v}.pt")
        nvmeio_torch.save({"step": v, "w": torch.full((ELEMENTS,), float(v))}, path)
        versions.append(path)
    target = os.path.join(workdir, "ckpt.pt")
    handle = _files.make_handle()

    def load_once():
        loaded = nvmeio_torch.load(target, handle=handle)
        return consistent(loaded["step"], loaded["w"])

    race(target, versions, load_once)


@pytest.mark.parametrize("reader", ["load_file", "safe_open", "load_files", "stream", "ring"])
def test_safetensors_loads_are_never_torn_by_an_atomic_replace(workdir, reader):
    versions = []
    for v in (1, 2):
        path = os.path.join(workdir, f"v{v}.safetensors")
        st.save_file({"step": torch.tensor([v]), "w": torch.full((ELEMENTS,), float(v))}, path)
        versions.append(path)
    target = os.path.join(workdir, "model.safetensors")
    handle = _files.make_handle()

    def load_once():
        if reader == "load_file":
            loaded = st.load_file(target, handle=handle)
        elif reader == "safe_open":
            with st.safe_open(target, handle=handle) as f:
                loaded = {"step": f.get_tensor("step"), "w": f.get_slice("w")[:]}
        elif reader == "load_files":
            loaded = st.load_files([target], handle=handle)
        elif reader == "stream":  # a cap below the pair: the two tensors in two chunks
            loaded = dict(st.stream(target, max_bytes=3 * ELEMENTS * 4, handle=handle))
        else:  # the GPU loads' pipeline, on the ring's host engine
            header = st._read_header(target)
            try:
                loaded = dict(st._to_device([header], torch.device("cpu")))
            finally:
                header.file.close()
        return consistent(loaded["step"], loaded["w"])

    race(target, versions, load_once)


def test_dcp_loads_are_never_torn_by_an_atomic_replace_of_a_data_file(workdir, monkeypatch):
    import pickle

    import dcp_jobs
    import nvmeio_torch.dcp as ndcp

    # Each item in a batch of reads of its own, as in a checkpoint larger than the buffer cap.
    monkeypatch.setattr(ndcp, "_BUFFERED", 0)

    folders = []
    for v in (1, 2):
        folder = os.path.join(workdir, f"v{v}")
        dcp_jobs.save({"step": v, "w": torch.full((ELEMENTS,), float(v))},
                             ndcp.FileSystemWriter(folder), no_dist=True)
        folders.append(folder)
    data = sorted(f for f in os.listdir(folders[0]) if f.endswith(".distcp"))
    assert data == sorted(f for f in os.listdir(folders[1]) if f.endswith(".distcp"))
    metadata = []
    for f in folders:
        with open(os.path.join(f, ".metadata"), "rb") as read:
            metadata.append(read.read())
    # The same items at the same places; torch 2's metadata also names the folder and the
    # save (storage_meta), which differ.
    layouts = [pickle.loads(m).storage_data for m in metadata]
    assert layouts[0] == layouts[1], "the two versions must share one layout"
    target = os.path.join(workdir, "ckpt")
    os.mkdir(target)
    with open(os.path.join(target, ".metadata"), "wb") as f:
        f.write(metadata[0])
    handle = _files.make_handle()

    def load_once():
        state = {"step": 0, "w": torch.zeros(ELEMENTS)}
        dcp_jobs.load(state, ndcp.FileSystemReader(target, handle=handle), no_dist=True)
        return consistent(state["step"], state["w"])

    assert len(data) == 1
    race(os.path.join(target, data[0]), [os.path.join(f, data[0]) for f in folders], load_once)


def test_a_descriptor_write_lands_in_the_descriptors_file_while_another_takes_its_name(workdir):
    # Two versions of another content: a write that went by name lands in one of their copies
    # and leaves this descriptor's file as the copy it opened.
    target = os.path.join(workdir, "target")
    versions = []
    for v in (1, 2):
        path = os.path.join(workdir, f"other{v}")
        with open(path, "wb") as f:
            f.write(bytes([v]) * 8192)
        versions.append(path)
    handle = nvmeio_torch.aio_handle(block_size=4096, queue_depth=8)
    payload = torch.arange(8192, dtype=torch.int64).to(torch.uint8)
    with replacing(target, versions) as writer:
        writes, misplaced = 0, 0
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            fd = os.open(target, os.O_RDWR)
            try:
                assert handle.async_pwrite(payload, fd, 0) == 0
                assert handle.wait() == 1
                misplaced += os.pread(fd, 8192, 0) != payload.numpy().tobytes()
                writes += 1
            finally:
                os.close(fd)
    assert writer.replaced > 10 and writes > 10, (writer.replaced, writes)
    assert misplaced == 0, f"{misplaced} of {writes} writes landed in another file"


def test_a_load_replaced_between_its_directory_and_its_data_reads_the_file_it_opened(
        workdir, monkeypatch):
    # Deterministic: the replace lands after the zip directory (or header) was read and before
    # any data is: every byte still comes from the file first opened.
    versions = []
    for v in (1, 2):
        path = os.path.join(workdir, f"v{v}")
        nvmeio_torch.save({"step": v, "w": torch.full((ELEMENTS,), float(v))}, path + ".pt")
        st.save_file({"step": torch.tensor([v]), "w": torch.full((ELEMENTS,), float(v))},
                     path + ".safetensors")
        versions.append(path)
    real = _files.read_spans
    for suffix, load in ((".pt", nvmeio_torch.load), (".safetensors", st.load_file)):
        target = os.path.join(workdir, "target" + suffix)
        shutil.copyfile(versions[0] + suffix, target)

        def read_spans_after_a_replace(handle, reads, suffix=suffix, target=target):
            shutil.copyfile(versions[1] + suffix, target + ".tmp")
            os.replace(target + ".tmp", target)
            return real(handle, reads)

        monkeypatch.setattr(_files, "read_spans", read_spans_after_a_replace)
        monkeypatch.setattr(st, "read_spans", read_spans_after_a_replace)
        loaded = load(target)
        assert consistent(loaded["step"], loaded["w"]) == 1, suffix
        monkeypatch.undo()


def test_a_descriptor_write_after_its_name_was_taken_stays_in_its_file(workdir):
    target = os.path.join(workdir, "target")
    with open(target, "wb") as f:
        f.write(b"\1" * 8192)
    fd = os.open(target, os.O_RDWR)
    try:
        with open(target + ".new", "wb") as f:
            f.write(b"\2" * 8192)
        os.replace(target + ".new", target)  # the descriptor's file is now nameless
        handle = nvmeio_torch.aio_handle()
        payload = torch.full((8192,), 3, dtype=torch.uint8)
        assert handle.async_pwrite(payload, fd=fd, file_offset=0) == 0
        assert handle.wait() == 1
        assert handle.sync_pwrite_batch([payload[:10]], fd, [100]) == 1
        assert os.pread(fd, 8192, 0) == b"\3" * 8192
        assert open(target, "rb").read() == b"\2" * 8192
    finally:
        os.close(fd)


def test_a_descriptor_gives_no_more_access_than_it_has(workdir):
    path = os.path.join(workdir, "f.bin")
    with open(path, "wb") as f:
        f.write(b"\1" * 4096)
    handle = nvmeio_torch.aio_handle()
    tensor = torch.zeros(4096, dtype=torch.uint8)
    read_only = os.open(path, os.O_RDONLY)
    write_only = os.open(path, os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="read-only") as raised:
            handle.sync_pwrite(tensor, read_only, 0)
        assert raised.value.errno == errno.EBADF
        with pytest.raises(OSError, match="write-only") as raised:
            handle.sync_pread(tensor, write_only, 0)
        assert raised.value.errno == errno.EBADF
        assert open(path, "rb").read() == b"\1" * 4096
        assert handle.sync_pread(tensor, read_only, 0) == 1 and int(tensor[0]) == 1
        assert handle.sync_pwrite(tensor + 1, write_only, 0) == 1
        assert open(path, "rb").read() == b"\2" * 4096
    finally:
        os.close(read_only)
        os.close(write_only)

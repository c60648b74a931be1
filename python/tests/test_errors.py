"""Every failure raises a precise Python exception and leaves the handle usable."""

import errno
import os
import subprocess
import sys
import tempfile

import pytest
import torch

import nvmeio_torch
from conftest import file_bytes, random_bytes, write_file


def still_usable(h, workdir):
    data = random_bytes(5000, seed=9)
    path = os.path.join(workdir, "after.bin")
    assert h.sync_pwrite(data, path) == 1
    back = torch.zeros_like(data)
    assert h.sync_pread(back, path) == 1
    assert torch.equal(back, data)
    assert h.wait() == 0


def test_missing_file_raises_file_not_found_naming_it(workdir, backend):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
    path = os.path.join(workdir, "missing.bin")
    for call in (lambda: h.sync_pread(torch.zeros(10, dtype=torch.uint8), path),
                 lambda: h.async_pread(torch.zeros(10, dtype=torch.uint8), path)):
        with pytest.raises(FileNotFoundError) as info:
            call()
        assert info.value.errno == errno.ENOENT
        assert info.value.filename == path
        assert "open" in str(info.value)
    still_usable(h, workdir)


@pytest.mark.parametrize("is_async", [False, True])
def test_read_past_the_end_raises_naming_file_offset_and_its_size(workdir, backend, is_async):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
    path = os.path.join(workdir, "short.bin")
    write_file(path, random_bytes(10000))
    buffer = torch.zeros(8192, dtype=torch.uint8)
    with pytest.raises(OSError) as info:
        if is_async:
            assert h.async_pread(buffer, path, 4096) == 0
            h.wait()
        else:
            h.sync_pread(buffer, path, 4096)
    e = info.value
    assert e.errno == errno.ENODATA and e.filename == path
    assert "offset 4096" in str(e) and "8192 bytes" in str(e) and "the file is 10000 bytes long" in str(e)
    still_usable(h, workdir)


def test_wait_raises_the_first_failure_after_every_request_finished(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 1)
    good = os.path.join(workdir, "good.bin")
    short = os.path.join(workdir, "short.bin")
    write_file(short, random_bytes(100))
    data = random_bytes(50000)
    out = os.path.join(workdir, "out.bin")
    assert h.async_pread(torch.zeros(1000, dtype=torch.uint8), short) == 0
    assert h.async_pwrite(data, out) == 0
    with pytest.raises(OSError, match="short.bin"):
        h.wait()
    assert torch.equal(file_bytes(out), data)  # the request after the failure still ran
    assert h.wait() == 0


def test_bad_tensors_raise_value_or_type_errors(workdir):
    h = nvmeio_torch.aio_handle()
    path = os.path.join(workdir, "f.bin")
    write_file(path, random_bytes(4096))
    with pytest.raises(ValueError, match="not contiguous"):
        h.sync_pread(torch.zeros(64, 64, dtype=torch.uint8)[:, 0], path)
    with pytest.raises(ValueError, match="is on meta; this call moves CPU tensors"):
        h.async_pwrite(torch.zeros(8, device="meta"), path)
    with pytest.raises(ValueError, match="file_offset must not be negative"):
        h.sync_pread(torch.zeros(8, dtype=torch.uint8), path, -4096)
    with pytest.raises(TypeError):
        h.sync_pread(bytearray(8), path)
    with pytest.raises(TypeError):
        h.sync_pread(torch.zeros(8), 4.2)
    with pytest.raises(TypeError):
        h.sync_pread(torch.zeros(8), True)  # a bool is no descriptor
    assert h.wait() == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=0), "block_size"), (dict(queue_depth=0), "queue_depth"),
    (dict(queue_depth=-5), "queue_depth"), (dict(intra_op_parallelism=0), "intra_op_parallelism"),
    (dict(block_size=1 << 62), "block_size"), (dict(backend="spdk"), "backend"),
])
def test_silly_constructor_values_raise_value_error_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nvmeio_torch.aio_handle(**kwargs)


def test_closed_descriptor_raises_ebadf(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, True, True, 2)
    fd = os.open(os.path.join(workdir, "f.bin"), os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    with pytest.raises(OSError) as info:
        h.async_pwrite(torch.zeros(4096, dtype=torch.uint8), fd, 0)
    assert info.value.errno == errno.EBADF
    assert f"descriptor {fd}" in str(info.value)
    with pytest.raises(OSError):
        h.async_pwrite(torch.zeros(8, dtype=torch.uint8), -1, 0)
    assert h.wait() == 0


def test_write_through_a_descriptor_names_its_file_on_failure(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, True, True, 2)
    path = os.path.join(workdir, "f.bin")
    fd = os.open(path, os.O_DIRECT | os.O_CREAT | os.O_WRONLY)
    try:
        data = random_bytes(10000)
        assert h.async_pwrite(data, fd, 4096) == 0
        assert h.wait() == 1
        assert torch.equal(file_bytes(path)[4096:], data)
    finally:
        os.close(fd)


def test_a_file_too_large_for_the_limit_raises_efbig_and_keeps_what_was_there(workdir):
    # RLIMIT_FSIZE stands in for a full disk without root; disk full proper is below.
    path = os.path.join(workdir, "f.bin")
    old = random_bytes(8192)
    write_file(path, old)
    code = f"""
import os, resource, signal, torch, nvmeio_torch
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
try:
    h.sync_pwrite(torch.ones(1 << 20, dtype=torch.uint8), {path!r}, 0)
except OSError as e:
    print("errno", e.errno, e.filename == {path!r}, "offset" in str(e))
print("wait", h.wait())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"errno {errno.EFBIG} True True" in out.stdout
    assert "wait 0" in out.stdout


def test_disk_full_raises_enospc_naming_the_file(workdir):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a 1 MiB tmpfs as a full disk")
    mount = tempfile.mkdtemp(dir=workdir)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount], check=True)
    try:
        h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
        path = os.path.join(mount, "full.bin")
        with pytest.raises(OSError) as info:
            h.sync_pwrite(torch.ones(4 << 20, dtype=torch.uint8), path)
        assert info.value.errno == errno.ENOSPC and info.value.filename == path
        assert h.wait() == 0
    finally:
        subprocess.run(["umount", mount], check=True)


def test_validate_passes_on_equal_bytes_for_every_method_that_takes_it(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(30000)
    assert h.write(data, path, True) == 0
    assert h.pwrite(data, path, True, False) == 1
    back = torch.zeros_like(data)
    assert h.read(back, path, True) == 0
    assert torch.equal(back, data)
    back.zero_()
    assert h.pread(back, path, True, True) == 0
    assert h.wait() == 1
    assert torch.equal(back, data)


# A child process, so that a crash fails the test instead of ending the run. It maps `path`
# read-only (PROT_READ) and a page of no access (PROT_NONE) and hands tensors over them to
# every method; it prints one line per call: the exception, or "ok".
MEMORY_CHILD = r"""
import mmap, os, sys, warnings
import torch, nvmeio_torch
warnings.simplefilter("ignore")  # frombuffer warns that the buffer is not writable
path, backend = sys.argv[1], sys.argv[2]
h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
with open(path, "rb") as f:
    mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
read_only = torch.frombuffer(mapped, dtype=torch.uint8)
unreadable = torch.frombuffer(mmap.mmap(-1, 8192, prot=0), dtype=torch.uint8)  # PROT_NONE
calls = {
    "aligned": lambda: h.sync_pread(read_only[:4096], path),
    "unaligned": lambda: h.sync_pread(read_only[1:1001], path),
    "async": lambda: (h.async_pread(read_only[3:4000], path), h.wait()),
    "batch": lambda: h.sync_pread_batch([torch.zeros(64, dtype=torch.uint8),
                                         read_only[100:164]], path, [0, 4096]),
    "write_unreadable": lambda: h.sync_pwrite(unreadable[5:105], path + ".out"),
}
for name, call in calls.items():
    try:
        call()
        print(name, "ok")
    except Exception as e:
        print(name, type(e).__name__, e)
out = torch.zeros(100, dtype=torch.uint8)
h.sync_pwrite(read_only[7:107], path + ".copy")  # reading read-only memory is fine
h.sync_pread(out, path + ".copy")
print("copy", "ok" if torch.equal(out, read_only[7:107]) else "wrong bytes")
"""


def test_memory_a_call_cannot_use_raises_value_error_before_any_byte_moves(workdir, backend):
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(8192, seed=4)
    write_file(path, data)
    done = subprocess.run([sys.executable, "-c", MEMORY_CHILD, path, backend],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name in ("aligned", "unaligned", "async", "batch"):
        assert lines[name].startswith("ValueError") and "not writable" in lines[name], lines
    assert "tensor 1" in lines["batch"], lines
    assert lines["write_unreadable"].startswith("ValueError"), lines
    assert "not readable" in lines["write_unreadable"], lines
    assert lines["copy"] == "ok", lines
    assert torch.equal(file_bytes(path), data)  # the read-only mapping was left as it was


SPECIAL_FILES = r"""
import errno, json, os, sys
import nvmeio_torch, nvmeio_torch.safetensors as st
folder = sys.argv[1]
fifo = os.path.join(folder, "model")
os.mkfifo(fifo)  # nobody writes: opening it to read the usual way waits forever
index = os.path.join(folder, "model.safetensors.index.json")
with open(index, "w") as f:
    json.dump({"weight_map": {"x": "model"}}, f)
for path in (fifo, "/dev/zero", folder):
    for name, load in (("load", nvmeio_torch.load), ("load_file", st.load_file),
                       ("safe_open", st.safe_open), ("load_files", st.load_files)):
        try:
            load(path)
            print(name, path, "loaded")
        except OSError as e:
            print(name, path, errno.errorcode[e.errno], e.filename == path, e.strerror)
print("index naming a FIFO:", end=" ")
try:
    st.load_files(index)
except OSError as e:
    print(errno.errorcode[e.errno], e.filename == fifo, e.strerror)
"""


def test_a_fifo_a_device_or_a_folder_is_refused_at_once_naming_it(workdir):
    out = subprocess.run([sys.executable, "-c", SPECIAL_FILES, workdir], capture_output=True,
                         text=True, timeout=60, env=os.environ)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 13, out.stdout
    for line in lines[:4]:
        assert line.endswith("EINVAL True a FIFO, not a regular file"), line
    for line in lines[4:8]:
        assert line.endswith("EINVAL True a character device, not a regular file"), line
    for line in lines[8:12]:
        assert line.endswith("EISDIR True a folder, not a regular file"), line
    assert lines[12] == "index naming a FIFO: EINVAL True a FIFO, not a regular file"


def test_a_file_argument_may_be_str_bytes_a_path_object_or_a_descriptor(workdir):
    import pathlib

    path = os.path.join(workdir, "f.bin")
    write_file(path, random_bytes(4096))
    expected = file_bytes(path)
    h = nvmeio_torch.aio_handle()
    fd = os.open(path, os.O_RDONLY)
    try:
        for source in (path, os.fsencode(path), pathlib.Path(path), fd):
            out = torch.zeros(4096, dtype=torch.uint8)
            assert h.sync_pread(out, source, 0) == 1, source
            assert torch.equal(out, expected), source
            outs = [torch.zeros(100, dtype=torch.uint8), torch.zeros(50, dtype=torch.uint8)]
            assert h.sync_pread_batch(outs, source, [0, 1000]) == 1, source
            assert torch.equal(outs[1], expected[1000:1050]), source
    finally:
        os.close(fd)
    for bad in (4.2, None, True, 1 << 40):
        with pytest.raises(TypeError):
            h.sync_pread(torch.zeros(8, dtype=torch.uint8), bad, 0)

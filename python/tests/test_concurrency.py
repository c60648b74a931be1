"""The GIL is released while I/O runs; several handles and threads at once; fork refuses."""

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import nvmeio_torch
from conftest import file_bytes, random_bytes

BIG = 256 << 20  # long enough that a Python thread gets many turns while it moves


SAMPLES = 64  # places in the big file a watching thread looks at


def sampled_bytes(path):
    """The file's first 16 bytes at each of the SAMPLES places."""
    with open(path, "rb") as f:
        out = []
        for i in range(SAMPLES):
            f.seek(i * (BIG // SAMPLES))
            out.append(torch.frombuffer(bytearray(f.read(16)), dtype=torch.uint8))
        return out


def holds_samples(buffer, expected):
    return all(torch.equal(buffer[i * (BIG // SAMPLES):][:16], e) for i, e in enumerate(expected))


def partial_reads_seen(call, buffer, expected, during=None):
    """Runs `call` on this thread while another Python thread watches `buffer` fill; returns
    (result, the partial fills it saw). A fill counts when some but not all of the sampled places
    held the file's bytes in a look that began after `during["on"]` was set (by the call, when
    given; else just before it) and ended before the call returned. A read is partial only while
    it moves, so a fill seen means the watcher ran during the call, which it cannot while the call
    holds the GIL."""
    during = during if during is not None else {"on": False}
    state = {"run": True, "returned": False}
    seen = set()
    places = [i * (BIG // SAMPLES) for i in range(SAMPLES)]

    def watch():
        while state["run"]:
            if not during["on"] or state["returned"]:
                continue
            done = sum(torch.equal(buffer[p:p + 16], e) for p, e in zip(places, expected))
            if 0 < done < SAMPLES and not state["returned"]:
                seen.add(done)

    t = threading.Thread(target=watch)
    t.start()
    try:
        if not during["on"]:
            during["on"] = True
        result = call()
        state["returned"] = True
    finally:
        state["run"] = False
        t.join()
    return result, seen


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or str(tmp_path_factory.mktemp("big"))
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, f"big_{os.getpid()}.bin")
    h = nvmeio_torch.aio_handle(1 << 20, 8, False, True, 2)
    assert h.sync_pwrite(random_bytes(BIG), path) == 1
    yield path, sampled_bytes(path)
    os.unlink(path)


# A few tries: the watching thread may, on a busy machine, not be scheduled during one read; with
# the GIL held it can never see a partial read.
TRIES = 5


@pytest.mark.parametrize("how", ["sync_pread", "wait", "pread"])
def test_another_python_thread_runs_while_a_long_read_moves(big_file, how):
    path, expected = big_file
    # The handle moves 1 block at a time so that the read takes a while whatever the disk.
    h = nvmeio_torch.aio_handle(64 << 10, 1, True, False, 1)
    buffer = h.new_cpu_locked_tensor(BIG, torch.empty(0, dtype=torch.uint8))
    in_wait = None
    if how == "sync_pread":
        call = lambda: h.sync_pread(buffer, path)
    elif how == "pread":
        call = lambda: h.pread(buffer, path, False, False)
    else:
        def call():
            assert h.async_pread(buffer, path) == 0
            # The read already moves: only looks from here on count (one that fits between
            # here and wait() would pass a wait() holding the GIL, but that gap is a few opcodes).
            in_wait["on"] = True
            return h.wait()
    seen = set()
    for _ in range(TRIES):
        buffer.zero_()
        in_wait = {"on": False} if how == "wait" else None
        result, seen = partial_reads_seen(call, buffer, expected, in_wait)
        assert result == 1
        assert holds_samples(buffer, expected)
        if seen:
            break
    assert seen, f"no other Python thread ran during {how} in {TRIES} reads of {BIG} bytes"


def test_destroying_a_handle_with_a_pending_read_releases_the_gil(big_file):
    path, expected = big_file
    buffer = torch.empty(BIG, dtype=torch.uint8)
    seen = set()
    for _ in range(TRIES):
        buffer.zero_()
        h = nvmeio_torch.aio_handle(64 << 10, 1, True, False, 1)
        assert h.async_pread(buffer, path) == 0
        destroying = {"on": False}

        def destroy():
            nonlocal h
            destroying["on"] = True
            del h

        _, seen = partial_reads_seen(destroy, buffer, expected, destroying)
        assert holds_samples(buffer, expected)  # the destructor let the read finish first
        if seen:
            break
    assert seen, f"no other Python thread ran while {TRIES} handles were destroyed"


def test_several_handles_from_several_threads_at_once(workdir, backend):
    errors = []

    def worker(index):
        try:
            h = nvmeio_torch.aio_handle(64 << 10, 8, index % 2 == 0, True, 1 + index % 3,
                                        backend=backend)
            for round in range(10):
                data = random_bytes(100000 + 4097 * index + round, seed=index * 100 + round)
                path = os.path.join(workdir, f"t{index}_{round}.bin")
                assert h.async_pwrite(data, path) == 0
                assert h.wait() == 1
                back = torch.zeros_like(data)
                assert h.sync_pread(back, path) == 1
                assert torch.equal(back, data)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_one_handle_shared_by_threads_counts_each_callers_requests(workdir):
    h = nvmeio_torch.aio_handle(64 << 10, 8, False, True, 2)
    errors = []
    data = random_bytes(300000)

    def worker(index):
        try:
            for round in range(20):
                path = os.path.join(workdir, f"s{index}_{round % 3}.bin")
                assert h.sync_pwrite(data, path) == 1
                back = torch.zeros_like(data)
                assert h.sync_pread(back, path) == 1
                assert torch.equal(back, data)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_tensors_dropped_by_python_while_pending_stay_alive_until_wait(workdir):
    h = nvmeio_torch.aio_handle(64 << 10, 4, False, True, 2)
    data = random_bytes(4 << 20)
    path = os.path.join(workdir, "f.bin")
    for _ in range(5):
        assert h.async_pwrite(data.clone(), path) == 0  # the only reference is the handle's
        import gc
        gc.collect()
        assert h.wait() == 1
        assert torch.equal(file_bytes(path), data)


def test_a_handle_used_in_a_child_after_fork_refuses_clearly(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(10000)
    assert h.sync_pwrite(data, path) == 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, never raise
        os.close(read)
        try:
            outcomes = []
            for call in (lambda: h.sync_pread(torch.zeros(10, dtype=torch.uint8), path),
                         lambda: h.async_pwrite(data, path), h.wait):
                try:
                    call()
                    outcomes.append("ran")
                except RuntimeError as e:
                    outcomes.append("fork" if "after fork" in str(e) else "other")
                except BaseException:
                    outcomes.append("other")
            fresh = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
            back = torch.zeros_like(data)
            outcomes.append("fresh" if fresh.sync_pread(back, path) == 1 and torch.equal(back, data)
                            else "bad")
            del fresh
        finally:
            os.write(write, ",".join(outcomes).encode())
            os._exit(0)  # destroys nothing; the inherited handle is abandoned
    os.close(write)
    _, status = os.waitpid(pid, 0)
    report = os.read(read, 1000).decode()
    os.close(read)
    assert status == 0
    assert report == "fork,fork,fork,fresh"
    assert h.sync_pread(torch.zeros(10, dtype=torch.uint8), path) == 1  # the parent's still works


def test_destroying_an_inherited_handle_in_a_child_is_harmless(workdir):
    code = f"""
import os, torch, nvmeio_torch
h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
h.sync_pwrite(torch.ones(5000, dtype=torch.uint8), {os.path.join(workdir, 'g.bin')!r})
pid = os.fork()
if pid == 0:
    del h          # in the child: must neither hang nor crash
    os._exit(7)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
print("parent", h.wait())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "child 7" in out.stdout and "parent 0" in out.stdout


def test_nvmeio_memory_carries_its_pin_record_and_other_memory_does_not():
    # What lets an io_uring handle pin a locked tensor or a load's arena once: the view of it
    # carries its buffer's pin record (views of any part of it too). torch's memory never does.
    h = nvmeio_torch.aio_handle()
    t = h.new_cpu_locked_tensor(1 << 20, torch.empty(0, dtype=torch.float16))
    arena = nvmeio_torch._C.aligned_tensor(3 << 20)
    assert h._carries_pin_record(t) and h._carries_pin_record(torch.narrow(t, 0, 1024, 1024))
    assert h._carries_pin_record(arena[4096:8192])
    assert not h._carries_pin_record(torch.zeros(10))
    assert not h._carries_pin_record(torch.empty(0, dtype=torch.uint8))
    assert h.free_cpu_locked_tensor(t) is True


def test_locked_tensors_freed_on_other_threads_while_a_handle_reads_keep_exact_bytes(workdir, backend):
    # On io_uring a locked tensor read twice is pinned with the handle's rings; freeing it (here
    # from another thread, as the garbage collector may) lets every ring go of it first, so the
    # next tensor, wherever malloc puts it, gets its own bytes.
    size = 8 << 20
    path = os.path.join(workdir, "pinned.bin")
    expected = random_bytes(size, seed=7)
    h = nvmeio_torch.aio_handle(1 << 20, 8, False, True, 2, backend=backend)
    assert h.sync_pwrite(expected, path) == 1
    doomed = []
    reaper_stop = threading.Event()

    def reaper():
        while not reaper_stop.is_set() or doomed:
            if doomed:
                doomed.pop()  # the last reference: freed on this thread
            else:
                time.sleep(0.0005)

    t = threading.Thread(target=reaper)
    t.start()
    try:
        for round in range(12):
            tensor = h.new_cpu_locked_tensor(size, torch.empty(0, dtype=torch.uint8))
            for read in range(2):
                tensor.zero_()
                assert h.sync_pread(tensor, path) == 1
                assert torch.equal(tensor, expected), f"round {round}, read {read}"
            h.free_cpu_locked_tensor(tensor)
            doomed.append(tensor)
            del tensor
    finally:
        reaper_stop.set()
        t.join()

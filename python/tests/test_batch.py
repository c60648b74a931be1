"""Batches on the handle: many tensors at many offsets of one file in one call (KV blocks)."""

import errno
import gc
import os
import random

import pytest
import torch

import nvmeio_torch
from conftest import file_bytes, random_bytes, write_file


def scattered_layout(count, seed, aligned):
    """`count` blocks of mixed sizes at shuffled, disjoint offsets with gaps between them."""
    rng = random.Random(seed)
    sizes = [rng.choice([1, 100, 4096, 4097, 65536, 3 * 4096 + 5]) for _ in range(count)]
    offsets, position = [], 0
    for size in sizes:
        position += rng.choice([0, 4096, 12288]) if aligned else rng.randrange(0, 9000)
        offsets.append(position)
        position += size
        if aligned:
            position = (position + 4095) // 4096 * 4096
    order = list(range(count))
    rng.shuffle(order)
    return [sizes[i] for i in order], [offsets[i] for i in order], position


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("async_", [False, True])
def test_scattered_blocks_round_trip_exactly(workdir, backend, aligned, async_):
    sizes, offsets, end = scattered_layout(300, seed=len(workdir), aligned=aligned)
    blocks = [random_bytes(n, seed=i) for i, n in enumerate(sizes)]
    path = os.path.join(workdir, "kv.bin")
    write_file(path, torch.zeros(end, dtype=torch.uint8))
    h = nvmeio_torch.aio_handle(1 << 20, 32, False, True, 2, backend=backend)

    if async_:
        assert h.async_pwrite_batch(blocks, path, offsets) == 0
        assert h.wait() == 1
    else:
        assert h.sync_pwrite_batch(blocks, path, offsets) == 1
    on_disk = file_bytes(path)
    assert on_disk.numel() == end  # never truncated
    for block, offset in zip(blocks, offsets):
        assert torch.equal(on_disk[offset:offset + block.numel()], block)

    back = [torch.zeros_like(b) for b in blocks]
    if async_:
        assert h.async_pread_batch(back, path, offsets) == 0
        assert h.wait() == 1
    else:
        assert h.sync_pread_batch(back, path, offsets) == 1
    for block, got in zip(blocks, back):
        assert torch.equal(got, block)


def test_tensors_at_any_memory_address_and_dtype(workdir, backend):
    base = random_bytes(1 << 20, seed=7)
    pieces = [base[1:70001], base[70001:200003].view(torch.uint8), base[300000:300000 + 8 * 999]]
    pieces[2] = pieces[2].view(torch.float64) if pieces[2].data_ptr() % 8 == 0 else pieces[2]
    offsets = [0, 70000, 4096 * 64]
    path = os.path.join(workdir, "any.bin")
    h = nvmeio_torch.aio_handle(4096, 8, False, False, 3, backend=backend)
    assert h.sync_pwrite_batch(pieces, path, offsets) == 1
    back = [torch.empty_like(p) for p in pieces]
    assert h.sync_pread_batch(back, path, offsets) == 1
    for p, b in zip(pieces, back):
        assert torch.equal(p, b)


def test_wait_counts_a_batch_as_one_request(workdir, backend):
    path = os.path.join(workdir, "count.bin")
    write_file(path, random_bytes(1 << 16))
    h = nvmeio_torch.aio_handle(backend=backend)
    a = [torch.empty(4096, dtype=torch.uint8) for _ in range(5)]
    b = torch.empty(4096, dtype=torch.uint8)
    assert h.async_pread_batch(a, path, [i * 4096 for i in range(5)]) == 0
    assert h.async_pread(b, path, 0) == 0
    assert h.async_pread_batch(a[:2], path, [0, 8192]) == 0
    assert h.wait() == 3
    assert h.async_pread(b, path, 0) == 0
    assert h.sync_pread_batch(a, path, [i * 4096 for i in range(5)]) == 2  # waits for both
    assert h.wait() == 0


def test_an_async_batch_keeps_its_tensors_alive(workdir, backend):
    path = os.path.join(workdir, "alive.bin")
    blocks = [random_bytes(1 << 20, seed=i) for i in range(32)]
    expected = torch.cat(blocks)
    h = nvmeio_torch.aio_handle(1 << 16, 2, False, False, 1, backend=backend)
    assert h.async_pwrite_batch(blocks, path, [i << 20 for i in range(32)]) == 0
    del blocks  # the handle's references are the only ones left
    gc.collect()
    junk = [torch.full((1 << 20,), 0xAB, dtype=torch.uint8) for _ in range(32)]
    assert h.wait() == 1
    assert torch.equal(file_bytes(path), expected)
    del junk


def test_a_read_past_the_end_names_the_request_and_the_handle_stays_usable(workdir, backend):
    path = os.path.join(workdir, "short.bin")
    write_file(path, random_bytes(10000))
    h = nvmeio_torch.aio_handle(backend=backend)
    blocks = [torch.empty(4096, dtype=torch.uint8) for _ in range(3)]
    with pytest.raises(OSError) as raised:
        h.sync_pread_batch(blocks, path, [0, 8192, 4096])  # request 1 runs past byte 10000
    assert raised.value.errno == errno.ENODATA
    assert raised.value.filename == path
    assert "batch request 1 of 3" in str(raised.value)
    assert "offset 8192" in str(raised.value)
    assert h.sync_pread_batch(blocks[:1], path, [0]) == 1


def test_bad_arguments_raise_before_any_io(workdir):
    path = os.path.join(workdir, "bad.bin")
    write_file(path, random_bytes(8192))
    h = nvmeio_torch.aio_handle()
    t = torch.empty(4096, dtype=torch.uint8)
    with pytest.raises(ValueError, match="2 tensors but 1 offsets"):
        h.sync_pread_batch([t, t], path, [0])
    with pytest.raises(ValueError, match="tensor 1 is not contiguous"):
        h.sync_pwrite_batch([t, torch.empty(8, 8)[:, 1]], path, [0, 4096])
    with pytest.raises(ValueError, match=r"offsets\[0\] must not be negative"):
        h.sync_pread_batch([t], path, [-1])
    with pytest.raises(TypeError):
        h.sync_pread_batch(t, path, [0])
    with pytest.raises(FileNotFoundError):
        h.sync_pread_batch([t], os.path.join(workdir, "missing"), [0])
    assert file_bytes(path).numel() == 8192


def test_an_empty_batch_is_one_request_that_moves_nothing(workdir):
    path = os.path.join(workdir, "empty.bin")
    write_file(path, random_bytes(100))
    h = nvmeio_torch.aio_handle()
    assert h.sync_pwrite_batch([], path, []) == 1
    assert h.sync_pread_batch([torch.empty(0)], path, [1 << 40]) == 1
    assert file_bytes(path).numel() == 100


def test_aligned_tensor_is_page_aligned_and_owns_its_memory():
    t = nvmeio_torch._C.aligned_tensor(3 * 4096 + 1)
    assert t.dtype == torch.uint8 and t.numel() == 3 * 4096 + 1
    assert t.data_ptr() % 4096 == 0
    view = t[4096:8192].view(torch.float32)
    view.fill_(1.5)
    del t
    gc.collect()
    # Memory freed too early would be handed out again here, and overwritten.
    others = [nvmeio_torch._C.aligned_tensor(3 * 4096 + 1).fill_(0xFF) for _ in range(8)]
    assert float(view.sum()) == 1.5 * 1024  # the memory lives as long as a view of it
    assert all(o.data_ptr() != view.data_ptr() - 4096 for o in others)
    assert nvmeio_torch._C.aligned_tensor(0, lock=True).numel() == 0
    with pytest.raises(ValueError, match="must not be negative"):
        nvmeio_torch._C.aligned_tensor(-1)


def test_a_batch_refused_in_a_child_after_fork_touches_no_file(workdir):
    h = nvmeio_torch.aio_handle()
    path = os.path.join(workdir, "never.bin")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never raise
        outcome = "other"
        try:
            h.sync_pwrite_batch([torch.ones(4096, dtype=torch.uint8)], path, [0])
            outcome = "ran"
        except RuntimeError as e:
            outcome = "fork" if "after fork" in str(e) else "other"
        except BaseException:
            pass
        finally:
            os.write(write, outcome.encode())
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    report = os.read(read, 100).decode()
    os.close(read)
    assert status == 0 and report == "fork"
    assert not os.path.exists(path)  # refused before the file was opened (and created)


def test_overlapping_write_requests_are_refused_and_the_file_is_left_as_it_was(workdir, backend):
    path = os.path.join(workdir, "kv.bin")
    write_file(path, random_bytes(8192))
    before = file_bytes(path)
    h = nvmeio_torch.aio_handle(backend=backend)
    a, b = torch.ones(600, dtype=torch.uint8), torch.full((1000,), 2, dtype=torch.uint8)
    with pytest.raises(ValueError, match="requests 0 .* and 1 .*share bytes"):
        h.sync_pwrite_batch([a, b], path, [0, 0])
    h.async_pwrite_batch([torch.ones(4096, dtype=torch.uint8), b[:10]], path, [0, 512])
    with pytest.raises(ValueError, match="share bytes"):
        h.wait()
    assert torch.equal(file_bytes(path), before)
    # Requests that share a unit but no bytes are written exactly; the handle is still usable.
    assert h.sync_pwrite_batch([a[:100], b[:100]], path, [0, 200]) == 1
    after = before.clone()
    after[:100], after[200:300] = 1, 2
    assert torch.equal(file_bytes(path), after)

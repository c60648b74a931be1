"""DeepSpeed's aio_handle surface: constructor, getters, return values, every read/write method."""

import os

import pytest
import torch

import nvmeio_torch
from conftest import file_bytes, random_bytes, write_file


def test_constructor_takes_deepspeeds_positional_and_keyword_arguments(backend):
    h = nvmeio_torch.aio_handle(4096, 8, True, True, 3, backend=backend)
    assert (h.get_block_size(), h.get_queue_depth(), h.get_single_submit(),
            h.get_overlap_events(), h.get_intra_op_parallelism()) == (4096, 8, True, True, 3)
    assert h.get_alignment() == 3 * 512
    assert h.get_backend() == backend
    k = nvmeio_torch.aio_handle(block_size=8192, queue_depth=4, single_submit=False,
                                overlap_events=True, intra_op_parallelism=2)
    assert (k.get_block_size(), k.get_queue_depth(), k.get_overlap_events()) == (8192, 4, True)


def test_defaults_are_deepspeeds():
    h = nvmeio_torch.aio_handle()
    assert (h.get_block_size(), h.get_queue_depth(), h.get_single_submit(),
            h.get_overlap_events(), h.get_intra_op_parallelism()) == (1 << 20, 128, False, False, 1)
    assert h.get_backend() == "libaio"


@pytest.mark.parametrize("single_submit", [False, True])
@pytest.mark.parametrize("overlap_events", [False, True])
def test_every_method_moves_exact_bytes_and_returns_deepspeeds_codes(
        workdir, backend, single_submit, overlap_events):
    h = nvmeio_torch.aio_handle(4096, 4, single_submit, overlap_events, 2, backend=backend)
    data = random_bytes(3 * 4096 + 17)
    path = os.path.join(workdir, "f.bin")
    back = torch.zeros_like(data)

    assert h.write(data, path, False) == 0
    assert torch.equal(file_bytes(path), data)
    assert h.read(back, path, True) == 0
    assert torch.equal(back, data)

    assert h.sync_pwrite(data, path) == 1
    back.zero_()
    assert h.sync_pread(back, path) == 1
    assert torch.equal(back, data)

    assert h.pwrite(data, path, True, False) == 1
    assert h.pwrite(data, path, False, True) == 0
    assert h.wait() == 1
    back.zero_()
    assert h.pread(back, path, True, False) == 1
    assert torch.equal(back, data)
    back.zero_()
    assert h.pread(back, path, False, True) == 0
    assert h.wait() == 1
    assert torch.equal(back, data)

    assert h.async_pwrite(data, path, 0) == 0
    assert h.async_pwrite(data, path, file_offset=len(data)) == 0
    assert h.wait() == 2
    assert os.path.getsize(path) == 2 * len(data)
    both = torch.zeros(2 * len(data), dtype=torch.uint8)
    assert h.async_pread(both, path, 0) == 0
    assert h.wait() == 1
    assert torch.equal(both, torch.cat([data, data]))


def test_wait_with_nothing_pending_returns_zero():
    h = nvmeio_torch.aio_handle()
    assert h.wait() == 0
    assert h.wait() == 0


def test_synchronous_call_counts_the_async_requests_before_it(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
    data = random_bytes(10000)
    paths = [os.path.join(workdir, f"{i}.bin") for i in range(3)]
    assert h.async_pwrite(data, paths[0]) == 0
    assert h.async_pwrite(data, paths[1]) == 0
    assert h.sync_pwrite(data, paths[2]) == 3  # DeepSpeed: the count of every request waited for
    assert h.wait() == 0
    for p in paths:
        assert torch.equal(file_bytes(p), data)


def test_write_at_an_offset_leaves_the_rest_of_the_file_as_it_was(workdir, backend):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2, backend=backend)
    path = os.path.join(workdir, "f.bin")
    old = random_bytes(100000, seed=1)
    write_file(path, old)
    patch = random_bytes(5000, seed=2)
    assert h.sync_pwrite(patch, path, 8192) == 1
    expected = old.clone()
    expected[8192:8192 + 5000] = patch
    assert torch.equal(file_bytes(path), expected)  # same size, not truncated


def test_module_functions_aio_read_aio_write_and_memcpy(workdir):
    path = os.path.join(workdir, "f.bin")
    data = random_bytes(70001)
    assert nvmeio_torch.aio_write(data, path, 8192, 8, False, True, True) == 0
    assert torch.equal(file_bytes(path), data)
    back = torch.zeros_like(data)
    assert nvmeio_torch.aio_read(back, path, 8192, 8, True, False, True) == 0
    assert torch.equal(back, data)
    dest = torch.zeros(100, dtype=torch.float32)
    src = torch.arange(100, dtype=torch.float32)
    assert nvmeio_torch.deepspeed_memcpy(dest, src) == 0
    assert torch.equal(dest, src)
    with pytest.raises(ValueError, match="deepspeed_memcpy"):
        nvmeio_torch.deepspeed_memcpy(torch.zeros(3), torch.zeros(4))


def test_any_dtype_and_shape_moves_its_bytes(workdir):
    h = nvmeio_torch.aio_handle(4096, 4, False, True, 2)
    path = os.path.join(workdir, "f.bin")
    for t in [torch.randn(33, 7), torch.arange(1001, dtype=torch.int64), torch.randn(5, 3, 2).half(),
              torch.empty(0)]:
        assert h.sync_pwrite(t, path) == 1
        back = torch.empty_like(t)
        assert h.sync_pread(back, path) == 1
        assert torch.equal(back, t)


def test_thousands_of_pending_requests_are_all_counted_and_written(workdir):
    h = nvmeio_torch.aio_handle(4096, 16, False, True, 2)
    path = os.path.join(workdir, "many.bin")
    data = random_bytes(2000 * 1000)
    for i in range(2000):  # 1000-byte requests: none aligned in length, half not in offset
        assert h.async_pwrite(data[i * 1000:(i + 1) * 1000], path, i * 1000) == 0
    assert h.wait() == 2000
    assert torch.equal(file_bytes(path), data)
    assert h.wait() == 0

"""Loaded tensors own their bytes: each one's storage holds exactly its bytes (views of one
arena, with no copy), so saving a loaded tensor saves it alone, and resizing one can never
reach another's bytes, through every reader."""

import os

import pytest
import torch

import nvmeio_torch
import nvmeio_torch.safetensors as st

BIG, SMALL = 1_000_000, 4


def storage_of(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def model():
    g = torch.Generator().manual_seed(3)
    return {"big": torch.randn(BIG, generator=g), "a": torch.randn(SMALL, dtype=torch.float64,
                                                                   generator=g),
            "b": torch.randn(SMALL, dtype=torch.float64, generator=g),
            "half": torch.randn(3, 5, generator=g).half()}


def readers(path):
    """(name, {tensor name: tensor}) of every way nvmeio_torch reads the file."""
    yield "load_file", st.load_file(path)
    yield "load_files", st.load_files([path])
    yield "stream", dict(st.stream(path, max_bytes=16 << 20))
    with st.safe_open(path) as f:
        yield "safe_open.get_tensor", {name: f.get_tensor(name) for name in f.keys()}
        yield "safe_open.get_tensors", f.get_tensors()
        yield "safe_open.get_slice", {name: f.get_slice(name)[:] for name in f.keys()}


@pytest.fixture
def saved(workdir):
    tensors = model()
    path = os.path.join(workdir, "m.safetensors")
    st.save_file(tensors, path)
    return tensors, path


def test_every_safetensors_reader_gives_each_tensor_a_storage_of_its_bytes(saved):
    tensors, path = saved
    for reader, loaded in readers(path):
        for name, t in loaded.items():
            assert torch.equal(t, tensors[name]), (reader, name)
            nbytes = t.numel() * t.element_size()
            assert storage_of(t).nbytes() == nbytes, (reader, name, storage_of(t).nbytes())


def test_saving_a_loaded_tensor_saves_its_bytes_alone(saved, workdir):
    _, path = saved
    for reader, loaded in readers(path):
        alone = os.path.join(workdir, "a_only.pt")
        torch.save(loaded["a"], alone)
        assert os.path.getsize(alone) < 4096, (reader, os.path.getsize(alone))
        assert torch.equal(torch.load(alone), loaded["a"])


def test_a_loaded_tensor_cannot_grow_into_its_neighbour(saved):
    tensors, path = saved
    for reader, loaded in readers(path):
        with pytest.raises(RuntimeError, match="not resizable"):
            loaded["a"].resize_(2 * SMALL)
        with pytest.raises(RuntimeError, match="not resizable"):
            storage_of(loaded["a"]).resize_(0)
        assert torch.equal(loaded["b"], tensors["b"]), reader  # (torch leaves a's sizes grown)


def test_torch_format_loads_give_each_storage_its_record_alone(workdir):
    tensors = model()
    path = os.path.join(workdir, "m.pt")
    nvmeio_torch.save(tensors, path)
    loaded = nvmeio_torch.load(path)
    for name, t in loaded.items():
        assert torch.equal(t, tensors[name])
        assert storage_of(t).nbytes() == t.numel() * t.element_size(), name
    alone = os.path.join(workdir, "a_only.pt")
    torch.save(loaded["a"], alone)
    assert os.path.getsize(alone) < 4096
    with pytest.raises(RuntimeError, match="not resizable"):
        loaded["a"].resize_(2 * SMALL)


def test_own_storage_refuses_bytes_outside_its_tensor():
    arena = nvmeio_torch._C.aligned_tensor(4096)
    piece = nvmeio_torch._C.own_storage(arena, 100, 50)
    assert storage_of(piece).nbytes() == 50 and piece.data_ptr() == arena.data_ptr() + 100
    del arena  # the piece keeps the arena's memory
    piece.fill_(7)
    assert int(piece.sum()) == 350
    arena = nvmeio_torch._C.aligned_tensor(4096)
    for offset, length in ((-1, 10), (0, 4097), (4000, 97), (1 << 62, 1)):
        with pytest.raises(ValueError, match="not within"):
            nvmeio_torch._C.own_storage(arena, offset, length)
    with pytest.raises(ValueError, match="contiguous CPU"):
        nvmeio_torch._C.own_storage(arena.view(64, 64)[:, 0], 0, 1)
    with pytest.raises(ValueError, match="not be resizable"):
        nvmeio_torch._C.own_storage(torch.zeros(100, dtype=torch.uint8), 0, 1)

"""Tensors a saver cannot move are refused, naming them, before anything is written: a tensor
on a device without memory (meta), sparse, nested or quantized ones where only their bytes
would be written. The target file is left as it was."""

import io
import os
import warnings

import pytest
import torch

import nvmeio_torch
import nvmeio_torch.safetensors as st

OLD = b"the old file"


def unmovable():
    with warnings.catch_warnings():  # torch's own: CSR and nested tensors are beta or prototype
        warnings.simplefilter("ignore", UserWarning)
        kinds = {"meta": torch.empty(4, device="meta"),
                 "sparse_coo": torch.eye(3).to_sparse(),
                 "sparse_csr": torch.eye(3).to_sparse_csr(),
                 "sparse_csc": torch.eye(4).to_sparse_csc(),
                 "sparse_bsr": torch.eye(4).to_sparse_bsr((2, 2)),
                 "sparse_bsc": torch.eye(4).to_sparse_bsc((2, 2)),
                 "quantized": torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)}
        try:
            kinds["nested"] = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
        except (AttributeError, RuntimeError):  # a torch without nested tensors
            pass
    return kinds


SAVERS = {
    "safetensors": lambda t, p: st.save_file({"weights": torch.ones(3), "t": t}, p),
    "sync_pwrite": lambda t, p: nvmeio_torch.aio_handle().sync_pwrite(t, p, 0),
    "async_pwrite": lambda t, p: nvmeio_torch.aio_handle().async_pwrite(t, p, 0),
    "batch": lambda t, p: nvmeio_torch.aio_handle().sync_pwrite_batch([torch.ones(3), t], p,
                                                                      [0, 4096]),
}


@pytest.mark.parametrize("saver", sorted(SAVERS))
@pytest.mark.parametrize("kind", sorted(unmovable()))
def test_a_tensor_a_saver_cannot_move_is_refused_and_the_file_left_as_it_was(workdir, saver,
                                                                             kind):
    path = os.path.join(workdir, "target")
    with open(path, "wb") as f:
        f.write(OLD)
    with pytest.raises(ValueError) as raised:
        SAVERS[saver](unmovable()[kind], path)
    message = str(raised.value)
    assert ("'t'" in message or "tensor 1" in message or "buffer" in message), message
    assert open(path, "rb").read() == OLD
    assert sorted(os.listdir(workdir)) == ["target"]  # no temporary left beside it


def test_the_torch_format_saves_what_torch_save_saves(workdir):
    # torch.save keeps sparse, quantized and meta tensors whole (their indices, scales, no
    # bytes for meta): nvmeio_torch.save writes them as torch does, and both loaders agree.
    for kind, t in unmovable().items():
        if kind == "nested":
            continue
        path = os.path.join(workdir, f"{kind}.pt")
        try:
            torch.save({"t": t}, io.BytesIO())
        except Exception:  # torch 1.13 cannot pickle CSC, BSR, BSC: neither can we
            with pytest.raises(Exception):
                nvmeio_torch.save({"t": t}, path)
            continue
        nvmeio_torch.save({"t": t}, path)
        ours = nvmeio_torch.load(path, weights_only=False)["t"]
        theirs = torch.load(path)["t"]
        assert ours.layout == t.layout and ours.device == t.device, kind
        if t.device.type != "meta":
            sparse = t.layout != torch.strided
            assert torch.equal(ours.to_dense() if sparse else
                               ours.dequantize() if t.is_quantized else ours,
                               theirs.to_dense() if sparse else
                               theirs.dequantize() if t.is_quantized else theirs), kind


@pytest.mark.parametrize("kind", sorted(set(unmovable()) - {"quantized"}))
def test_a_dcp_save_refuses_what_it_cannot_move_before_making_a_file(workdir, kind):
    # meta and sparse COO: our writer's ValueError naming the tensor. Nested and compressed
    # sparse layouts: torch's planner fails first (it asks the tensor for sizes or strides).
    # Either way no file is made. Quantized tensors are saved whole, as torch.save saves them
    # (test_the_torch_format_saves_what_torch_save_saves).
    import nvmeio_torch.dcp as ndcp

    save = getattr(ndcp._dcp, "save", None) or ndcp._dcp.save_state_dict  # torch 1.13
    folder = os.path.join(workdir, "ckpt")
    with pytest.raises(ndcp._dcp.CheckpointException) as raised:
        save({"w": torch.ones(3), "t": unmovable()[kind]},
             storage_writer=ndcp.FileSystemWriter(folder), no_dist=True)
    (error, _), = raised.value.failures.values()
    if kind in ("meta", "sparse_coo"):
        assert isinstance(error, ValueError) and str(error).startswith("t: "), error
        assert ("meta" if kind == "meta" else "sparse") in str(error), error
    assert not os.path.exists(folder) or os.listdir(folder) == []

"""What changed between torch 1.13 and 2.x, met by nvmeio_torch's torch format: deprecations
(none set off by our code), add_safe_globals, and torch.load(mmap=True)."""

import os
import pickle
import warnings

import pytest
import torch

import nvmeio_torch
from nvmeio_torch import safetensors as nst


class Custom:
    pass


class ScaledTensor(torch.Tensor):
    pass


def a_state():
    g = torch.Generator().manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.LayerNorm(4))
    return {"model": model.state_dict(), "step": 7, "ints": torch.arange(10),
            "half": torch.randn(5, generator=g).half(), "view": torch.randn(6, generator=g)[2:]}


def test_no_deprecation_warning_comes_from_our_saves_and_loads(workdir):
    # torch 2.x deprecates TypedStorage and warns once a process; made to warn at every use,
    # none of our saves and loads may set off that warning, or any other.
    always = getattr(torch.storage, "_set_always_warn_typed_storage_removal", None)
    state = a_state()
    tensors = {"a": torch.randn(300), "b": torch.arange(7)}
    if always is not None:
        always(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nvmeio_torch.save(state, os.path.join(workdir, "state.pt"))
            nvmeio_torch.load(os.path.join(workdir, "state.pt"))
            nst.save_file(tensors, os.path.join(workdir, "t.safetensors"))
            nst.load_file(os.path.join(workdir, "t.safetensors"))
            with nst.safe_open(os.path.join(workdir, "t.safetensors"), "pt") as f:
                f.get_tensor("a")
    finally:
        if always is not None:
            always(False)
    assert [f"{w.filename}:{w.lineno}: {w.message}" for w in caught] == []


@pytest.mark.skipif(not hasattr(torch.serialization, "safe_globals"),
                    reason=f"torch {torch.__version__} has no safe_globals (2.5+)")
def test_weights_only_admits_what_add_safe_globals_admits(workdir):
    # As torch.load(weights_only=True): a tensor subclass and a plain class load once admitted,
    # by the object or by a name given beside it, and not before nor after.
    path = os.path.join(workdir, "admitted.pt")
    scaled = torch.arange(6.0).as_subclass(ScaledTensor)
    scaled.scale = 2.5
    torch.save({"s": scaled, "c": Custom()}, path)
    with pytest.raises(pickle.UnpicklingError, match=r"ScaledTensor.*add_safe_globals"):
        nvmeio_torch.load(path)
    with torch.serialization.safe_globals([ScaledTensor, (Custom, f"{__name__}.Custom")]):
        ours = nvmeio_torch.load(path)
        theirs = torch.load(path, weights_only=True)
    for loaded in (ours, theirs):
        assert type(loaded["s"]) is ScaledTensor and loaded["s"].scale == 2.5
        assert torch.equal(loaded["s"], scaled) and isinstance(loaded["c"], Custom)
    with pytest.raises(pickle.UnpicklingError):
        nvmeio_torch.load(path)


def test_weights_only_is_the_default_on_every_torch(workdir):
    # torch 2.6 made weights_only=True torch.load's default; nvmeio_torch.load has always had it.
    path = os.path.join(workdir, "custom.pt")
    torch.save({"c": Custom()}, path)
    with pytest.raises(pickle.UnpicklingError, match=r"Custom"):
        nvmeio_torch.load(path)
    assert isinstance(nvmeio_torch.load(path, weights_only=False)["c"], Custom)


@pytest.mark.skipif("mmap" not in torch.load.__code__.co_varnames,
                    reason=f"torch {torch.__version__}'s load has no mmap (2.1+)")
def test_our_files_map_with_torch_load_mmap_and_load_mmap_hands_over(workdir):
    path = os.path.join(workdir, "state.pt")
    state = a_state()
    nvmeio_torch.save(state, path)
    for loaded in (torch.load(path, mmap=True, weights_only=True),
                   nvmeio_torch.load(path, mmap=True)):
        assert loaded["step"] == 7
        for key in ("ints", "half", "view"):
            assert torch.equal(loaded[key], state[key])
        for key, value in state["model"].items():
            assert torch.equal(loaded["model"][key], value)


def test_weights_only_loads_quantized_tensors_as_torch_load_does(workdir):
    path = os.path.join(workdir, "q.pt")
    with warnings.catch_warnings():  # torch 2.x deprecates quantized tensors
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.randn(8), 0.1, 3, torch.qint8)
        torch.save({"q": q}, path)
        ours = nvmeio_torch.load(path)["q"]
    assert ours.is_quantized and ours.q_scale() == q.q_scale()
    assert ours.q_zero_point() == q.q_zero_point() and torch.equal(ours.int_repr(), q.int_repr())

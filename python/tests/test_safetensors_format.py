"""nvmeio_torch.safetensors against an independent writer and reader of the format."""

import json
import os
import struct

import pytest
import torch

import spec_safetensors as spec

st = pytest.importorskip("nvmeio_torch.safetensors")


def check_all(loaded, expected):
    assert sorted(loaded) == sorted(expected)
    for name in expected:
        assert spec.same(loaded[name], expected[name]), name


def test_loads_a_file_written_by_an_independent_writer(workdir):
    tensors = spec.zoo()
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build(tensors, metadata={"format": "pt", "é": "ü\n"}))
    check_all(st.load_file(path), tensors)
    with st.safe_open(path, framework="pt") as f:
        assert f.keys() == sorted(tensors)
        assert f.metadata() == {"format": "pt", "é": "ü\n"}
        for name in tensors:
            assert spec.same(f.get_tensor(name), tensors[name]), name


def test_loaded_tensors_own_exactly_their_bytes_of_one_arena(workdir):
    # No copy (the storages lie side by side in one arena), but a storage per tensor holding
    # its bytes alone: saving one tensor saves it alone, resize_ cannot reach a neighbour.
    tensors = {"a": torch.randn(1000), "b": torch.randn(333).half(), "c": torch.arange(7)}
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build(tensors))
    loaded = st.load_file(path)
    starts = sorted(t.data_ptr() for t in loaded.values())
    assert starts[-1] - starts[0] < 8192
    for name, t in loaded.items():
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        assert storage.data_ptr() == t.data_ptr(), name
        assert storage.nbytes() == t.numel() * t.element_size(), name


def test_loads_tensors_in_any_order_with_offsets_off_their_element_size(workdir):
    # A writer that neither sorts by width nor aligns: a 1-byte tensor first shifts the rest.
    tensors = {"odd": torch.arange(3, dtype=torch.uint8), "f64": torch.randn(5, dtype=torch.float64),
               "i32": torch.arange(9, dtype=torch.int32), "bf16": torch.randn(4).bfloat16()}
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build(tensors, order=["odd", "f64", "bf16", "i32"]))
    check_all(st.load_file(path), tensors)


def test_loads_a_header_that_is_not_compact_or_padded(workdir):
    tensors = {"x": torch.arange(5, dtype=torch.int64), "y": torch.ones(2, 2)}
    path = os.path.join(workdir, "m.safetensors")
    header = {"x": {"data_offsets": [0, 40], "shape": [5], "dtype": "I64"},
              "y": {"shape": [2, 2], "dtype": "F32", "data_offsets": [40, 56], "extra": 1}}
    data = spec.tensor_bytes(tensors["x"]) + spec.tensor_bytes(tensors["y"])
    spec.write(path, spec.from_header(header, data, pad=False, separators=(", ", ": ")))
    check_all(st.load_file(path), tensors)


def test_loads_a_file_of_no_tensors(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({}, metadata={"a": "b"}))
    assert st.load_file(path) == {}
    with st.safe_open(path) as f:
        assert f.keys() == [] and f.metadata() == {"a": "b"}


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt", "z": "1", "a": "\u0001\"\\"}])
def test_save_file_writes_what_the_package_writes(workdir, metadata):
    tensors = spec.zoo(seed=3)
    path = os.path.join(workdir, "m.safetensors")
    st.save_file(tensors, path, metadata=metadata)
    with open(path, "rb") as f:
        assert f.read() == spec.build(tensors, metadata=metadata)
    loaded, read_metadata = spec.read(path)
    check_all(loaded, tensors)
    assert read_metadata == metadata


def test_save_file_makes_non_contiguous_tensors_contiguous(workdir):
    base = torch.randn(6, 8)
    tensors = {"t": base.t(), "strided": torch.arange(40)[::3], "conj": torch.randn(3, dtype=torch.complex64).conj()}
    path = os.path.join(workdir, "m.safetensors")
    st.save_file(tensors, path)
    loaded, _ = spec.read(path)
    for name, tensor in tensors.items():
        assert torch.equal(loaded[name], tensor.resolve_conj().contiguous()), name
    check_all(st.load_file(path), {k: v.resolve_conj().contiguous() for k, v in tensors.items()})


def test_save_file_refuses_tensors_that_share_memory(workdir):
    base = torch.randn(10)
    path = os.path.join(workdir, "m.safetensors")
    with pytest.raises(ValueError, match="'a'.*'b'|'b'.*'a'"):
        st.save_file({"a": base, "b": base[2:5]}, path)
    with pytest.raises(ValueError, match="share memory"):
        st.save_file({"a": base.view(2, 5), "b": base.view(2, 5).t()}, path)
    assert not os.path.exists(path)
    # Disjoint pieces of one storage are separate tensors, as the package has it.
    st.save_file({"a": base[:5], "b": base[5:]}, path)
    check_all(st.load_file(path), {"a": base[:5], "b": base[5:]})


@pytest.mark.parametrize("bad, message", [
    ({"x": [1, 2]}, "not a torch.Tensor"),
    ({1: torch.ones(1)}, "names must be str"),
    ({"__metadata__": torch.ones(1)}, "format's own key"),
    ({"x": torch.ones(2, dtype=torch.complex128)}, "cannot hold"),
    ({"x": torch.ones(2).to_sparse()}, "dense"),
])
def test_save_file_refuses_what_the_format_cannot_hold(workdir, bad, message):
    path = os.path.join(workdir, "m.safetensors")
    with pytest.raises(ValueError, match=message):
        st.save_file(bad, path)
    with pytest.raises(ValueError, match="metadata"):
        st.save_file({"x": torch.ones(1)}, path, metadata={"k": 1})
    assert not os.path.exists(path)


def test_save_file_replaces_the_file_whole_or_leaves_it(workdir):
    path = os.path.join(workdir, "m.safetensors")
    st.save_file({"old": torch.ones(4)}, path)
    before = open(path, "rb").read()
    with pytest.raises(ValueError):
        st.save_file({"new": torch.ones(4), "bad": "x"}, path)
    assert open(path, "rb").read() == before
    st.save_file({"new": torch.zeros(3)}, path)
    check_all(st.load_file(path), {"new": torch.zeros(3)})
    assert os.listdir(workdir) == ["m.safetensors"]


def test_get_slice_reads_the_rows_asked_for(workdir):
    tensors = {"w": torch.arange(6 * 5 * 4, dtype=torch.float32).reshape(6, 5, 4),
               "b": torch.arange(9, dtype=torch.int16), "s": torch.tensor(7)}
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build(tensors))
    w = tensors["w"]
    with st.safe_open(path) as f:
        sl = f.get_slice("w")
        assert sl.get_shape() == [6, 5, 4] and sl.get_dtype() == "F32"
        for index in [slice(1, 4), (slice(None), slice(0, 2)), 3, -1, (2, 1), (slice(0, 6, 2), 0),
                      slice(4, 2), (Ellipsis, 1), slice(None), (slice(-2, None), slice(1, 3))]:
            got = sl[index]
            assert torch.equal(got, w[index]), index
            assert got.is_contiguous()
        assert torch.equal(f.get_slice("b")[2:7], tensors["b"][2:7])
        assert torch.equal(f.get_slice("s")[()], tensors["s"])
        with pytest.raises(IndexError):
            sl[6]


def test_safe_open_refuses_unknown_names_a_closed_file_and_other_frameworks(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({"a": torch.ones(2)}))
    with st.safe_open(path) as f:
        with pytest.raises(ValueError, match="'nope'"):
            f.get_tensor("nope")
    with pytest.raises(ValueError, match="closed"):
        f.keys()
    with pytest.raises(ValueError, match="framework"):
        st.safe_open(path, framework="flax")


def test_safe_open_reads_the_file_it_opened_when_another_replaces_it(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({"a": torch.ones(2)}))
    with st.safe_open(path) as f:
        other = os.path.join(workdir, "other")
        spec.write(other, spec.build({"a": torch.zeros(2)}))
        os.replace(other, path)
        assert torch.equal(f.get_tensor("a"), torch.ones(2))


def test_safe_open_notices_its_file_written_in_place(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({"a": torch.ones(2)}))
    with st.safe_open(path) as f:
        with open(path, "ab") as appended:
            appended.write(b"x" * 10)
        with pytest.raises(OSError, match="changed") as raised:
            f.get_tensor("a")
        assert raised.value.filename == path


def test_a_slice_of_a_closed_safe_open_refuses_to_read(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({"a": torch.ones(4, 2)}))
    with st.safe_open(path) as f:
        part = f.get_slice("a")
        assert torch.equal(part[1:3], torch.ones(2, 2))
    decoy = os.open(path, os.O_RDONLY)  # may take the closed descriptor's number
    try:
        with pytest.raises(st.SafetensorError, match="closed"):
            part[0:2]
    finally:
        os.close(decoy)


@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"),
                    reason=f"torch {torch.__version__} has no float4_e2m1fn_x2 (2.8+)")
def test_f4_holds_two_values_a_torch_element(workdir):
    # The package writes torch.float4_e2m1fn_x2 as F4 with a last dimension of values, twice
    # torch's, and reads it back so; nvmeio_torch does the same both ways.
    packed = torch.arange(24, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).view(3, 8)
    header = {"x": {"dtype": "F4", "shape": [3, 16], "data_offsets": [0, 24]}}
    path = os.path.join(workdir, "f4.safetensors")
    spec.write(path, spec.from_header(header, bytes(range(24))))
    for loaded in (st.load_file(path)["x"], st.safe_open(path, "pt").get_tensor("x")):
        assert loaded.dtype == torch.float4_e2m1fn_x2 and loaded.shape == (3, 8)
        assert torch.equal(loaded.view(torch.uint8), packed.view(torch.uint8))
    with st.safe_open(path, "pt") as f:
        sliced = f.get_slice("x")
        assert sliced.get_shape() == [3, 16]  # the file's units
        assert torch.equal(sliced[1:].view(torch.uint8), packed[1:].view(torch.uint8))
        assert torch.equal(sliced[2, :].view(torch.uint8), packed[2].view(torch.uint8))
        assert sliced[2:1].shape == packed[2:1].shape == (0, 8)  # no rows, torch's columns
        for within in ((0, slice(0, 4)), (slice(None), 3), (Ellipsis,)):  # values or elements?
            with pytest.raises(ValueError, match=r"'x': F4 packs 2 values"):
                sliced[within]
    ours = os.path.join(workdir, "ours.safetensors")
    st.save_file({"x": packed}, ours)
    with open(ours, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        assert json.loads(f.read(length))["x"]["shape"] == [3, 16]
    odd = {"x": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}  # rows of 1.5 bytes
    spec.write(path, spec.from_header(odd, bytes(3)))
    with pytest.raises(ValueError, match=r"'x'.*last dimension must be a multiple of 2"):
        st.load_file(path)

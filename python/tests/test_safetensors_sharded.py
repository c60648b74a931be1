"""Sharded models: load_files and stream (its memory cap, its reads in flight), and the peak
memory of a load, in fresh processes."""

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

import spec_safetensors as spec

st = pytest.importorskip("nvmeio_torch.safetensors")
from nvmeio_torch import _files  # noqa: E402


def make_model(directory, shards=3, layers=4, width=64, seed=0):
    """A sharded model written by the independent writer, with its index; returns the tensors."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(layers * shards):
        tensors[f"layer.{layer}.w"] = torch.randn(width, width, generator=g).bfloat16()
        tensors[f"layer.{layer}.b"] = torch.randn(width, generator=g)
        tensors[f"layer.{layer}.n"] = torch.randint(0, 9, (3,), generator=g)
    weight_map = {}
    names = sorted(tensors, key=lambda n: int(n.split(".")[1]))
    per = len(names) // shards
    for k in range(shards):
        shard = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k * per:(k + 1) * per]}
        spec.write(os.path.join(directory, shard), spec.build(part))
        weight_map.update({n: shard for n in part})
    index = os.path.join(directory, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return tensors, index


def check_all(loaded, expected):
    assert sorted(loaded) == sorted(expected)
    for name in expected:
        assert spec.same(loaded[name], expected[name]), name


def test_load_files_loads_every_shard_of_an_index(workdir):
    tensors, index = make_model(workdir)
    check_all(st.load_files(index), tensors)
    shards = sorted(os.path.join(workdir, f) for f in os.listdir(workdir) if f.endswith("safetensors"))
    check_all(st.load_files(shards), tensors)


def test_a_missing_shard_raises_file_not_found_naming_it_and_the_index(workdir):
    _, index = make_model(workdir)
    shard = os.path.join(workdir, "model-00002-of-00003.safetensors")
    os.remove(shard)
    for load in (st.load_files, lambda i: st.stream(i)):
        with pytest.raises(FileNotFoundError, match="index.json") as raised:
            load(index)
        assert raised.value.filename == shard


def test_a_shard_removed_after_its_header_was_read_still_loads_whole(workdir):
    tensors, index = make_model(workdir)
    headers = st._gather(index)  # headers read, then a shard goes before the data is read
    os.remove(headers[2].path)
    check_all(st._load(headers, torch.device("cpu"), _files.make_handle()), tensors)


def test_a_shard_cut_short_before_its_read_leaves_the_handle_with_nothing_pending(workdir):
    tensors, index = make_model(workdir)
    headers = st._gather(index)  # headers read, then a shard is cut short in place
    os.truncate(headers[2].path, headers[2].data_start + 8)
    handle = _files.make_handle()
    with pytest.raises(OSError) as raised:
        st._load(headers, torch.device("cpu"), handle)
    assert raised.value.errno in (errno.ENODATA, errno.ESTALE)
    assert handle.wait() == 0


def test_index_and_shards_that_disagree_raise_naming_the_tensor(workdir):
    tensors, index = make_model(workdir)
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    moved = dict(weight_map, **{"layer.0.w": "model-00002-of-00003.safetensors"})
    with open(index, "w") as f:
        json.dump({"weight_map": moved}, f)
    with pytest.raises(ValueError, match="00001-of-00003.safetensors: tensor 'layer.0.w'.*not in the index"):
        st.load_files(index)
    extra = dict(weight_map, **{"ghost": "model-00001-of-00003.safetensors"})
    with open(index, "w") as f:
        json.dump({"weight_map": extra}, f)
    with pytest.raises(ValueError, match="'ghost'.*not there"):
        st.load_files(index)
    with open(index, "w") as f:
        json.dump({"weight_map": dict(weight_map, x="../elsewhere.safetensors")}, f)
    with pytest.raises(ValueError, match="beside the index"):
        st.load_files(index)
    with open(index, "w") as f:
        f.write('{"weight_map": {"a": "x", "a": "y"}}')
    with pytest.raises(ValueError, match="twice"):
        st.load_files(index)


def test_a_tensor_in_two_files_raises_naming_both(workdir):
    one, two = os.path.join(workdir, "1.safetensors"), os.path.join(workdir, "2.safetensors")
    spec.write(one, spec.build({"a": torch.ones(2), "b": torch.ones(1)}))
    spec.write(two, spec.build({"b": torch.ones(3)}))
    with pytest.raises(ValueError, match="2.safetensors: tensor 'b': .*1.safetensors"):
        st.load_files([one, two])


def test_stream_yields_every_tensor_exactly_in_file_order(workdir):
    tensors, index = make_model(workdir, width=96)
    seen = {}
    for name, tensor in st.stream(index, max_bytes=48 << 10):
        seen[name] = tensor.clone()
    check_all(seen, tensors)
    expected_order = []
    for shard in sorted(f for f in os.listdir(workdir) if f.endswith(".safetensors")):
        with st.safe_open(os.path.join(workdir, shard)) as f:
            expected_order += f.offset_keys()
    assert list(seen) == expected_order


def test_stream_holds_its_cap_and_reads_ahead_while_the_caller_consumes(workdir):
    tensors, index = make_model(workdir, width=96)  # 18 KiB per weight
    cap = 64 << 10
    events = []
    in_flight_while_consuming = set()
    chunks = set()
    for name, tensor in st.stream(index, max_bytes=cap, observe=events.append):
        assert spec.same(tensor, tensors[name]), name
        chunk = events[-1]["chunk"]
        chunks.add(chunk)
        # Chunks submitted and not yet waited for, while the caller holds this tensor.
        last_wait = max((i for i, e in enumerate(events) if e["event"] == "wait"), default=-1)
        if any(e["event"] == "submit" and e["chunk"] > chunk for e in events[last_wait + 1:]):
            in_flight_while_consuming.add(chunk)
        del tensor
    assert all(e["resident"] <= cap for e in events)
    assert max(e["resident"] for e in events) > cap // 2
    # Every chunk but the last is consumed with a later chunk's read in flight.
    assert len(chunks) > 5
    assert in_flight_while_consuming >= chunks - {max(chunks)}
    assert events[-1]["event"] == "close" and events[-1]["resident"] == 0


def test_stream_reuses_its_arenas_once_the_caller_drops_their_tensors(workdir):
    tensors, index = make_model(workdir, layers=10, width=64)  # 8 KiB weights, 2-3 per chunk
    events = []
    for name, tensor in st.stream(index, max_bytes=64 << 10, observe=events.append):
        assert spec.same(tensor, tensors[name]), name
    submits = [e for e in events if e["event"] == "submit" and e["bytes"]]
    assert len(submits) > 10
    assert sum(e["fresh"] for e in submits) <= 3


def test_stream_tensors_kept_by_the_caller_stay_valid(workdir):
    tensors, index = make_model(workdir, layers=10, width=64)
    kept, sliced, events = {}, {}, []
    for k, (name, tensor) in enumerate(st.stream(index, max_bytes=64 << 10, observe=events.append)):
        if k % 5 == 0:
            kept[name] = tensor
        elif k % 5 == 1:
            sliced[name] = tensor.view(-1)[1:]  # a view alone keeps the chunk from reuse
        del tensor
    assert any(e["event"] == "submit" and e["bytes"] and not e["fresh"] for e in events)
    for name, tensor in kept.items():
        assert spec.same(tensor, tensors[name]), name
    for name, tensor in sliced.items():
        assert spec.same(tensor, tensors[name].view(-1)[1:]), name


def test_stream_reads_tensors_over_half_the_cap_one_at_a_time(workdir):
    path = os.path.join(workdir, "m.safetensors")
    tensors = {f"w{i}": torch.randn(10240) for i in range(4)}  # 40 KiB each
    tensors["small"] = torch.arange(5)
    spec.write(path, spec.build(tensors))
    events, seen = [], {}
    for name, tensor in st.stream(path, max_bytes=64 << 10, observe=events.append):
        seen[name] = tensor
        del tensor
    check_all(seen, tensors)
    assert all(e["resident"] <= 64 << 10 for e in events)


def test_stream_reads_the_shards_it_opened_when_others_replace_them(workdir):
    tensors, index = make_model(workdir)
    it = st.stream(index, max_bytes=32 << 10)
    loaded = dict([next(it)])
    for k in (1, 2, 3):
        shard = os.path.join(workdir, f"model-0000{k}-of-00003.safetensors")
        spec.write(shard + ".new", spec.build({"x": torch.zeros(4)}))
        os.replace(shard + ".new", shard)
    loaded.update(it)
    check_all(loaded, tensors)


def test_stream_notices_a_shard_written_in_place_after_its_header_was_read(workdir):
    _, index = make_model(workdir)
    it = st.stream(index, max_bytes=32 << 10)
    next(it)
    shard = os.path.join(workdir, "model-00003-of-00003.safetensors")
    with open(shard, "ab") as appended:
        appended.write(b"x" * 10)
    with pytest.raises(OSError, match="changed") as raised:
        for _ in it:
            pass
    assert raised.value.filename == shard


def test_stream_refuses_a_tensor_wider_than_the_cap_before_reading(workdir):
    path = os.path.join(workdir, "m.safetensors")
    spec.write(path, spec.build({"small": torch.ones(10), "big": torch.ones(5000)}))
    with pytest.raises(ValueError, match="'big'.*max_bytes=8192"):
        st.stream(path, max_bytes=8192)
    with pytest.raises(ValueError, match="max_bytes"):
        st.stream(path, max_bytes=100)


def test_stream_stopped_early_leaves_no_read_behind(workdir):
    tensors, index = make_model(workdir)
    it = st.stream(index, max_bytes=32 << 10)
    name, tensor = next(it)
    assert spec.same(tensor, tensors[name])
    it.close()
    check_all(st.load_files(index), tensors)


PEAK = textwrap.dedent("""
    import sys, torch
    import nvmeio_torch.safetensors as st
    from nvmeio_torch import _files

    def rss(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024

    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak becomes the present resident size
        return rss("VmRSS:")

    path, cap = sys.argv[1], int(sys.argv[2])
    handle = _files.make_handle()
    before = reset_peak()
    tensors = st.load_file(path, handle=handle)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    print(rss("VmHWM:") - before, total)
    del tensors
    for drop_each in (False, True):  # the loop's variable kept, then dropped as it goes
        before = reset_peak()
        total = 0
        for name, tensor in st.stream(path, max_bytes=cap, handle=handle):
            total += tensor.numel() * tensor.element_size()
            if drop_each:
                del tensor
        print(rss("VmHWM:") - before, total)
        if not drop_each:
            del tensor
""")


@pytest.fixture(scope="module")
def peaks(big_file):
    """(grown, bytes) of a load_file, of a stream under STREAM_CAP whose consumer keeps the
    loop's variable, and of one whose consumer drops each tensor; in one fresh process."""
    out = subprocess.run([sys.executable, "-c", PEAK, big_file, str(STREAM_CAP)], check=True,
                         capture_output=True, text=True, env=os.environ).stdout.split()
    return [(int(out[i]), int(out[i + 1])) for i in range(0, 6, 2)]


STREAM_CAP = 32 << 20


@pytest.fixture(scope="module")
def big_file():
    """192 MiB of tensors, on the test folder's filesystem (O_DIRECT-capable, as workdir's)."""
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="nvmeio_torch_", dir=base)
    path = os.path.join(directory, "big.safetensors")
    tensors = {f"t{i:03d}": torch.full((1 << 19,), i, dtype=torch.int16) for i in range(192)}
    tensors["odd"] = torch.ones(1001, dtype=torch.uint8)
    st.save_file(tensors, path, durable=False)
    del tensors
    yield path
    shutil.rmtree(directory, ignore_errors=True)


def test_peak_memory_of_a_load_is_within_a_tenth_of_the_bytes_loaded(peaks):
    grown, total = peaks[0]
    assert total > 190 << 20
    assert grown <= 1.1 * total, (grown, total)


def test_peak_memory_of_a_stream_stays_under_its_cap(peaks):
    # The consumer keeps the last tensor yielded (the loop's variable): the chunk it pins, the
    # one being consumed and the one in flight, each at most a third of the cap.
    grown, total = peaks[1]
    assert total > 190 << 20
    assert grown <= STREAM_CAP + (1 << 20), (grown, STREAM_CAP)
    # A consumer that drops each tensor leaves only the chunk consumed and the one in flight.
    grown, total = peaks[2]
    assert grown <= STREAM_CAP * 2 // 3 + (1 << 20), (grown, STREAM_CAP)

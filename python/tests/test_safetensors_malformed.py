"""Malformed safetensors files raise ValueError/OSError naming the file and the tensor; random
corruptions either raise or load exactly what an independent reader reads."""

import json
import os
import random
import struct

import pytest
import torch

import spec_safetensors as spec

st = pytest.importorskip("nvmeio_torch.safetensors")
from nvmeio_torch import _files  # noqa: E402

F32_8 = spec.tensor_bytes(torch.arange(8, dtype=torch.float32))  # 32 bytes


def entry(dtype="F32", shape=(8,), offsets=(0, 32)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def raw_header(text, data=b""):
    return struct.pack("<Q", len(text)) + text + data


# (file bytes, what the message must contain: the tensor's name where there is one)
CASES = {
    "empty file": (b"", "fewer than the 8"),
    "header length past the end": (struct.pack("<Q", 1000) + b"{}", "runs past the end"),
    "huge header length": (struct.pack("<Q", 2 ** 63) + b"{}      ", "over the limit"),
    "not JSON": (raw_header(b"{not json}      "), "not JSON"),
    "not UTF-8": (raw_header(b'{"\xff": 1}     '), "not UTF-8"),
    "JSON list": (raw_header(b"[1, 2]  "), "not an object"),
    "trailing junk after JSON": (raw_header(b'{}  \x00\x00\x00\x00'), "not JSON"),
    "unknown dtype": (spec.from_header({"w": entry(dtype="F33")}, F32_8), "'w'.*unknown dtype"),
    "dtype not a string": (spec.from_header({"w": entry(dtype=4)}, F32_8), "'w'.*unknown dtype"),
    "shape with a negative": (spec.from_header({"w": entry(shape=(-8,))}, F32_8), "'w'.*shape"),
    "shape with a float": (spec.from_header({"w": entry(shape=(8.0,))}, F32_8), "'w'.*shape"),
    "shape with a bool": (spec.from_header({"w": entry(shape=(True,), offsets=(0, 4))},
                                           F32_8[:4]), "'w'.*shape"),
    "shape that overflows": (spec.from_header({"w": entry(shape=(2 ** 32, 2 ** 32, 16))}, F32_8),
                             "'w'.*overflows"),
    "shape times dtype overflows": (spec.from_header({"w": entry(shape=(2 ** 62,))}, F32_8),
                                    "'w'.*overflows"),
    "offsets disagree with shape": (spec.from_header({"w": entry(shape=(7,))}, F32_8),
                                    "'w'.*takes 28"),
    "offsets reversed": (spec.from_header({"w": entry(offsets=(32, 0))}, F32_8), "'w'.*begin <= end"),
    "offsets not a pair": (spec.from_header({"w": entry(offsets=(0, 16, 32))}, F32_8), "'w'"),
    "offsets overlap": (spec.from_header({"a": entry(shape=(4,), offsets=(0, 16)),
                                          "b": entry(shape=(4,), offsets=(8, 24))}, F32_8[:24]),
                        "'b'.*overlap tensor 'a'"),
    "same offsets twice": (spec.from_header({"a": entry(), "b": entry()}, F32_8),
                           "overlap tensor"),
    "offsets leave a gap": (spec.from_header({"a": entry(shape=(4,), offsets=(0, 16)),
                                              "b": entry(shape=(2,), offsets=(24, 32))}, F32_8),
                            "'b'.*gap"),
    "offsets run past the data": (spec.from_header({"w": entry()}, F32_8[:20]),
                                  "'w'.*run past the end"),
    "bytes after the last tensor": (spec.from_header({"w": entry()}, F32_8 + b"xx"),
                                    "end at byte 96 but the file has 98"),
    "missing dtype": (spec.from_header({"w": {"shape": [8], "data_offsets": [0, 32]}}, F32_8),
                      "'w'.*no 'dtype'"),
    "missing data_offsets": (spec.from_header({"w": {"shape": [8], "dtype": "F32"}}, F32_8),
                             "'w'.*no 'data_offsets'"),
    "entry not an object": (spec.from_header({"w": [1]}, F32_8), "'w'.*not an object"),
    "duplicate key": (raw_header(b'{"w":' + json.dumps(entry()).encode() + b',"w":'
                                 + json.dumps(entry()).encode() + b'}', F32_8), "'w' appears twice"),
    "metadata not strings": (spec.from_header({"__metadata__": {"a": 1}, "w": entry()}, F32_8),
                             "__metadata__"),
    "sub-byte dtype off a byte": (spec.from_header({"w": entry(dtype="F4", shape=(3,), offsets=(0, 1))},
                                                   F32_8[:1]), "'w'.*byte"),
    "dtype this torch lacks": (spec.from_header({"w": entry(dtype="F8_E4M3", shape=(32,))}, F32_8),
                               "'w'.*F8_E4M3"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file_raises_naming_file_and_tensor(workdir, case):
    content, message = CASES[case]
    if case == "dtype this torch lacks" and hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has float8_e4m3fn")
    path = os.path.join(workdir, "bad.safetensors")
    spec.write(path, content)
    for load in (st.load_file, lambda p: st.safe_open(p).get_tensor("w"),
                 lambda p: list(st.stream([p], max_bytes=1 << 20)), st.load_files):
        with pytest.raises(ValueError, match=message) as raised:
            load(path)
        assert path in str(raised.value)


def test_missing_file_raises_file_not_found(workdir):
    path = os.path.join(workdir, "nope.safetensors")
    with pytest.raises(FileNotFoundError) as raised:
        st.load_file(path)
    assert raised.value.filename == path


CLEAN = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4),
         "b": torch.arange(5, dtype=torch.int64), "c": torch.tensor([1, 0, 1], dtype=torch.bool),
         "d": torch.arange(6, dtype=torch.int16), "e": torch.empty(0, 2)}


def mutate_header(content, rng):
    """A change to the header's meaning, written back as valid JSON: offsets shifted, a dtype or
    shape changed, an entry dropped, or the data made longer or shorter to match."""
    n = struct.unpack("<Q", content[:8])[0]
    header = json.loads(content[8:8 + n])
    data = content[8 + n:]
    name = rng.choice([k for k in header if k != "__metadata__"])
    kind = rng.randrange(5)
    if kind == 0:
        shift = rng.choice([-8, -4, -1, 1, 2, 4, 8])
        header[name]["data_offsets"] = [max(0, x + shift) for x in header[name]["data_offsets"]]
    elif kind == 1:
        header[name]["dtype"] = rng.choice(["F32", "I32", "F16", "BF16", "I64", "U8", "BOOL", "F64"])
    elif kind == 2:
        header[name]["shape"] = list(reversed(header[name]["shape"])) + rng.choice([[], [1], [2]])
    elif kind == 3:
        del header[name]
    else:  # the last tensor moved on by a few bytes, the data grown to match: a gap
        last = max((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][1])
        shift = rng.randrange(1, 9)
        header[last]["data_offsets"] = [x + shift for x in header[last]["data_offsets"]]
        data += bytes(shift)
    return spec.from_header(header, data)


def corrupt(content, rng):
    kind = rng.randrange(9)
    if kind >= 7:
        return mutate_header(content, rng)
    content = bytearray(content)
    n = struct.unpack("<Q", content[:8])[0]
    if kind == 0:  # a byte of the header changed
        content[8 + rng.randrange(n)] = rng.randrange(256)
    elif kind == 1:  # a digit of the header changed
        digits = [i for i in range(8, 8 + n) if chr(content[i]).isdigit()]
        content[rng.choice(digits)] = ord(str(rng.randrange(10)))
    elif kind == 2:  # the header length changed
        content[rng.randrange(8)] = rng.randrange(256)
    elif kind == 3:  # cut short
        del content[rng.randrange(len(content)):]
    elif kind == 4:  # bytes appended
        content += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
    elif kind == 5:  # a byte of the data changed
        content[8 + n + rng.randrange(len(content) - 8 - n)] ^= 1 + rng.randrange(255)
    else:  # a byte inserted in the header
        content.insert(8 + rng.randrange(n), rng.randrange(256))
    return bytes(content)


def test_random_corruptions_raise_or_load_what_an_independent_reader_reads(workdir):
    rng = random.Random(33)
    clean = spec.build(CLEAN, metadata={"k": "v"})
    path = os.path.join(workdir, "fuzz.safetensors")
    handle = _files.make_handle()
    outcomes = {"raised": 0, "loaded": 0}
    for _ in range(500):
        spec.write(path, corrupt(clean, rng))
        try:
            expected, _ = spec.read(path)
        except (ValueError, OverflowError, RecursionError, struct.error):
            expected = None
        try:
            loaded = st.load_file(path, handle=handle)
        except (ValueError, OSError):
            assert expected is None, "nvmeio refused a file the independent reader reads"
            outcomes["raised"] += 1
            continue
        assert expected is not None, "nvmeio loaded a file the independent reader refuses"
        assert sorted(loaded) == sorted(expected)
        for name in expected:
            assert spec.same(loaded[name], expected[name]), name
        outcomes["loaded"] += 1
    assert outcomes["raised"] > 50 and outcomes["loaded"] > 50, outcomes

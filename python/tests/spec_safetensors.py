"""An independent writer and reader of the safetensors format, for the tests: plain struct and
json from the format's description, sharing no code with nvmeio_torch.safetensors."""

import json
import struct

import torch

# Format name -> (torch dtype, bytes per element); rank: the package's writer puts higher first.
TYPES = {
    "F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
    "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1), "C64": (torch.complex64, 8),
}
NAME_OF = {dtype: name for name, (dtype, _) in TYPES.items()}
RANK = ["BOOL", "U8", "I8", "I16", "F16", "BF16", "I32", "F32", "C64", "F64", "I64"]


def tensor_bytes(tensor):
    """A tensor's elements in C order, little-endian, as bytes."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def build(tensors, metadata=None, order=None, pad=True, gap_before=None):
    """File bytes for ``tensors`` (dict name -> tensor). ``order``: names in data order (default:
    the package's: widest dtype first, then name). ``gap_before``: {name: n} puts n bytes of
    zeros before a tensor's data (offsets then count them; used to misalign tensors)."""
    if order is None:
        order = sorted(tensors, key=lambda n: (-RANK.index(NAME_OF[tensors[n].dtype]), n))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name in order:
        data += b"\0" * (gap_before or {}).get(name, 0)
        raw = tensor_bytes(tensors[name])
        header[name] = {"dtype": NAME_OF[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return from_header(header, data, pad=pad)


def from_header(header, data, pad=True, separators=(",", ":")):
    """File bytes from a header object (anything json can write) and the data section."""
    text = json.dumps(header, separators=separators, ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def write(path, content):
    with open(path, "wb") as f:
        f.write(content)


def read(path):
    """(tensors, metadata) of a file, or ValueError for anything the format does not allow."""
    with open(path, "rb") as f:
        content = f.read()
    if len(content) < 8:
        raise ValueError("short file")
    (n,) = struct.unpack("<Q", content[:8])
    if n > 100_000_000 or 8 + n > len(content):
        raise ValueError("bad header length")

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate key")
        return dict(items)

    header = json.loads(content[8:8 + n].decode("utf-8"), object_pairs_hook=pairs)
    if not isinstance(header, dict):
        raise ValueError("header not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (not isinstance(metadata, dict)
                                 or any(not isinstance(v, str) for v in metadata.values())):
        raise ValueError("bad metadata")
    data = content[8 + n:]
    spans, tensors = [], {}

    def count(x):
        return type(x) is int and 0 <= x < 2 ** 64

    for name, info in header.items():
        if not isinstance(info, dict) or info.get("dtype") not in TYPES:
            raise ValueError("bad entry")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(count(d) for d in shape):
            raise ValueError("bad shape")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(count, offsets)):
            raise ValueError("bad offsets")
        dtype, size = TYPES[info["dtype"]]
        elements = 1
        for d in shape:
            elements *= d
        if elements * size >= 2 ** 64 or offsets[1] - offsets[0] != elements * size:
            raise ValueError("size mismatch")
        spans.append((offsets[0], offsets[1]))
        raw = data[offsets[0]:offsets[1]]
        if len(raw) != elements * size:
            raise ValueError("past the end")
        if elements:
            tensors[name] = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
        else:
            tensors[name] = torch.empty(shape, dtype=dtype)
    end = 0
    for begin, stop in sorted(spans):
        if begin != end:
            raise ValueError("gap or overlap")
        end = stop
    if end != len(data):
        raise ValueError("data not covered")
    return tensors, metadata


def same(a, b):
    """Equal dtype, shape and bytes (NaNs included)."""
    return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)


def zoo(seed=0):
    """A dict of tensors of every dtype torch 1.13 and the format share, with 0-d and empty ones."""
    g = torch.Generator().manual_seed(seed)
    tensors = {
        "f64": torch.randn(3, 5, generator=g, dtype=torch.float64),
        "f32": torch.randn(17, 3, generator=g),
        "f16": torch.randn(7, generator=g).half(),
        "bf16": torch.randn(4, 9, generator=g).bfloat16(),
        "i64": torch.randint(-2 ** 40, 2 ** 40, (11,), generator=g),
        "i32": torch.randint(-2 ** 30, 2 ** 30, (2, 3, 4), generator=g, dtype=torch.int32),
        "i16": torch.randint(-2 ** 15, 2 ** 15, (5,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-128, 128, (13,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 256, (3, 3), generator=g, dtype=torch.uint8),
        "bool": torch.randint(0, 2, (6,), generator=g).bool(),
        "c64": torch.randn(4, generator=g, dtype=torch.complex64),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 4),
        "naïve name/with.dots": torch.arange(3, dtype=torch.int16),
    }
    tensors["f32"][0, 0] = float("nan")
    return tensors

"""Files written by other writers, for test_written_elsewhere.py: a checkpoint by torch 2.x's
torch.save and a safetensors file by the safetensors package, of values any torch rebuilds
exactly (built from arange, no random numbers). Run where those writers are installed:

    python3 make.py OUTDIR            # writes torch2_checkpoint.pt and package.safetensors
    python3 make.py --check SCRATCH   # nvmeio_torch writes, torch.load and the package read

--check needs nvmeio_torch on PYTHONPATH; it prints one line per check and exits 1 on a mismatch.
"""

import collections
import os
import sys

import torch

# Element types torch 1.13 (and so every torch nvmeio_torch supports) has, and safetensors too.
DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64)
METADATA = {"format": "pt"}


def ramp(n, dtype, start=0):
    """n exact values of dtype: small integers (halves for floating types); bools True every
    third."""
    values = torch.arange(start, start + n, dtype=torch.int64)
    if dtype == torch.bool:
        return values % 3 == 0
    if dtype.is_complex:
        return torch.complex((values % 64).double() / 2, -(values % 32).double()).to(dtype)
    if dtype.is_floating_point:
        return ((values % 128).double() / 2 - 20).to(dtype)
    return (values % 100 - (0 if dtype == torch.uint8 else 50)).to(dtype)


def tensors():
    """Named tensors for a safetensors file: every dtype, a 0-d one, an empty one, odd sizes."""
    out = {f"layer.{i}.{str(d).split('.')[1]}": ramp(7 * (i + 1), d, i).reshape(i + 1, 7)
           for i, d in enumerate(DTYPES)}
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.empty(0, 3)
    out["odd"] = ramp(1001, torch.int16).reshape(7, 11, 13)
    return out


def checkpoint():
    """A state dict as training code saves it: views sharing a storage, non-contiguous tensors,
    an OrderedDict and plain values torch.load's weights_only mode accepts."""
    base = ramp(48, torch.float32).reshape(6, 8)
    return {
        "model": collections.OrderedDict(tensors()),
        "complex128": ramp(5, torch.complex128),
        "base": base,
        "row": base[2],
        "slice": base[1:4, 2:6],
        "transposed": base.t(),
        "strided": base[::2, ::3],
        "step": 1234,
        "lr": 0.5,
        "name": "make.py",
        "flags": [True, None, (1, 2.0, "three")],
    }


def write(folder):
    import safetensors
    from safetensors.torch import save_file
    torch.save(checkpoint(), os.path.join(folder, "torch2_checkpoint.pt"))
    save_file(tensors(), os.path.join(folder, "package.safetensors"), metadata=METADATA)
    print(f"written by torch {torch.__version__}, safetensors {safetensors.__version__}")


def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and a.stride() == b.stride() and torch.equal(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def storage(t):
    """t's storage, as torch 1.13 and 2.x name it."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def same_tensors(a, b):
    """Equal dicts of named tensors, in whatever order (a safetensors file's order is its own)."""
    return sorted(a) == sorted(b) and all(same(a[k], b[k]) for k in a)


def check(folder):
    """nvmeio_torch writes, torch.load and the safetensors package read; the package's own file
    and nvmeio_torch's, byte for byte."""
    import nvmeio_torch
    import nvmeio_torch.safetensors as nst
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    failures = 0

    def report(name, test):
        nonlocal failures
        try:
            ok, why = bool(test()), ""
        except Exception as e:  # one check's failure must not hide the others'
            ok, why = False, f": {type(e).__name__}: {e}"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}{why}")

    ours = os.path.join(folder, "nvmeio_checkpoint.pt")
    nvmeio_torch.save(checkpoint(), ours)
    report("torch.load (its default weights_only) of nvmeio_torch.save",
           lambda: same(checkpoint(), torch.load(ours)))
    report("torch.load(weights_only=False) of nvmeio_torch.save",
           lambda: same(checkpoint(), torch.load(ours, weights_only=False)))
    report("views still share a storage after torch.load",
           lambda: (lambda c: storage(c["row"]).data_ptr() == storage(c["base"]).data_ptr())(
               torch.load(ours, weights_only=False)))
    theirs = os.path.join(folder, "torch_checkpoint.pt")
    torch.save(checkpoint(), theirs)
    report("nvmeio_torch.load of torch.save", lambda: same(checkpoint(), nvmeio_torch.load(theirs)))
    report("nvmeio_torch.load of torch.save: views share a storage",
           lambda: (lambda c: storage(c["row"]).data_ptr() == storage(c["base"]).data_ptr())(
               nvmeio_torch.load(theirs)))

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    package, mine = (os.path.join(folder, n) for n in ("theirs.safetensors", "ours.safetensors"))
    save_file(tensors(), package, metadata=METADATA)
    nst.save_file(tensors(), mine, metadata=METADATA)
    report("nvmeio_torch.safetensors.save_file bytes == the package's",
           lambda: read(package) == read(mine))
    report("package load_file of nvmeio's file", lambda: same_tensors(tensors(), load_file(mine)))

    def metadata(opener, path):
        with opener(path, framework="pt") as f:
            return f.metadata()
    report("package safe_open metadata of nvmeio's file",
           lambda: metadata(safe_open, mine) == METADATA)
    report("nvmeio load_file of the package's file",
           lambda: same_tensors(tensors(), nst.load_file(package)))
    report("nvmeio safe_open metadata of the package's file",
           lambda: metadata(nst.safe_open, package) == METADATA)
    # Element types newer torches have: nvmeio's reader and the package's agree on them too.
    newer = {name: ramp(24, torch.float32).to(getattr(torch, name)).reshape(4, 6)
             if name.startswith("float8") else ramp(24, getattr(torch, name)).reshape(4, 6)
             for name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
             if isinstance(getattr(torch, name, None), torch.dtype)}
    if newer:
        save_file(newer, package)
        nst.save_file(newer, mine)
        report(f"{', '.join(newer)}: bytes == the package's", lambda: read(package) == read(mine))
        report(f"{', '.join(newer)}: nvmeio reads the package's file",
               lambda: same_tensors(newer, nst.load_file(package)))
    return failures


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        sys.exit(1 if check(sys.argv[2]) else 0)
    write(sys.argv[1])

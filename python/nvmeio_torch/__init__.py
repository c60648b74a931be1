"""nvmeio from PyTorch: a drop-in for DeepSpeed's ``aio_handle``.

Use it directly::

    import nvmeio_torch
    h = nvmeio_torch.aio_handle(block_size=1 << 20, queue_depth=32, intra_op_parallelism=2)
    h.async_pread(tensor, "/nvme/x.pt", 0)
    assert h.wait() == 1

Checkpoints in torch's own format, written and read by nvmeio (``checkpoint.py``)::

    nvmeio_torch.save(model.state_dict(), "/nvme/model.pt")   # torch.load reads it
    state = nvmeio_torch.load("/nvme/model.pt")                # or any torch.save file

or switch a whole DeepSpeed job with one line before it builds its handles::

    import nvmeio_torch; nvmeio_torch.use_in_deepspeed()

What differs from DeepSpeed's handle (README, "From Python / DeepSpeed"): failures raise
(``OSError`` with ``errno`` and ``filename`` for I/O, ``ValueError``/``TypeError`` for bad
arguments, ``RuntimeError`` for a handle used after ``fork``) instead of returning -1 or
aborting; any size and offset; ``wait()`` with nothing pending returns 0; the GIL is released
during every I/O, ``wait()`` and the destructor; writes never truncate a file.
"""

from . import _C
from ._C import aio_handle, aio_read, aio_write, deepspeed_memcpy, pin_handle
from ._staged import release_rings as release_staging_rings
from .checkpoint import load, save

__all__ = ["aio_handle", "aio_read", "aio_write", "deepspeed_memcpy", "pin_handle",
           "use_in_deepspeed", "save", "load", "release_staging_rings"]
__version__ = _C.nvmeio_version
io_uring_available = _C.io_uring_available

_BUILDER_MODULES = ("deepspeed.ops.op_builder", "deepspeed.ops.aio",
                    "deepspeed.ops.op_builder.async_io", "deepspeed.ops.op_builder.pin_memory")
_BUILDERS = ("AsyncIOBuilder", "PinMemoryBuilder")  # DeepSpeed's ops this module stands in for


def use_in_deepspeed():
    """Makes DeepSpeed's ``AsyncIOBuilder().load()`` (and ``PinMemoryBuilder().load()``, whose
    ``pin_handle`` shares the locked tensors) return this module.

    Every such builder class DeepSpeed can hand out (``deepspeed.ops.op_builder``,
    ``deepspeed.ops.aio`` and the accelerator's op builder) gets a ``load`` that returns
    nvmeio_torch and an ``is_compatible`` that says yes, and ``deepspeed.ops.__compatible_ops__``
    marks the ops usable. Call it before DeepSpeed creates its first handle. Returns the classes
    it switched; raises ImportError when DeepSpeed cannot be imported.
    """
    import importlib
    import sys

    classes = []
    for name in _BUILDER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for name in _BUILDERS:
            builder = getattr(module, name, None)
            if builder is not None and builder not in classes:
                classes.append(builder)
    try:
        from deepspeed.accelerator import get_accelerator

        for name in _BUILDERS:
            builder = get_accelerator().get_op_builder(name)
            if builder is not None and builder not in classes:
                classes.append(builder)
    except (ImportError, AttributeError, ValueError):
        pass
    if not classes:
        raise ImportError("nvmeio_torch.use_in_deepspeed: no AsyncIOBuilder found in "
                          + ", ".join(_BUILDER_MODULES))
    this = sys.modules[__name__]
    for builder in classes:
        builder.load = lambda self, verbose=True: this
        builder.is_compatible = lambda self, verbose=False: True
        ops = sys.modules.get("deepspeed.ops")
        compatible = getattr(ops, "__compatible_ops__", None)
        if isinstance(compatible, dict):
            compatible[getattr(builder, "NAME", "async_io")] = True
    return classes

"""deepspeed.ops.op_builder: AsyncIOBuilder and PinMemoryBuilder as DeepSpeed installed without
its ops built.

load() raises, as DeepSpeed's does when it cannot build the op, unless
 - nvmeio_torch.use_in_deepspeed() has switched it (what a user does), or
 - DS_AIO_EXTENSION names a built extension file of DeepSpeed's own async_io op, with its
   pin_memory op beside it as pin_memory_op*.so (for measuring the two side by side); they are
   loaded as DeepSpeed's builders load them (pin_memory first, its symbols global).
"""

import glob
import importlib.machinery
import importlib.util
import os
import sys

import deepspeed.ops


def _load_extension(name, path, global_symbols=False):
    import torch  # noqa: F401  (the extension links against torch's libraries)
    flags = sys.getdlopenflags()
    if global_symbols:
        sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    finally:
        sys.setdlopenflags(flags)
    return module


def _extension(op):
    aio = os.environ.get("DS_AIO_EXTENSION")
    if not aio:
        return None
    if op == "async_io_op":
        return aio
    found = glob.glob(os.path.join(os.path.dirname(aio), op + "*.so"))
    return found[0] if found else None


class OpBuilder:
    NAME = "op"
    _loaded = {}

    def is_compatible(self, verbose=False):
        return False

    def load(self, verbose=True):
        raise RuntimeError(f"DeepSpeed op {self.NAME} is not built on this machine")


class _BuiltOp(OpBuilder):
    OP = ""

    def is_compatible(self, verbose=False):
        return _extension(self.OP) is not None

    def load(self, verbose=True):
        path = _extension(self.OP)
        if path is None:
            return super().load(verbose)
        if self.OP not in OpBuilder._loaded:
            self._prepare()
            OpBuilder._loaded[self.OP] = _load_extension(self.OP, path, self.GLOBAL)
        return OpBuilder._loaded[self.OP]

    def _prepare(self):
        pass


class PinMemoryBuilder(_BuiltOp):
    NAME = "pin_memory"
    OP = "pin_memory_op"
    GLOBAL = True  # async_io finds the process-wide pinned-tensor manager through it


class AsyncIOBuilder(_BuiltOp):
    NAME = "async_io"
    OP = "async_io_op"
    GLOBAL = False

    def _prepare(self):
        PinMemoryBuilder().load()


for _builder in (AsyncIOBuilder, PinMemoryBuilder):
    deepspeed.ops.__compatible_ops__[_builder.NAME] = _builder().is_compatible()


class GDSBuilder(OpBuilder):
    NAME = "gds"


class _Utils:
    """DeepSpeed's utils op: flatten/unflatten and its byte view of tensors."""

    @staticmethod
    def cast_to_byte_tensor(src):
        import torch
        if isinstance(src, (list, tuple)):
            return [_Utils.cast_to_byte_tensor(t) for t in src]
        return src.contiguous().reshape(-1).view(torch.uint8)

    @staticmethod
    def flatten(tensors):
        from torch._utils import _flatten_dense_tensors
        return _flatten_dense_tensors(tensors)

    @staticmethod
    def unflatten(flat, tensors):
        from torch._utils import _unflatten_dense_tensors
        return _unflatten_dense_tensors(flat, tensors)


class UtilsBuilder(OpBuilder):
    NAME = "utils"

    def load(self, verbose=True):
        return _Utils()

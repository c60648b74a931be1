"""deepspeed.ops.op_builder: AsyncIOBuilder and PinMemoryBuilder as DeepSpeed installed without
its ops built.

load() raises, as DeepSpeed's does when it cannot build the op, unless
 - nvmeio_torch.use_in_deepspeed() has switched it (what a user does), or
 - DS_AIO_EXTENSION names a built extension file of DeepSpeed's own handle (for measuring the
   two side by side); it is loaded as DeepSpeed's builder would load it.
"""

import importlib.machinery
import importlib.util
import os

import deepspeed.ops


class OpBuilder:
    NAME = "op"

    def is_compatible(self, verbose=False):
        return False

    def load(self, verbose=True):
        raise RuntimeError(f"DeepSpeed op {self.NAME} is not built on this machine")


class AsyncIOBuilder(OpBuilder):
    NAME = "async_io"
    _loaded = None

    def is_compatible(self, verbose=False):
        return bool(os.environ.get("DS_AIO_EXTENSION"))

    def load(self, verbose=True):
        path = os.environ.get("DS_AIO_EXTENSION")
        if not path:
            return super().load(verbose)
        if AsyncIOBuilder._loaded is None:
            import torch  # noqa: F401  (the extension links against torch's libraries)
            loader = importlib.machinery.ExtensionFileLoader("async_io_op", path)
            spec = importlib.util.spec_from_file_location("async_io_op", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            AsyncIOBuilder._loaded = module
        return AsyncIOBuilder._loaded


if os.environ.get("DS_AIO_EXTENSION"):
    deepspeed.ops.__compatible_ops__[AsyncIOBuilder.NAME] = True


class PinMemoryBuilder(OpBuilder):
    NAME = "pin_memory"


class GDSBuilder(OpBuilder):
    NAME = "gds"


class _Utils:
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

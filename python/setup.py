"""Builds nvmeio_torch from the source tree, offline, against the installed torch:

    pip install --no-build-isolation ./python      # or: cd python && python3 setup.py install

(--no-build-isolation: the build uses the torch and setuptools already installed, and fetches
nothing; pybind11 comes with torch's wheel, or from pybind11-dev beside Debian's torch). The
CMake build (NVMEIO_BUILD_PYTHON) builds the same module; this is for Python users who do not
build nvmeio's C++ side.
"""

import ctypes.util
import os

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
include = os.path.join(here, os.pardir, "include")


def version():
    parts = {}
    with open(os.path.join(include, "nvmeio", "version.hpp")) as f:
        for line in f:
            if line.startswith("#define NVMEIO_VERSION_"):
                _, name, value = line.split()
                parts[name.rsplit("_", 1)[1]] = value
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


# io_uring where liburing is installed; libaio always (nvmeio's default backend).
with_io_uring = (ctypes.util.find_library("uring") is not None
                 and os.path.exists("/usr/include/liburing.h"))
libraries = ["aio"] + (["uring"] if with_io_uring else [])
macros = [("NVMEIO_HAS_IO_URING", "1" if with_io_uring else "0"), ("NVMEIO_NO_XSIMD", None)]
# torch's newest headers refuse anything before C++20; 1.13's were written for C++17.
standard = "-std=c++17" if torch.__version__.startswith("1.") else "-std=c++20"

setup(
    name="nvmeio_torch",
    version=version(),
    description="nvmeio from PyTorch: a drop-in for DeepSpeed's aio_handle",
    packages=["nvmeio_torch"],
    package_dir={"nvmeio_torch": os.path.join(here, "nvmeio_torch")},
    ext_modules=[
        CppExtension(
            name="nvmeio_torch._C",
            sources=[os.path.join("src", "module.cpp")],
            include_dirs=[include, os.path.join(here, "src")],
            define_macros=macros,
            libraries=libraries,
            extra_compile_args=[standard, "-O2"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
)

"""Conan 2 recipe for nvmeio, a header-only C++17 library for O_DIRECT I/O on NVMe.

The package is nvmeio's own `cmake --install` tree: headers, nvmeio-config.cmake (which finds
libaio, xsimd and liburing itself) and nvmeio.pc. Consumers get `nvmeio::nvmeio` from that config,
so it works both when Conan provides the dependencies and when a profile maps them to the system
with [platform_requires] (then Conan generates no CMake files for them). See docs/INSTALL.md,
"Conan 2".
"""

import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load

required_conan_version = ">=2.0"


class NvmeioConan(ConanFile):
    name = "nvmeio"
    description = ("Header-only C++17 library moving large buffers between memory and NVMe "
                   "files at device speed (libaio, O_DIRECT)")
    license = "MIT"
    topics = ("nvme", "o_direct", "libaio", "io_uring", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"with_io_uring": [True, False]}
    default_options = {"with_io_uring": False}
    exports_sources = "include/*", "cmake/*", "CMakeLists.txt", "LICENSE"
    no_copy_source = True
    # The CMake cache variables generate() sets: the library and its install rules, nothing that
    # needs a folder not exported (tests/, examples/, bench/, python/: nvmeio_torch would be on by
    # default where Torch is installed). tests/consumer/recipe_exports.py reads this and
    # exports_sources (both must stay literals) to configure the exported files as Conan does.
    _cmake_cache_variables = {
        "NVMEIO_BUILD_TESTS": False,
        "NVMEIO_BUILD_EXAMPLES": False,
        "NVMEIO_BUILD_BENCH": False,
        "NVMEIO_BUILD_PYTHON": False,
        "NVMEIO_INSTALL": True,
        "NVMEIO_WITH_XSIMD": True,
    }

    def set_version(self):
        # Single source: include/nvmeio/version.hpp, as for CMake.
        text = load(self, os.path.join(self.recipe_folder, "include", "nvmeio", "version.hpp"))
        parts = [re.search(r"#define NVMEIO_VERSION_%s (\d+)" % part, text).group(1)
                 for part in ("MAJOR", "MINOR", "PATCH")]
        self.version = ".".join(parts)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        self.requires("libaio/0.3.113")
        # Tested with 8.1 (Debian bookworm); the upper bound is the newest major nvmeio accepts.
        self.requires("xsimd/[>=8.1.0 <14]")
        if self.options.with_io_uring:
            self.requires("liburing/[>=2.0 <3]")

    def validate(self):
        from conan.errors import ConanInvalidConfiguration
        from conan.tools.build import check_min_cppstd
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("nvmeio needs Linux (libaio, O_DIRECT)")
        check_min_cppstd(self, 17)

    def package_id(self):
        # Headers only: the package differs by option (what the config finds), nothing else.
        self.info.settings.clear()
        self.info.requires.clear()

    def generate(self):
        toolchain = CMakeToolchain(self)
        for name, value in self._cmake_cache_variables.items():
            toolchain.cache_variables[name] = value
        toolchain.cache_variables["NVMEIO_WITH_IO_URING"] = bool(self.options.with_io_uring)
        toolchain.generate()

    def build(self):
        # Configuring checks that the dependencies are found; there is nothing to compile.
        cmake = CMake(self)
        cmake.configure()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.install()

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        # CMake: nvmeio::nvmeio comes from the installed nvmeio-config.cmake, not from CMakeDeps.
        # That config finds libaio (which has no CMake package upstream) and xsimd/liburing itself,
        # so it also works when a profile maps them to the system with [platform_requires], where
        # CMakeDeps would generate nothing for them and a generated target would link nothing.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.set_property("cmake_file_name", "nvmeio")
        self.cpp_info.set_property("cmake_target_name", "nvmeio::nvmeio")
        self.cpp_info.builddirs = [os.path.join("share", "cmake", "nvmeio")]
        # Other generators (PkgConfigDeps, ...): the flags nvmeio.pc gives, spelled out because
        # Conan knows no flags for [platform_requires] packages.
        self.cpp_info.set_property("pkg_config_name", "nvmeio")
        self.cpp_info.system_libs = ["aio", "pthread"]
        if self.options.with_io_uring:
            self.cpp_info.system_libs.append("uring")
            self.cpp_info.defines = ["NVMEIO_HAS_IO_URING=1"]

"""Conan test package for nvmeio: builds the consumer program against the created package."""

import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class NvmeioTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            program = os.path.join(self.cpp.build.bindir, "test_package")
            # The current folder is in the build tree, on a disk that accepts O_DIRECT.
            self.run(f"{program} .", env="conanrun")

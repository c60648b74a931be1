"""Lays out a folder in which DeepSpeed's own test files and tools run against nvmeio_torch:
the stand-ins of standins/ plus DeepSpeed's real deepspeed/nvme and deepspeed/io packages,
copied from a checkout of its public source. Used by run.sh and bench/ds_io_compare.py.

    python3 tree.py DEEPSPEED_SOURCE FOLDER    # prints the test folder it copied
"""

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_FOLDERS = ("tests/unit/v1/nvme", "tests/unit/ops/aio")  # newest layout first
TEST_FILES = ("test_aio.py", "test_aio_gil.py", "test_pinned_manager.py")


def lay_out(deepspeed_source, folder):
    """Fills `folder`; returns the DeepSpeed test folder whose files went to folder/tests."""
    shutil.copytree(os.path.join(HERE, "standins"), folder, dirs_exist_ok=True)
    for package in ("nvme", "io"):
        shutil.copytree(os.path.join(deepspeed_source, "deepspeed", package),
                        os.path.join(folder, "deepspeed", package), dirs_exist_ok=True)
    os.makedirs(os.path.join(folder, "tests"), exist_ok=True)
    for tests in TEST_FOLDERS:
        if os.path.isfile(os.path.join(deepspeed_source, tests, "test_aio.py")):
            for name in TEST_FILES:
                source = os.path.join(deepspeed_source, tests, name)
                if os.path.isfile(source):
                    shutil.copy(source, os.path.join(folder, "tests", name))
            return tests
    raise FileNotFoundError(f"no test_aio.py under {deepspeed_source}/tests/unit")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: tree.py DEEPSPEED_SOURCE FOLDER")
    print(lay_out(sys.argv[1], sys.argv[2]))

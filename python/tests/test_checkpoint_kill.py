"""A checkpoint save killed (SIGKILL) at random points leaves the old file or a new one whole."""

import os
import random
import signal
import subprocess
import sys
import time
import zipfile

import torch

import nvmeio_torch

# Imports torch once, then forks a saver for each "fork" it reads: the saver writes two
# different checkpoints over the same path, one after the other, until it is killed.
ZYGOTE = r"""
import os, sys, torch
torch.set_num_threads(1)  # no OpenMP threads before fork()
import nvmeio_torch
path = sys.argv[1]
versions = [{f"t{i}": torch.full((1 << 18,), float(v * 100 + i)) for i in range(8)}
            for v in (1, 2)]
for line in sys.stdin:
    if line.strip() == "fork":
        pid = os.fork()
        if pid == 0:
            while True:
                for v in versions:
                    nvmeio_torch.save(v, path)
        print(pid, flush=True)
    elif line.strip() == "reap":
        os.waitpid(pid, 0)
        print("reaped", flush=True)
"""


def version_of(path):
    """Which checkpoint is at path: 0 (the old one), 1 or 2; asserts that it is whole."""
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
    loaded = nvmeio_torch.load(path)
    first = float(next(iter(loaded.values()))[0])
    version = 0 if first == -1.0 else int(first) // 100
    expected = ({"old": torch.full((10,), -1.0)} if version == 0 else
                {f"t{i}": torch.full((1 << 18,), float(version * 100 + i)) for i in range(8)})
    assert list(loaded) == list(expected), f"{path}: a mixture of checkpoints"
    for name, tensor in expected.items():
        assert torch.equal(loaded[name], tensor), f"{path}: {name} is torn"
    assert list(torch.load(path)) == list(expected)
    return version


def test_a_killed_save_leaves_the_old_file_or_the_new_one(workdir):
    path = os.path.join(workdir, "ckpt.pt")
    nvmeio_torch.save({"old": torch.full((10,), -1.0)}, path)
    rng = random.Random(1234)
    zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE, path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    seen = []
    try:
        for _ in range(10):
            zygote.stdin.write("fork\n")
            zygote.stdin.flush()
            saver = int(zygote.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.3))  # a random point in the saves' loop
            os.kill(saver, signal.SIGKILL)
            zygote.stdin.write("reap\n")
            zygote.stdin.flush()
            assert zygote.stdout.readline().strip() == "reaped"
            seen.append(version_of(path))
            for name in os.listdir(workdir):  # the temporary a kill leaves behind
                if name != "ckpt.pt":
                    os.remove(os.path.join(workdir, name))
    finally:
        zygote.kill()
        zygote.wait()
    assert len(seen) == 10

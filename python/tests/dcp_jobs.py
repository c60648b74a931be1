"""The ranks of test_dcp.py's distributed jobs (gloo on the CPU), importable by spawned workers.

Each job's state is made from a seed the same way on every rank and in the test, so that any
rank can check any slice it loads bit for bit."""

import os
import signal
import sys
import zlib

import torch
import torch.distributed as dist

import nvmeio_torch.dcp as ndcp  # before torch's DCP: it makes torch 1.13's importable on 3.11
from nvmeio_torch._files import make_handle  # noqa: E402

tdcp = ndcp._dcp
from torch.distributed._shard import sharded_tensor  # noqa: E402 (after the import above)
from torch.distributed._shard.sharding_spec import ChunkShardingSpec  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128]
SHARDED = {"rows": ((7, 5), 0), "columns": ((6, 9), 1), "big": ((1031, 257), 0)}


def full(name, size, dtype=torch.float32, seed=0):
    """The whole tensor `name` of a checkpoint made with `seed`."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{name}/{seed}".encode()))
    raw = torch.randint(0, 1 << 16, size, generator=g, dtype=torch.int64)
    if dtype == torch.bool:
        return raw % 2 == 1
    if dtype.is_complex:
        return torch.complex(raw.double(), -raw.double()).to(dtype)
    return (raw % 200 - 100).to(dtype) if dtype.is_floating_point or dtype.is_signed \
        else (raw % 256).to(dtype)


def expected_state(seed=0):
    """The checkpoint's contents as plain tensors and objects."""
    state = {name: full(name, size, seed=seed) for name, (size, _) in SHARDED.items()}
    for dtype in DTYPES:
        state[f"replicated.{dtype}"] = full(str(dtype), (3, 4), dtype, seed)
    state["scalar"] = full("scalar", (), torch.float64, seed)
    state["empty"] = torch.empty(0, 5)
    state["transposed"] = full("transposed", (4, 6), seed=seed).t()
    state["strided"] = full("strided", (6, 8), torch.int32, seed)[:, ::3]
    # Not a dict: torch 2's planner flattens dicts into keys of their own (object.step ...).
    state["object"] = [1000 + seed, "a", "b", 0.5]
    return state


def sharded(name, world, rank, seed=0, fill=True):
    """`name` as a ShardedTensor over `world` ranks (chunks on its dimension, uneven where the
    size does not divide), with this rank's shards filled from full() or zeroed."""
    size, dim = SHARDED[name]
    spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = sharded_tensor.zeros(spec, *size)
    whole = full(name, size, seed=seed)
    for shard in st.local_shards():
        if fill:
            md = shard.metadata
            part = whole
            for d, (o, n) in enumerate(zip(md.shard_offsets, md.shard_sizes)):
                part = part.narrow(d, o, n)
            shard.tensor.copy_(part)
    return st


def state_for(world, rank, seed=0, fill=True):
    """What a rank holds: the sharded tensors' shards, and the rest whole (filled, or zeros of
    the same shapes for a load)."""
    state = expected_state(seed)
    for name in SHARDED:
        state[name] = sharded(name, world, rank, seed, fill)
    if not fill:
        for key, value in list(state.items()):
            if isinstance(value, torch.Tensor):
                state[key] = torch.zeros_like(value)  # a transposed one stays so
            elif key == "object":
                state[key] = None
    return state


def check(state, seed=0, where=""):
    """Raises AssertionError naming the first item of `state` that differs from the
    checkpoint's contents."""
    expected = expected_state(seed)
    for key, value in state.items():
        if isinstance(value, sharded_tensor.ShardedTensor):
            whole = full(key, SHARDED[key][0], seed=seed)
            for shard in value.local_shards():
                md = shard.metadata
                part = whole
                for d, (o, n) in enumerate(zip(md.shard_offsets, md.shard_sizes)):
                    part = part.narrow(d, o, n)
                assert torch.equal(shard.tensor, part), f"{where}: {key} shard {md} differs"
        elif isinstance(value, torch.Tensor):
            want = expected[key]
            if key in SHARDED:
                want = full(key, SHARDED[key][0], seed=seed)
            assert value.dtype == want.dtype and torch.equal(value, want), \
                f"{where}: {key} differs"
        else:
            assert value == expected[key], f"{where}: {key} is {value!r}"


def o_direct_flags():
    """The flags of this process's descriptors open on .distcp files."""
    flags = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.endswith(".distcp"):
                with open(f"/proc/self/fdinfo/{fd}") as f:
                    line = next(x for x in f if x.startswith("flags:"))
                flags.append(int(line.split()[1], 8))
        except (OSError, StopIteration):
            pass
    return flags


class WatchingHandle:
    """A handle that records, when waited on with a write pending, the flags of the .distcp
    files it holds open."""

    def __init__(self):
        self.handle = make_handle()
        self.seen = []

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def wait(self):
        self.seen += o_direct_flags()
        return self.handle.wait()


class FailingHandle:
    """A handle whose writes fail with EIO."""

    def __getattr__(self, name):
        if "write" in name:
            def fail(*args):
                raise OSError(5, "Input/output error (injected)", args[1])
            return fail
        return getattr(make_handle(), name)


def _join(rank, world, rendezvous):
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world)


def save_and_check(rank, world, rendezvous, folder, results):
    """World 2: saves with nvmeio's writer (watching its descriptors) and torch's, then loads
    each with the other's reader and checks every shard."""
    _join(rank, world, rendezvous)
    state = state_for(world, rank)
    watching = WatchingHandle()
    tdcp.save_state_dict(state, ndcp.FileSystemWriter(os.path.join(folder, "nvmeio"),
                                                      handle=watching))
    tdcp.save_state_dict(state, tdcp.FileSystemWriter(os.path.join(folder, "torch"),
                                                      single_file_per_rank=True))
    for source, reader in (("nvmeio", tdcp.FileSystemReader), ("torch", ndcp.FileSystemReader),
                           ("nvmeio", ndcp.FileSystemReader)):
        loaded = state_for(world, rank, fill=False)
        tdcp.load_state_dict(loaded, reader(os.path.join(folder, source)))
        check(loaded, where=f"rank {rank}: {source}'s checkpoint through {reader.__module__}")
    torch.save(watching.seen, os.path.join(results, f"flags.{rank}"))
    dist.destroy_process_group()


def load_and_check(rank, world, rendezvous, folder, results):
    """Any world: loads both checkpoints with both readers into this world's shards."""
    _join(rank, world, rendezvous)
    for source in ("nvmeio", "torch"):
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            loaded = state_for(world, rank, fill=False)
            tdcp.load_state_dict(loaded, reader(os.path.join(folder, source)))
            check(loaded, where=f"rank {rank} of {world}: {source}'s through {reader.__module__}")
    dist.destroy_process_group()


def fail_on_one_rank(rank, world, rendezvous, folder, results):
    """World 2: rank 1's writes fail. Every rank must get DCP's CheckpointException."""
    _join(rank, world, rendezvous)
    state = state_for(world, rank, seed=1)
    handle = FailingHandle() if rank == 1 else None
    try:
        tdcp.save_state_dict(state, ndcp.FileSystemWriter(folder, handle=handle))
    except tdcp.CheckpointException as error:
        torch.save(sorted(error.failures), os.path.join(results, f"failed.{rank}"))
    dist.destroy_process_group()


def dtensor_job(rank, world, rendezvous, folder, results):
    """torch >= 2.2, world 2: DTensors on a CPU gloo mesh through dcp.save / dcp.load with a
    checkpoint_id (the writer and reader made for another folder, reset to it), read back by
    torch's own reader too, and dcp.async_save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    except ImportError:  # torch < 2.4
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor

    _join(rank, world, rendezvous)
    mesh = init_device_mesh("cpu", (world,))
    whole = {name: full(name, SHARDED[name][0]) for name in SHARDED}

    def state(fill):
        made = {name: distribute_tensor(t if fill else torch.zeros_like(t), mesh,
                                        [Shard(SHARDED[name][1])]) for name, t in whole.items()}
        made["replicated"] = distribute_tensor(full("r", (5, 3)) if fill else
                                               torch.zeros(5, 3), mesh, [Replicate()])
        made["object"] = [7, "x"] if fill else None
        return made

    def check_loaded(loaded, where):
        for name, t in whole.items():
            assert torch.equal(loaded[name].full_tensor(), t), f"{where}: {name}"
        assert torch.equal(loaded["replicated"].full_tensor(), full("r", (5, 3))), where
        assert loaded["object"] == [7, "x"], where

    elsewhere = os.path.join(folder, "not-this-one")
    first = os.path.join(folder, "first")
    dcp.save(state(True), checkpoint_id=first, storage_writer=ndcp.FileSystemWriter(elsewhere))
    for reader in (ndcp.FileSystemReader(elsewhere), None):
        loaded = state(False)
        dcp.load(loaded, checkpoint_id=first, storage_reader=reader)
        check_loaded(loaded, f"dcp.load through {type(reader).__module__}")
    second = os.path.join(folder, "second")
    dcp.async_save(state(True), checkpoint_id=second,
                   storage_writer=ndcp.FileSystemWriter(second)).result()
    loaded = state(False)
    dcp.load(loaded, checkpoint_id=second, storage_reader=ndcp.FileSystemReader(second))
    check_loaded(loaded, "async_save")
    assert not os.path.exists(elsewhere), "the writer wrote where it was made, not reset"
    dist.destroy_process_group()


def save_forever(folder, version):
    """One process, no process group: saves versions `version`, `version` + 1... over one
    checkpoint until killed, printing each version as it starts."""
    while True:
        state = expected_state(version)
        state.update({name: full(name, SHARDED[name][0], seed=version) for name in SHARDED})
        state["padding"] = torch.full((1 << 20,), version, dtype=torch.int64)  # 8 MiB
        print(version, flush=True)
        tdcp.save_state_dict(state, ndcp.FileSystemWriter(folder), no_dist=True)
        version += 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    save_forever(sys.argv[1], int(sys.argv[2]))

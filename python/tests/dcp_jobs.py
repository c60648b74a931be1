"""The ranks of test_dcp.py's distributed jobs (gloo on the CPU), importable by spawned workers.

Each job's state is made from a seed the same way on every rank and in the test, so that any
rank can check any slice it loads bit for bit."""

import dataclasses
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


class Tagged(torch.Tensor):
    """A tensor subclass (as tagged or quantized weights are), admitted to weights_only
    loading only through torch.serialization.add_safe_globals."""


@dataclasses.dataclass
class Settings:
    """A dataclass saved as an object (a BYTE_IO item)."""
    layers: int
    name: str


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


def save(state, writer, **options):
    """DCP's save: ``dcp.save`` where torch has it (>= 2.2; ``save_state_dict`` is deprecated
    there), ``save_state_dict`` on torch 1.13."""
    if hasattr(tdcp, "save"):
        return tdcp.save(state, storage_writer=writer, **options)
    return tdcp.save_state_dict(state, writer, **options)


def load(state, reader, **options):
    """DCP's load: ``dcp.load`` where torch has it, ``load_state_dict`` on torch 1.13."""
    if hasattr(tdcp, "load"):
        return tdcp.load(state, storage_reader=reader, **options)
    return tdcp.load_state_dict(state, reader, **options)


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

    def __init__(self):
        self._real = make_handle()

    def __getattr__(self, name):
        if "write" in name:
            def fail(*args):
                raise OSError(5, "Input/output error (injected)", args[1])
            return fail
        return getattr(self._real, name)


def run_rank(rank, job, *args):
    """Runs job(rank, *args) in a spawned rank, then leaves the process at once, skipping the
    interpreter's teardown (gloo's threads, handles' dispatchers): the rank whose writes fail
    in fail_on_one_rank once died of SIGABRT ("terminate called without an active exception",
    not reproduced in 20 runs since), and the job's outcome is all a test reads."""
    job(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _join(rank, world, rendezvous):
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world)


def save_and_check(rank, world, rendezvous, folder, results):
    """World 2: saves with nvmeio's writer (watching its descriptors) and torch's, then loads
    each with the other's reader and checks every shard."""
    _join(rank, world, rendezvous)
    state = state_for(world, rank)
    watching = WatchingHandle()
    save(state, ndcp.FileSystemWriter(os.path.join(folder, "nvmeio"),
                                                      handle=watching))
    save(state, tdcp.FileSystemWriter(os.path.join(folder, "torch"),
                                                      single_file_per_rank=True))
    for source, reader in (("nvmeio", tdcp.FileSystemReader), ("torch", ndcp.FileSystemReader),
                           ("nvmeio", ndcp.FileSystemReader)):
        loaded = state_for(world, rank, fill=False)
        load(loaded, reader(os.path.join(folder, source)))
        check(loaded, where=f"rank {rank}: {source}'s checkpoint through {reader.__module__}")
    torch.save(watching.seen, os.path.join(results, f"flags.{rank}"))
    dist.destroy_process_group()


def load_and_check(rank, world, rendezvous, folder, results, fsdp2=""):
    """Any world: loads both checkpoints with both readers into this world's shards; and the
    FSDP2 checkpoints in the folder `fsdp2` (when named) into FSDP2 models of this world."""
    _join(rank, world, rendezvous)
    for source in ("nvmeio", "torch"):
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            loaded = state_for(world, rank, fill=False)
            load(loaded, reader(os.path.join(folder, source)))
            check(loaded, where=f"rank {rank} of {world}: {source}'s through {reader.__module__}")
            if fsdp2:
                model = fsdp_model(world, fill=False)
                state = model.state_dict()
                load(state, reader(os.path.join(fsdp2, source)))
                model.load_state_dict(state)
                check_fsdp_state(model.state_dict(), f"rank {rank} of {world}: FSDP2, "
                                 f"{source}'s through {reader.__module__}")
    dist.destroy_process_group()


def fail_on_one_rank(rank, world, rendezvous, folder, results):
    """World 2: rank 1's writes fail. Every rank must get DCP's CheckpointException."""
    _join(rank, world, rendezvous)
    state = state_for(world, rank, seed=1)
    handle = FailingHandle() if rank == 1 else None
    try:
        save(state, ndcp.FileSystemWriter(folder, handle=handle))
    except tdcp.CheckpointException as error:
        torch.save(sorted(error.failures), os.path.join(results, f"failed.{rank}"))
    dist.destroy_process_group()


def _dtensor_api():
    try:
        from torch.distributed import tensor
    except ImportError:  # torch < 2.4
        from torch.distributed import _tensor as tensor
    return tensor


def dtensors_through_checkpoint_id_and_async_save(rank, world, folder):
    """DTensors on a CPU gloo mesh through dcp.save / dcp.load with a checkpoint_id (the
    writer and reader made for another folder, reset to it), read back by torch's own reader
    too, and dcp.async_save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    api = _dtensor_api()

    mesh = init_device_mesh("cpu", (world,))
    whole = {name: full(name, SHARDED[name][0]) for name in SHARDED}

    def state(fill):
        made = {name: api.distribute_tensor(t if fill else torch.zeros_like(t), mesh,
                                            [api.Shard(SHARDED[name][1])])
                for name, t in whole.items()}
        made["replicated"] = api.distribute_tensor(full("r", (5, 3)) if fill else
                                                   torch.zeros(5, 3), mesh, [api.Replicate()])
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


def _rank_state(rank, version):
    """What a rank saves without collectives: its own items, different on each rank."""
    return {"w": full("w", (6, 4), seed=version) + rank, "step": [version, rank]}


def _check_rank_state(loaded, rank, version, where):
    assert torch.equal(loaded["w"], full("w", (6, 4), seed=version) + rank), where
    assert loaded["step"] == [version, rank], f"{where}: {loaded['step']}"


def _load_rank_state(folder, rank, version):
    import torch.distributed.checkpoint as dcp
    for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
        loaded = {"w": torch.zeros(6, 4), "step": None}
        dcp.load(loaded, storage_reader=reader(folder))
        _check_rank_state(loaded, rank, version, f"rank {rank}: {reader.__module__}")


def saves_without_collectives(rank, world, folder):
    """dcp.save(use_collectives=False) over a checkpoint saved with them, twice: each rank its
    own files and __{rank}.metadata, the old .metadata and files gone; each rank loads its own
    through both readers. Then async_save(use_collectives=False) into a new folder."""
    import torch.distributed.checkpoint as dcp
    dcp.save(_rank_state(rank, 1), storage_writer=ndcp.FileSystemWriter(folder))
    for version in (2, 3):
        dcp.save(_rank_state(rank, version), storage_writer=ndcp.FileSystemWriter(folder),
                 use_collectives=False)
        dist.barrier()
        names = sorted(os.listdir(folder))
        assert [n for n in names if n.endswith(".metadata")] == [
            f"__{r}.metadata" for r in range(world)], names
        data = [n for n in names if n.endswith(".distcp")]
        assert sorted(n.split("_")[2] for n in data) == [str(r) for r in range(world)], names
        _load_rank_state(folder, rank, version)
        dist.barrier()
    later = os.path.join(folder, "async")
    dcp.async_save(_rank_state(rank, 4), storage_writer=ndcp.FileSystemWriter(later),
                   use_collectives=False).result()
    dist.barrier()
    assert os.path.exists(os.path.join(later, f"__{rank}.metadata"))
    _load_rank_state(later, rank, 4)


def saves_again_with_a_cached_plan(rank, world, folder):
    """DefaultSavePlanner(enable_plan_caching=True) saves three versions into one folder:
    the plan DCP replays must not name the earlier save's files."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultSavePlanner
    planner = DefaultSavePlanner(enable_plan_caching=True)
    for version in (1, 2, 3):
        state = state_for(world, rank, seed=version)
        dcp.save(state, storage_writer=ndcp.FileSystemWriter(folder), planner=planner)
        dist.barrier()
        names = sorted(os.listdir(folder))
        assert names == [".metadata"] + [f"__{r}_{version - 1}.distcp" for r in range(world)], \
            names
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            loaded = state_for(world, rank, fill=False)
            dcp.load(loaded, storage_reader=reader(folder))
            check(loaded, seed=version, where=f"version {version} through {reader.__module__}")
        dist.barrier()


def staged_pointers(staged):
    """The data pointers of the tensors a staged state dict holds, in its order."""
    api = _dtensor_api()
    found = []
    for value in staged.values():
        if isinstance(value, api.DTensor):
            value = value.to_local()
        if isinstance(value, torch.Tensor):
            found.append(value.data_ptr())
    return found


def async_saves_stage_into_cached_buffers(rank, world, folder):
    """async_save through a writer made with cache_staged_state_dict: the second save stages
    into the first's buffers, and each checkpoint holds its own version."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    api = _dtensor_api()
    mesh = init_device_mesh("cpu", (world,))
    writer = ndcp.FileSystemWriter(folder, cache_staged_state_dict=True)
    state = {"sharded": api.distribute_tensor(full("s", (8, 6)), mesh, [api.Shard(0)]),
             "plain": full("p", (5, 5)), "step": 1}
    pointers = []
    for version in (1, 2):
        dcp.async_save(state, storage_writer=writer).result()
        assert not writer._stage.in_flight, "the save wrote from other memory than the cache"
        pointers.append(staged_pointers(writer._stage.staged))
        loaded = {"sharded": api.distribute_tensor(torch.zeros(8, 6), mesh, [api.Shard(0)]),
                  "plain": torch.zeros(5, 5), "step": None}
        dcp.load(loaded, storage_reader=ndcp.FileSystemReader(folder))
        assert torch.equal(loaded["sharded"].full_tensor(), full("s", (8, 6)) + version - 1)
        assert torch.equal(loaded["plain"], full("p", (5, 5)) + version - 1)
        assert loaded["step"] == version
        state["sharded"].to_local().add_(1)
        state["plain"].add_(1)
        state["step"] += 1
    assert pointers[0] == pointers[1] and len(pointers[0]) == 2, pointers
    writer.close()


class FsdpModel(torch.nn.Module):
    """A small model FSDP2 shards per layer; its parameters filled from full()."""

    def __init__(self, fill=True):
        super().__init__()
        self.first = torch.nn.Linear(16, 33)
        self.second = torch.nn.Linear(33, 8)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                parameter.copy_(full(name, parameter.shape) if fill else
                                torch.zeros_like(parameter))


def fsdp_model(world, fill=True):
    """FsdpModel sharded by FSDP2 (fully_shard) over a CPU mesh of `world` ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    model = FsdpModel(fill)
    fully_shard(model.first, mesh=mesh)
    fully_shard(model.second, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def check_fsdp_state(state, where):
    """Every item of an FSDP2 model's loaded state dict against full() (DTensors gathered)."""
    assert sorted(state) == sorted(dict(FsdpModel(False).named_parameters())), sorted(state)
    for name, value in state.items():
        whole = value.full_tensor() if hasattr(value, "full_tensor") else value
        assert torch.equal(whole, full(name, whole.shape)), f"{where}: {name} differs"


def fsdp2_state_dicts_both_ways(rank, world, folder):
    """An FSDP2 model's state dict saved with nvmeio's writer and torch's, each loaded into a
    fresh sharded model through the other's reader (and nvmeio's own)."""
    import torch.distributed.checkpoint as dcp
    state = fsdp_model(world).state_dict()
    dcp.save(state, storage_writer=ndcp.FileSystemWriter(os.path.join(folder, "nvmeio")))
    dcp.save(state, storage_writer=tdcp.FileSystemWriter(os.path.join(folder, "torch")))
    for source, reader in (("nvmeio", tdcp.FileSystemReader), ("torch", ndcp.FileSystemReader),
                           ("nvmeio", ndcp.FileSystemReader)):
        model = fsdp_model(world, fill=False)
        state = model.state_dict()
        dcp.load(state, storage_reader=reader(os.path.join(folder, source)))
        model.load_state_dict(state)
        check_fsdp_state(model.state_dict(), f"rank {rank}: {source} through {reader.__module__}")


NEWEST_PARTS = [dtensors_through_checkpoint_id_and_async_save, saves_without_collectives,
                saves_again_with_a_cached_plan, async_saves_stage_into_cached_buffers,
                fsdp2_state_dicts_both_ways]


def newest_torch_job(rank, world, rendezvous, folder, results):
    """torch >= 2.2, world 2: each of NEWEST_PARTS in its folder, its outcome written to
    results/<part>.<rank> ("ok", or the traceback), so that one part's failure does not hide
    the others'. A short collective timeout: a rank left waiting by another's failure fails."""
    import datetime
    import traceback
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    for part in NEWEST_PARTS:
        try:
            part(rank, world, os.path.join(folder, part.__name__))
            outcome = "ok"
        except Exception:
            outcome = traceback.format_exc()
        with open(os.path.join(results, f"{part.__name__}.{rank}"), "w") as f:
            f.write(outcome)
    dist.destroy_process_group()


def save_forever(folder, version):
    """One process, no process group: saves versions `version`, `version` + 1... over one
    checkpoint until killed, printing each version as it starts."""
    while True:
        state = expected_state(version)
        state.update({name: full(name, SHARDED[name][0], seed=version) for name in SHARDED})
        state["padding"] = torch.full((1 << 20,), version, dtype=torch.int64)  # 8 MiB
        print(version, flush=True)
        save(state, ndcp.FileSystemWriter(folder), no_dist=True)
        version += 1


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    save_forever(sys.argv[1], int(sys.argv[2]))

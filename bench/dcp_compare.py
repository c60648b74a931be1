#!/usr/bin/env python3
"""A sharded checkpoint through torch.distributed.checkpoint (DCP) at world size 2 (gloo, two
processes): nvmeio_torch.dcp's FileSystemWriter/FileSystemReader against torch's
(sync_files=True, one file per rank; torch 1.13's writer has no thread_count, a newer one is
given --torch-threads), and fio writing and reading the same bytes with O_DIRECT in 2 jobs (what
the device gives two writers).

The state is bench/torch_checkpoint_compare.py's GPT-style state dict, each tensor a
ShardedTensor split in two on its first dimension, so each rank saves half. Each run is a
fresh pair of processes, the page cache dropped before it; within a round each method saves,
then loads (cold) its own checkpoint, which is then removed, the methods in an order shuffled
per round. Seconds are the slower rank's, from a barrier to the end of its save_state_dict or
load_state_dict (the state is built before the clock starts; fio's own runtime); medians over
the rounds and ratios taken within each round.

    bench/dcp_compare.py --folder DIR [--size 2G] [--rounds 5] [--hidden 2048]
        [--build build-test-g++-17] [--fio /usr/bin/fio] [--torch-threads 1]
        [--methods nvmeio nvmeio_1 torch fio]
"""

import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "support"))
from measure import count_arg, drop_caches  # noqa: E402
from torch_checkpoint_compare import fio_run, options, print_table  # noqa: E402 (shared)

GiB = 1 << 30
METHODS = ("nvmeio", "nvmeio_1", "torch", "fio")
WORLD = 2


def rank_main(rank, method, op, folder, size, hidden, threads, rendezvous, out):
    """One rank of a DCP save or load; rank 0 writes {"seconds", "bytes"} to `out`."""
    import torch
    import torch.distributed as dist

    import nvmeio_torch.dcp as ndcp  # first: it makes torch 1.13's DCP importable on 3.11
    from nvmeio_torch._files import make_handle
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    from torch_checkpoint_compare import gpt_shapes

    tdcp = ndcp._dcp
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=WORLD)
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
    state, nbytes = {}, 0
    for i, (name, shape, dtype, n) in enumerate(gpt_shapes(size, hidden)):
        st = sharded_tensor.empty(spec, *shape, dtype=dtype)
        for shard in st.local_shards():
            shard.tensor.fill_(float(i % 1000) if op == "save" else -1.0)
        state[name] = st
        nbytes += n
    if method.startswith("nvmeio"):
        # nvmeio_1: each rank's handle with one worker (the default takes one per CPU, up to 4)
        handle = make_handle(intra_op_parallelism=1) if method == "nvmeio_1" else None
        writer = ndcp.FileSystemWriter(folder, handle=handle)
        reader = ndcp.FileSystemReader(folder, handle=handle)
    else:
        options = {"thread_count": threads} if threads > 1 else {}
        writer = tdcp.FileSystemWriter(folder, single_file_per_rank=True, sync_files=True,
                                       **options)
        reader = tdcp.FileSystemReader(folder)
    dist.barrier()
    start = time.perf_counter()
    if op == "save":
        tdcp.save_state_dict(state, writer)
    else:
        tdcp.load_state_dict(state, reader)
    seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    if op == "load":
        for i, st in enumerate(state.values()):
            for shard in st.local_shards():
                if not bool((shard.tensor == float(i % 1000)).all()):
                    raise SystemExit(f"dcp_compare: rank {rank} read back a shard wrong")
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"seconds": seconds.item(), "bytes": nbytes}, f)
    dist.destroy_process_group()


def run(args, method, op, folder, size):
    start = time.perf_counter()
    if method == "fio":
        os.makedirs(folder, exist_ok=True)
        result = fio_run(args.fio, op, folder, size, jobs=WORLD)
    else:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(os.path.abspath(args.build), "python"), HERE]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        out = os.path.join(args.folder, "result.json")
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--rank-job", method,
                               op, folder, str(size), str(args.hidden), str(args.torch_threads)],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"dcp_compare: {method} {op} failed:\n{done.stderr[-3000:]}")
        with open(out) as f:
            result = json.load(f)
        os.remove(out)
    result["process"] = time.perf_counter() - start
    return result


def rank_job(argv):
    """The two ranks of one run, spawned from this process (`--rank-job method op folder size
    hidden threads`)."""
    import tempfile

    import torch.multiprocessing

    method, op, folder, size, hidden, threads = argv
    out = os.path.join(os.path.dirname(folder), "result.json")
    with tempfile.TemporaryDirectory() as scratch:
        torch.multiprocessing.spawn(
            rank_main, nprocs=WORLD, join=True,
            args=(method, op, folder, int(size), int(hidden), int(threads),
                  os.path.join(scratch, "rendezvous"), out))


def main():
    p = options(__doc__)
    p.add_argument("--torch-threads", type=count_arg, default=1,
                   help="thread_count for torch's writer, where its version has one")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=["nvmeio", "torch", "fio"])
    args = p.parse_args()
    if not {"torch", "fio"} <= set(args.methods) or len(set(args.methods)) != len(args.methods):
        p.error("--methods must name torch and fio (every ratio's references), each once")
    if not drop_caches():
        sys.exit("dcp_compare: cannot drop the page cache (run as root); no cold figures")
    os.makedirs(args.folder, exist_ok=True)
    sys.path.insert(0, HERE)
    from torch_checkpoint_compare import gpt_shapes

    nbytes = sum(n for _, _, _, n in gpt_shapes(args.size, args.hidden))
    rng = random.Random(args.seed)
    runs = []
    for round_ in range(args.rounds):
        order = list(args.methods)
        rng.shuffle(order)
        for method in order:
            folder = os.path.join(args.folder, f"checkpoint.{method}")
            for op in ("save", "load"):
                if not drop_caches():
                    sys.exit("dcp_compare: dropping the page cache failed")
                r = run(args, method, op, folder, nbytes if method == "fio" else args.size)
                r.update(round=round_, method=method, op=op)
                runs.append(r)
                print(json.dumps(r), flush=True)
            subprocess.run(["rm", "-rf", folder], check=True)
    report(args, runs)


def report(args, runs):
    nbytes = runs[0]["bytes"]
    print(f"\ndcp_compare: {nbytes / GiB:.2f} GiB GPT-style state dict in ShardedTensors over "
          f"{WORLD} ranks (hidden {args.hidden}), {args.rounds} rounds, folder {args.folder}")
    print_table(runs, args.methods, f"{WORLD} jobs, 1 MiB blocks")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-job":
        rank_job(sys.argv[2:])
    else:
        main()

"""nvmeio_torch.dcp: torch.distributed.checkpoint's storage, in torch's layout, both ways.

Distributed jobs run on gloo in spawned processes (dcp_jobs.py): a save at world size 2 with
nvmeio's writer and torch's, each loaded with the other's reader at world sizes 1, 2 and 3."""

import errno
import io
import os
import pickle
import random
import select
import signal
import struct
import subprocess
import sys
import tempfile
import zipfile

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch is built without torch.distributed", allow_module_level=True)
ndcp = pytest.importorskip("nvmeio_torch.dcp")
import dcp_jobs  # noqa: E402 (after the skips)
from nvmeio_torch import _torch_zip, _zip  # noqa: E402
from nvmeio_torch._files import make_handle  # noqa: E402

tdcp = ndcp._dcp
HERE = os.path.dirname(os.path.abspath(__file__))


def spawn(job, world, *args):
    """Runs dcp_jobs.<job>(rank, world, rendezvous, *args) on `world` spawned ranks; a rank's
    exception fails the test with its traceback."""
    with tempfile.TemporaryDirectory() as scratch:
        rendezvous = os.path.join(scratch, "rendezvous")
        torch.multiprocessing.spawn(dcp_jobs.run_rank, args=(job, world, rendezvous) + args,
                                    nprocs=world, join=True)


@pytest.fixture(scope="module")
def saved():
    """A folder holding nvmeio/ and torch/, the same world-2 state saved by each writer (and
    each loaded back through the other's reader at world 2), and the O_DIRECT flags seen."""
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nvmeio_dcp_", dir=base) as folder:
        results = os.path.join(folder, "results")
        os.mkdir(results)
        spawn(dcp_jobs.save_and_check, 2, folder, results)
        yield folder, results


def test_two_ranks_save_and_each_reader_loads_the_others_checkpoint(saved):
    folder, _ = saved
    for source in ("nvmeio", "torch"):
        names = sorted(os.listdir(os.path.join(folder, source)))
        assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"], (source, names)


def test_records_and_tensor_data_start_at_4_kib_and_move_with_o_direct(saved):
    folder, results = saved
    metadata = ndcp.FileSystemReader(os.path.join(folder, "nvmeio")).read_metadata()
    tensors = 0
    for index, info in metadata.storage_data.items():
        assert type(info) is ndcp._filesystem._StorageInfo  # torch's own, for torch's reader
        assert info.offset % 4096 == 0, (index, info)
        if index.fqn == "object":
            continue
        path = os.path.join(folder, "nvmeio", info.relative_path)
        with open(path, "rb") as f:
            _, _, data, _, _ = _torch_zip.directory(f.fileno(), path, info.length, info.offset)
            (entry,) = data.values()
            header = os.pread(f.fileno(), _zip.LOCAL_HEADER_SIZE, info.offset + entry.header_offset)
            start = info.offset + _zip.local_data_offset(header, entry.header_offset, path, "")
        assert start % 4096 == 0, (index, start)
        tensors += 1
    assert tensors > 20
    for rank in (0, 1):
        flags = torch.load(os.path.join(results, f"flags.{rank}"))
        assert flags, f"rank {rank}: no .distcp descriptor open while its data was written"
        assert all(f & os.O_DIRECT for f in flags), [oct(f) for f in flags]


@pytest.mark.parametrize("world", [3])
def test_a_world_2_checkpoint_loads_resharded_at_world_3(saved, newest, world):
    """Sharded tensors, and (torch >= 2.6) an FSDP2 model's state dict into FSDP2 at world 3."""
    folder, results = saved
    fsdp2 = "" if newest is None else _part_passed(newest, dcp_jobs.fsdp2_state_dicts_both_ways)
    spawn(dcp_jobs.load_and_check, world, folder, results, fsdp2)


def test_a_world_2_checkpoint_loads_whole_in_one_process(saved):
    folder, _ = saved
    for source in ("nvmeio", "torch"):
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            state = dcp_jobs.expected_state()
            loaded = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None
                      for k, v in state.items()}
            loaded.update({name: torch.zeros(size) for name, (size, _) in dcp_jobs.SHARDED.items()})
            dcp_jobs.load(loaded, reader(os.path.join(folder, source)), no_dist=True)
            dcp_jobs.check(loaded, where=f"{source} through {reader.__module__}")


def test_a_failed_write_on_one_rank_fails_every_rank_and_writes_no_metadata(workdir):
    results = os.path.join(workdir, "results")
    folder = os.path.join(workdir, "checkpoint")
    os.mkdir(results)
    spawn(dcp_jobs.fail_on_one_rank, 2, folder, results)
    for rank in (0, 1):
        failed = os.path.join(results, f"failed.{rank}")
        assert os.path.exists(failed), f"rank {rank} got no CheckpointException"
        assert 1 in torch.load(failed)
    assert not os.path.exists(os.path.join(folder, ".metadata"))


def _save(state, folder, **options):
    dcp_jobs.save(state, ndcp.FileSystemWriter(folder, **options), no_dist=True)


def _load(folder, reader=ndcp.FileSystemReader):
    loaded = {"w": torch.zeros(300, 100), "step": None}
    dcp_jobs.load(loaded, reader(folder), no_dist=True)
    return loaded


def test_overwriting_writes_new_names_and_removes_the_old_files_after_the_commit(workdir):
    _save({"w": torch.full((300, 100), 1.0), "step": 1}, workdir)
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_0.distcp"]
    dcp_jobs.save({"w": torch.full((300, 100), 2.0), "step": 2},
                         tdcp.FileSystemWriter(workdir, single_file_per_rank=True), no_dist=True)
    _save({"w": torch.full((300, 100), 3.0), "step": 3}, workdir)  # over torch's files
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_1.distcp"]
    for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
        loaded = _load(workdir, reader)
        assert loaded["step"] == 3 and torch.equal(loaded["w"], torch.full((300, 100), 3.0))


def test_overwrite_false_refuses_a_folder_holding_a_checkpoint(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir)
    with pytest.raises(tdcp.CheckpointException) as raised:
        _save({"w": torch.zeros(300, 100), "step": 2}, workdir, overwrite=False)
    (error, _), = raised.value.failures.values()
    assert isinstance(error, FileExistsError) and error.filename.endswith(".metadata")
    assert _load(workdir)["step"] == 1


def test_one_file_per_item_when_asked(workdir):
    _save({"w": torch.ones(300, 100), "step": 1, "b": torch.arange(5)}, workdir,
          single_file_per_rank=False)
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_0.distcp", "__0_1.distcp",
                                           "__0_2.distcp"]
    assert _load(workdir, tdcp.FileSystemReader)["step"] == 1


def test_a_truncated_data_file_raises_naming_it(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir)
    path = os.path.join(workdir, "__0_0.distcp")
    os.truncate(path, 4096)
    with pytest.raises(tdcp.CheckpointException) as raised:
        _load(workdir)
    (error, _), = raised.value.failures.values()
    assert isinstance(error, ValueError), error  # the record's directory, at its end, is cut
    assert "__0_0.distcp (the record of" in str(error) and "at offset 0)" in str(error), error


class _Spy:
    """A handle that records each batch it is given: (method, data pointers, offsets)."""

    def __init__(self):
        self.handle = make_handle()
        self.calls = []

    def __getattr__(self, name):
        method = getattr(self.handle, name)
        if not name.endswith("_batch"):
            return method

        def spy(tensors, path, offsets):
            self.calls.append((name, [t.data_ptr() for t in tensors], list(offsets)))
            return method(tensors, path, offsets)
        return spy


def test_a_commit_that_fails_leaves_the_old_checkpoint_and_its_files(workdir, monkeypatch):
    _save({"w": torch.full((300, 100), 1.0), "step": 1}, workdir)

    def refuse(*args, **kwargs):
        raise OSError(errno.EIO, "rename refused (injected)", args[0])
    monkeypatch.setattr(os, "rename", refuse)  # .metadata's rename: the commit
    with pytest.raises(tdcp.CheckpointException):
        _save({"w": torch.full((300, 100), 2.0), "step": 2}, workdir)
    monkeypatch.undo()
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_0.distcp", "__0_1.distcp"]
    for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
        loaded = _load(workdir, reader)
        assert loaded["step"] == 1 and torch.equal(loaded["w"], torch.full((300, 100), 1.0))
    _save({"w": torch.full((300, 100), 3.0), "step": 3}, workdir)  # clears both
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_2.distcp"]


def test_files_that_appear_after_planning_are_left_to_their_own_save(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir)
    writer = ndcp.FileSystemWriter(workdir)
    write_data = writer.write_data

    def with_another_save_running(plan, planner):
        open(os.path.join(workdir, "__0_9.distcp"), "wb").close()  # that save's, in flight
        return write_data(plan, planner)
    writer.write_data = with_another_save_running
    dcp_jobs.save({"w": torch.zeros(300, 100), "step": 2}, writer, no_dist=True)
    assert sorted(os.listdir(workdir)) == [".metadata", "__0_1.distcp", "__0_9.distcp"]
    assert _load(workdir)["step"] == 2


def test_whole_records_are_read_straight_into_their_destinations(workdir):
    w = torch.arange(300 * 100, dtype=torch.float32).reshape(300, 100)
    _save({"w": w, "step": 1}, workdir)
    for target, straight in ((torch.zeros(300, 100), True), (torch.zeros(100, 300).t(), False)):
        spy = _Spy()
        loaded = {"w": target, "step": None}
        dcp_jobs.load(loaded, ndcp.FileSystemReader(workdir, handle=spy), no_dist=True)
        assert torch.equal(loaded["w"], w)
        (name, pointers, _), = spy.calls
        assert (target.data_ptr() in pointers) == straight, (target.stride(), pointers)


def test_copies_are_written_in_batches_of_per_thread_copy_ahead_and_trimmed(workdir):
    rows = torch.arange(3 * 4096, dtype=torch.float32).reshape(3, 4096)
    state = {f"row{i}": rows[i] for i in range(3)}  # views of a larger storage: cloned to save
    for ahead, batches in ((0, 3), (10_000_000, 1)):
        spy = _Spy()
        _save(state, workdir, per_thread_copy_ahead=ahead, handle=spy)
        assert sum(name == "async_pwrite_batch" for name, _, _ in spy.calls) == batches, ahead
        loaded = {f"row{i}": torch.zeros(4096) for i in range(3)}
        dcp_jobs.load(loaded, tdcp.FileSystemReader(workdir), no_dist=True)
        assert all(torch.equal(loaded[f"row{i}"], rows[i]) for i in range(3))
    metadata = ndcp.FileSystemReader(workdir).read_metadata()
    assert all(info.length < rows.numel() * 4 for info in metadata.storage_data.values())


def test_without_sync_files_a_checkpoint_still_loads(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir, sync_files=False)
    assert _load(workdir, tdcp.FileSystemReader)["step"] == 1


def test_a_garbage_metadata_file_raises_naming_it(workdir):
    with open(os.path.join(workdir, ".metadata"), "wb") as f:
        f.write(b"not a pickle")
    with pytest.raises(ValueError, match=r"\.metadata: not a checkpoint's metadata"):
        ndcp.FileSystemReader(workdir).read_metadata()


def test_a_fifo_in_place_of_the_metadata_or_a_data_file_raises_and_does_not_hang(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir)
    data = os.path.join(workdir, "__0_0.distcp")
    os.unlink(data)
    os.mkfifo(data)
    with pytest.raises(tdcp.CheckpointException) as raised:
        _load(workdir)
    (error, _), = raised.value.failures.values()
    assert isinstance(error, OSError) and error.errno == errno.EINVAL, error
    os.unlink(os.path.join(workdir, ".metadata"))
    os.mkfifo(os.path.join(workdir, ".metadata"))
    with pytest.raises(OSError) as raised:
        ndcp.FileSystemReader(workdir).read_metadata()
    assert raised.value.errno == errno.EINVAL and raised.value.filename.endswith(".metadata")


def test_a_record_whose_header_points_past_its_data_raises(workdir):
    _save({"w": torch.ones(300, 100), "step": 1}, workdir)
    metadata = ndcp.FileSystemReader(workdir).read_metadata()
    (info,) = [i for k, i in metadata.storage_data.items() if k.fqn == "w"]
    path = os.path.join(workdir, info.relative_path)
    with open(path, "r+b") as f:
        _, _, data, _, _ = _torch_zip.directory(f.fileno(), path, info.length, info.offset)
        (entry,) = data.values()
        at = info.offset + entry.header_offset + 28  # the local header's extra field length
        extra = int.from_bytes(os.pread(f.fileno(), 2, at), "little")
        os.pwrite(f.fileno(), (extra + 8).to_bytes(2, "little"), at)
    with pytest.raises(tdcp.CheckpointException) as raised:
        _load(workdir)
    (error, _), = raised.value.failures.values()
    assert isinstance(error, ValueError) and f"at offset {info.offset}" in str(error), error
    assert "overlaps" in str(error), error


def test_a_save_killed_at_random_points_leaves_the_old_checkpoint_or_the_new_one(workdir):
    """A process saves versions n, n + 1... over one folder and is killed (SIGKILL) at a random
    moment; the folder must load, whole, as the version being saved or the one before it, with
    both readers. Eight kills, at points spread over the saves (each takes tens of ms)."""
    rng = random.Random(45)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + [p for p in sys.path if p]))
    loaded_versions = []
    start = 1
    for round in range(8):
        child = subprocess.Popen([sys.executable, os.path.join(HERE, "dcp_jobs.py"), workdir,
                                  str(start)], stdout=subprocess.PIPE, env=environment)
        # The first round waits for a whole checkpoint (its second save started).
        until = start + (1 if round == 0 else rng.randrange(2))
        while int(_line_within(child, 120)) < until:
            pass
        try:
            child.wait(timeout=rng.uniform(0, 0.15))
        except subprocess.TimeoutExpired:
            pass
        child.send_signal(signal.SIGKILL)
        child.wait()
        started = [int(line) for line in child.stdout.read().split()] or [until]
        child.stdout.close()
        last = max(until, started[-1])
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            version = _load_version(workdir, reader)
            assert version in (last, last - 1), (round, version, last)
        loaded_versions.append(version)
        start = version + 1  # so that "the one before" the first save is the one loaded
    assert len(set(loaded_versions)) > 1, loaded_versions


def _line_within(child, seconds):
    """The child's next line, or a failure (not a hang) when none comes in time."""
    if not select.select([child.stdout], [], [], seconds)[0]:
        child.kill()
        pytest.fail(f"the saving process printed nothing for {seconds} s")
    return child.stdout.readline()


def _load_version(folder, reader):
    """Loads the killed saver's folder; checks every item against the version its object
    names, and returns that version."""
    loaded = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None
              for k, v in dcp_jobs.expected_state().items()}
    loaded.update({name: torch.zeros(size) for name, (size, _) in dcp_jobs.SHARDED.items()})
    loaded["padding"] = torch.zeros(1 << 20, dtype=torch.int64)
    dcp_jobs.load(loaded, reader(folder), no_dist=True)
    version = loaded.pop("object")[0] - 1000
    padding = loaded.pop("padding")
    dcp_jobs.check(loaded, seed=version, where=f"version {version} through {reader.__module__}")
    assert torch.equal(padding, torch.full((1 << 20,), version)), version
    return version


NEWEST = hasattr(tdcp, "async_save") and "use_collectives" in __import__("inspect").signature(
    tdcp.save).parameters
NEEDS_NEWEST = pytest.mark.skipif(
    not NEWEST, reason=f"needs dcp.save(use_collectives=), async_save, DTensor and FSDP2 "
                       f"(torch >= 2.6); this torch {torch.__version__} lacks them")


@pytest.fixture(scope="module")
def newest():
    """World 2 on torch >= 2.6: the parts of dcp_jobs.newest_torch_job, each in a folder of
    its own, and each rank's outcome of each part; None on an older torch."""
    if not NEWEST:
        yield None
        return
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nvmeio_dcp_", dir=base) as folder:
        results = os.path.join(folder, "results")
        os.mkdir(results)
        spawn(dcp_jobs.newest_torch_job, 2, folder, results)
        yield folder, results


def _part_passed(newest, part):
    folder, results = newest
    for rank in (0, 1):
        with open(os.path.join(results, f"{part.__name__}.{rank}")) as f:
            outcome = f.read()
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
    return os.path.join(folder, part.__name__)


@NEEDS_NEWEST
def test_torch_2_dtensors_through_checkpoint_id_and_async_save(newest):
    _part_passed(newest, dcp_jobs.dtensors_through_checkpoint_id_and_async_save)


@NEEDS_NEWEST
def test_saves_without_collectives_write_each_ranks_files_and_metadata(newest):
    folder = _part_passed(newest, dcp_jobs.saves_without_collectives)
    assert not os.path.exists(os.path.join(folder, ".metadata"))
    for rank in (0, 1):
        metadata = ndcp.FileSystemReader(folder).read_metadata(rank=rank)
        assert {index.fqn for index in metadata.storage_data} >= {"w"}
        assert all(info.relative_path.startswith(f"__{rank}_")
                   for info in metadata.storage_data.values()), metadata.storage_data
    loaded = {"w": torch.zeros(6, 4), "step": None}  # in one process: rank 0's own metadata
    dcp_jobs.load(loaded, ndcp.FileSystemReader(folder), no_dist=True)
    dcp_jobs._check_rank_state(loaded, 0, 3, "no_dist")


@NEEDS_NEWEST
def test_a_cached_save_plan_saves_again_into_the_same_folder(newest):
    _part_passed(newest, dcp_jobs.saves_again_with_a_cached_plan)


@NEEDS_NEWEST
def test_async_save_stages_into_the_buffers_of_the_save_before(newest):
    _part_passed(newest, dcp_jobs.async_saves_stage_into_cached_buffers)


@NEEDS_NEWEST
def test_fsdp2_state_dicts_move_both_ways_between_the_writers_and_readers(newest):
    _part_passed(newest, dcp_jobs.fsdp2_state_dicts_both_ways)


@NEEDS_NEWEST
def test_an_fsdp2_checkpoint_of_world_2_loads_whole_in_one_process(newest):
    folder = _part_passed(newest, dcp_jobs.fsdp2_state_dicts_both_ways)
    for source in ("nvmeio", "torch"):
        for reader in (ndcp.FileSystemReader, tdcp.FileSystemReader):
            state = dict(dcp_jobs.FsdpModel(fill=False).state_dict())
            dcp_jobs.load(state, reader(os.path.join(folder, source)), no_dist=True)
            dcp_jobs.check_fsdp_state(state, f"{source} through {reader.__module__}")


def test_a_used_writer_and_reader_pickle_without_their_handles(workdir):
    """torch's async_save may send the writer to another process."""

    def load_with(reader):
        loaded = {"w": torch.zeros(300, 100), "step": None}
        dcp_jobs.load(loaded, reader, no_dist=True)
        return loaded["step"]

    writer, reader = ndcp.FileSystemWriter(workdir), ndcp.FileSystemReader(workdir)
    dcp_jobs.save({"w": torch.ones(300, 100), "step": 1}, writer, no_dist=True)
    assert load_with(reader) == 1
    writer, reader = pickle.loads(pickle.dumps(writer)), pickle.loads(pickle.dumps(reader))
    dcp_jobs.save({"w": torch.ones(300, 100), "step": 2}, writer, no_dist=True)
    assert load_with(reader) == 2
    with pytest.raises(TypeError):
        pickle.dumps(ndcp.FileSystemWriter(workdir, handle=make_handle()))


# ---------------------------------------------------------------------------------------------
# torch 2.x's arguments, metadata and formats, in one process

def _torch_signature(cls):
    import inspect
    return [p for p in inspect.signature(cls).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


@pytest.mark.parametrize("torch_class,ours", [("FileSystemWriter", ndcp.FileSystemWriter),
                                              ("FileSystemReader", ndcp.FileSystemReader)])
def test_every_argument_of_torchs_class_is_taken_by_name_and_position(workdir, torch_class, ours):
    """Each argument of this torch's FileSystemWriter/Reader, with its default, by keyword and
    in its place; an unknown keyword is a ValueError naming it, never a TypeError."""
    parameters = _torch_signature(getattr(tdcp, torch_class))
    values = [workdir] + [p.default for p in parameters[1:]]
    by_position = ours(*values)
    assert by_position.path == by_position.checkpoint_id
    assert os.fspath(by_position.checkpoint_id) == workdir
    by_name = ours(**{p.name: v for p, v in zip(parameters, values)})
    for p in parameters[1:]:
        if hasattr(by_name, p.name):
            assert getattr(by_name, p.name) == getattr(by_position, p.name), p.name
    with pytest.raises(ValueError, match="no option 'not_an_option'"):
        ours(workdir, not_an_option=1)


def test_stream_transform_arguments_of_a_wrong_kind_are_refused_naming_them(workdir):
    with pytest.raises(ValueError, match="_extensions takes torch's StreamTransformExtension"):
        ndcp.FileSystemWriter(workdir, _extensions=[object()])
    with pytest.raises(ValueError, match="_extension_registry takes torch's ExtensionRegistry"):
        ndcp.FileSystemReader(workdir, _extension_registry=object())


@pytest.mark.skipif(not hasattr(ndcp._filesystem, "SerializationFormat"),
                    reason=f"serialization_format is torch >= 2.7's; {torch.__version__} lacks it")
def test_a_serialization_format_other_than_torch_save_is_refused_naming_it(workdir):
    formats = ndcp._filesystem.SerializationFormat
    ndcp.FileSystemWriter(workdir, serialization_format=formats.TORCH_SAVE)
    with pytest.raises(ValueError, match="serialization_format=.*SAFETENSORS"):
        ndcp.FileSystemWriter(workdir, serialization_format=formats.SAFETENSORS)


@pytest.mark.skipif(not hasattr(ndcp._metadata, "StorageMeta") or
                    not hasattr(ndcp._metadata.Metadata, "version"),
                    reason=f"Metadata.version and StorageMeta are torch 2's; {torch.__version__} "
                           "lacks them")
def test_metadata_names_the_format_version_the_folder_and_the_save(workdir):
    writer = ndcp.FileSystemWriter(workdir)
    dcp_jobs.save({"w": torch.ones(3)}, writer, no_dist=True)
    first = ndcp.FileSystemReader(workdir).read_metadata()
    assert first.version == ndcp._filesystem.CURRENT_DCP_VERSION
    assert os.fspath(first.storage_meta.checkpoint_id) == workdir
    # A new save_id where a save names its checkpoint (the writer is reset), as torch's
    tdcp.save({"w": torch.ones(3)}, checkpoint_id=workdir, storage_writer=writer, no_dist=True)
    second = tdcp.FileSystemReader(workdir).read_metadata()
    assert second.storage_meta.save_id and second.storage_meta.save_id != first.storage_meta.save_id
    assert second.storage_meta.load_id  # torch's reader sets it, as nvmeio's does
    assert ndcp.FileSystemReader(workdir).read_metadata().storage_meta.load_id


def _zlib_extension():
    """A stream transform of torch's kind (zlib): what a compressed checkpoint looks like to
    a reader, whether or not zstandard is installed."""
    import zlib

    extension = pytest.importorskip(tdcp.__name__ + "._extension",
                                    reason=f"stream transforms are torch >= 2.7's; "
                                           f"{torch.__version__} lacks them")

    class Zlib(extension.StreamTransformExtension):
        @staticmethod
        def registry_name():
            return "test.zlib"

        @staticmethod
        def from_descriptor(version):
            return Zlib()

        def get_descriptor(self):
            return "test.zlib/1"

        def transform_to(self, output):
            class Writer(io.RawIOBase):
                def __init__(self):
                    self.compressor = zlib.compressobj()

                def writable(self):
                    return True

                def write(self, data):
                    output.write(self.compressor.compress(bytes(data)))
                    return len(data)

                def close(self):
                    if not self.closed:
                        output.write(self.compressor.flush())
                        output.close()
                    super().close()
            return Writer()

        def transform_from(self, input):
            return io.BytesIO(zlib.decompress(input.read()))

    registry = extension.ExtensionRegistry()
    registry.register(Zlib)
    return extension, Zlib, registry


def test_compressed_records_of_torchs_writer_load_through_nvmeios_reader(workdir):
    extension, Zlib, registry = _zlib_extension()
    state = {"w": torch.arange(300 * 100, dtype=torch.float32).reshape(300, 100), "step": 7}
    for writer, reader in ((tdcp.FileSystemWriter, ndcp.FileSystemReader),
                           (ndcp.FileSystemWriter, tdcp.FileSystemReader),
                           (ndcp.FileSystemWriter, ndcp.FileSystemReader)):
        folder = os.path.join(workdir, f"{writer.__module__}")
        dcp_jobs.save(state, writer(folder, _extensions=[Zlib()]), no_dist=True)
        metadata = ndcp.FileSystemReader(folder).read_metadata()
        assert all(info.transform_descriptors == ["test.zlib/1"]
                   for info in metadata.storage_data.values()), metadata.storage_data
        loaded = {"w": torch.zeros(300, 100), "step": None}
        dcp_jobs.load(loaded, reader(folder, _extension_registry=registry), no_dist=True)
        assert loaded["step"] == 7 and torch.equal(loaded["w"], state["w"]), writer


def test_a_record_of_a_transform_not_available_raises_naming_it_the_file_and_offset(workdir):
    extension, Zlib, registry = _zlib_extension()
    dcp_jobs.save({"w": torch.ones(300, 100)}, tdcp.FileSystemWriter(workdir,
                                                                     _extensions=[Zlib()]),
                  no_dist=True)
    with pytest.raises(tdcp.CheckpointException) as raised:  # torch's registry lacks test.zlib
        dcp_jobs.load({"w": torch.zeros(300, 100)}, ndcp.FileSystemReader(workdir),
                      no_dist=True)
    (error, _), = raised.value.failures.values()
    assert isinstance(error, ValueError), error
    assert "__0_0.distcp: w, the record at offset 0" in str(error), error
    assert "test.zlib/1" in str(error) and "not a torch" not in str(error), error
    if not extension.ZStandard.is_available():
        # torch's own zstd transform, named in the metadata, without zstandard/pyzstd here
        reader = ndcp.FileSystemReader(workdir)
        metadata = reader.read_metadata()
        for info in metadata.storage_data.values():
            info.transform_descriptors = ["stream.zstd/1"]
        with open(os.path.join(workdir, ".metadata"), "wb") as f:
            pickle.dump(metadata, f)
        with pytest.raises(tdcp.CheckpointException) as raised:
            dcp_jobs.load({"w": torch.zeros(300, 100)}, ndcp.FileSystemReader(workdir),
                          no_dist=True)
        (error, _), = raised.value.failures.values()
        assert "stream.zstd/1" in str(error) and "zstandard" in str(error), error


def test_zstd_compressed_checkpoints_of_torchs_writer_load(workdir):
    extension = pytest.importorskip(tdcp.__name__ + "._extension",
                                    reason="stream transforms are torch >= 2.7's")
    if not extension.ZStandard.is_available():
        pytest.skip("torch's ZStandard transform needs the zstandard or pyzstd package, which "
                    "this Python lacks")
    state = {"w": torch.arange(3000, dtype=torch.float32), "step": 3}
    dcp_jobs.save(state, tdcp.FileSystemWriter(workdir, _extensions=[extension.ZStandard()]),
                  no_dist=True)
    loaded = {"w": torch.zeros(3000), "step": None}
    dcp_jobs.load(loaded, ndcp.FileSystemReader(workdir), no_dist=True)
    assert loaded["step"] == 3 and torch.equal(loaded["w"], state["w"])


@pytest.mark.skipif(not hasattr(torch.serialization, "safe_globals"),
                    reason=f"torch.serialization.safe_globals is torch >= 2.5's; "
                           f"{torch.__version__} lacks it")
def test_types_admitted_by_add_safe_globals_load_as_through_torchs_reader(workdir):
    """A tensor subclass loads where add_safe_globals admits it, through either reader, and is
    refused, naming it, where it does not; a dataclass object loads (torch's planner unpickles
    objects itself)."""
    state = {"t": torch.arange(6.0).as_subclass(dcp_jobs.Tagged),
             "settings": dcp_jobs.Settings(3, "x")}
    dcp_jobs.save(state, ndcp.FileSystemWriter(workdir), no_dist=True)
    for reader in (tdcp.FileSystemReader, ndcp.FileSystemReader):
        with pytest.raises(tdcp.CheckpointException) as raised:
            dcp_jobs.load({"t": torch.zeros(6), "settings": None}, reader(workdir), no_dist=True)
        assert "Tagged" in str(raised.value), (reader, raised.value)
        with torch.serialization.safe_globals([dcp_jobs.Tagged]):
            loaded = {"t": torch.zeros(6), "settings": None}
            dcp_jobs.load(loaded, reader(workdir), no_dist=True)
        assert torch.equal(loaded["t"], torch.arange(6.0)), reader
        assert loaded["settings"] == dcp_jobs.Settings(3, "x"), reader


def _async_stager():
    """torch's AsyncStager protocol (torch >= 2.3), or None."""
    try:
        from torch.distributed.checkpoint.staging import AsyncStager
    except ImportError:
        return None
    return AsyncStager


def _data_start(folder, fqn):
    """(file, offset) of the first byte of item `fqn`'s tensor data in nvmeio's checkpoint."""
    metadata = ndcp.FileSystemReader(folder).read_metadata()
    (info,) = [i for k, i in metadata.storage_data.items() if k.fqn == fqn]
    path = os.path.join(folder, info.relative_path)
    with open(path, "rb") as f:
        _, _, data, _, _ = _torch_zip.directory(f.fileno(), path, info.length, info.offset)
        (entry,) = data.values()
        header = os.pread(f.fileno(), _zip.LOCAL_HEADER_SIZE, info.offset + entry.header_offset)
    return path, info.offset + _zip.local_data_offset(header, entry.header_offset, path, "")


def _flip(path, offset):
    with open(path, "r+b") as f:
        byte = os.pread(f.fileno(), 1, offset)
        os.pwrite(f.fileno(), bytes([byte[0] ^ 0x40]), offset)


def test_a_corrupt_record_raises_naming_its_crc_unless_verify_crc_is_false(workdir):
    w = torch.arange(300 * 100, dtype=torch.float32).reshape(300, 100)
    others = {"a": torch.ones(50), "z": torch.full((70,), 2.0)}  # items beside it in the file
    dcp_jobs.save({"w": w, **others, "settings": dcp_jobs.Settings(2, "y")},
                  ndcp.FileSystemWriter(workdir), no_dist=True)
    path, start = _data_start(workdir, "w")
    (w_info,) = [i for k, i in ndcp.FileSystemReader(workdir).read_metadata().storage_data.items()
                 if k.fqn == "w"]
    _flip(path, start + 4 * 1234)
    for target in (torch.zeros(300, 100), torch.zeros(100, 300).t()):  # in place; buffered
        with pytest.raises(tdcp.CheckpointException) as raised:
            dcp_jobs.load({"w": target, "a": torch.zeros(50), "z": torch.zeros(70)},
                          ndcp.FileSystemReader(workdir), no_dist=True)
        (error, _), = raised.value.failures.values()
        assert isinstance(error, ValueError), error
        assert "__0_0.distcp" in str(error) and "CRC-32" in str(error), error
        assert "archive/data/0" in str(error), error
        assert f"of the item at offset {w_info.offset} " in str(error), error  # w's, no other
        loaded = {"w": target}
        dcp_jobs.load(loaded, ndcp.FileSystemReader(workdir, verify_crc=False), no_dist=True)
        differs = (loaded["w"] != w).nonzero().tolist()
        assert differs == [[12, 34]], differs
    _flip(path, start + 4 * 1234)
    # An object's record: torch.save's archive, its pickle's CRC-32 checked too.
    metadata = ndcp.FileSystemReader(workdir).read_metadata()
    (info,) = [i for k, i in metadata.storage_data.items() if k.fqn == "settings"]
    path = os.path.join(workdir, info.relative_path)
    with open(path, "rb") as f:
        record = os.pread(f.fileno(), info.length, info.offset)
    (pickled,) = [m for m in zipfile.ZipFile(io.BytesIO(record)).infolist()
                  if m.filename.endswith("data.pkl")]
    name_length, extra_length = struct.unpack_from("<HH", record, pickled.header_offset + 26)
    _flip(path, info.offset + pickled.header_offset + 30 + name_length + extra_length + 2)
    with pytest.raises(tdcp.CheckpointException) as raised:
        dcp_jobs.load({"w": torch.zeros(300, 100), "settings": None},
                      ndcp.FileSystemReader(workdir), no_dist=True)
    (error, _), = raised.value.failures.values()
    assert "data.pkl" in str(error) and "CRC-32" in str(error), error


@pytest.mark.skipif(_async_stager() is None,
                    reason=f"torch's AsyncStager is torch >= 2.3's; {torch.__version__} lacks it")
def test_a_staged_copy_holds_the_state_at_staging_and_cached_buffers_are_reused(workdir):
    cached = ndcp.FileSystemWriter(workdir, cache_staged_state_dict=True)
    assert isinstance(cached, _async_stager())
    state = {"w": torch.ones(4, 4), "step": 1}
    staged = cached.stage(state)
    state["w"].add_(1)
    assert torch.equal(staged["w"], torch.ones(4, 4)) and staged["step"] == 1
    dcp_jobs.save(staged, cached, no_dist=True)  # the copy written: its buffers free again
    again = cached.stage(state)
    assert again["w"].data_ptr() == staged["w"].data_ptr()
    assert torch.equal(again["w"], torch.full((4, 4), 2.0))
    # Staged again before a save wrote the cache: fresh memory, the cache's bytes untouched.
    state["w"].add_(1)
    meanwhile = cached.stage(state)
    assert meanwhile["w"].data_ptr() != again["w"].data_ptr()
    assert torch.equal(again["w"], torch.full((4, 4), 2.0))
    dcp_jobs.save(meanwhile, cached, no_dist=True)  # not the cache: it stays in flight
    assert cached.stage(state)["w"].data_ptr() != again["w"].data_ptr()
    dcp_jobs.save(again, cached, no_dist=True)  # the cache written: free again
    assert cached.stage(state)["w"].data_ptr() == again["w"].data_ptr()
    state["w"] = torch.ones(5)  # another shape: a new cache, not a copy into the old one
    cached.close()
    assert torch.equal(cached.stage(state)["w"], torch.ones(5))
    fresh = ndcp.FileSystemWriter(workdir)
    assert fresh.stage(state)["w"].data_ptr() != fresh.stage(state)["w"].data_ptr()


TORCH_1_13_PYTHON = "/usr/bin/python3"
SAVE_ON_TORCH_1_13 = """
import sys
import torch
import nvmeio_torch.dcp as ndcp
assert torch.__version__.startswith("1.13"), torch.__version__
state = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.arange(5), "object": [1, "a"],
         "half": torch.ones(3, dtype=torch.float16)}
for name, writer in (("torch", ndcp._dcp.FileSystemWriter), ("nvmeio", ndcp.FileSystemWriter)):
    ndcp._dcp.save_state_dict(state, writer(sys.argv[1] + "/" + name), no_dist=True)
"""


@pytest.fixture(scope="module")
def torch_1_13_checkpoints():
    """A folder holding torch/ and nvmeio/, one state saved on torch 1.13 (Debian's, under
    /usr/bin/python3) by each writer. Needs nvmeio_torch built for that Python, in the folder
    NVMEIO_TORCH_1_13_PYTHONPATH names (its build tree's python/)."""
    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip(f"loads torch 1.13's checkpoints on torch 2; this is {torch.__version__}")
    path = os.environ.get("NVMEIO_TORCH_1_13_PYTHONPATH")
    if not path or not os.access(TORCH_1_13_PYTHON, os.X_OK):
        pytest.skip(f"needs {TORCH_1_13_PYTHON} with torch 1.13 and nvmeio_torch built for it "
                    "(NVMEIO_TORCH_1_13_PYTHONPATH names its folder; unset here)")
    base = os.environ.get("NVMEIO_TORCH_TEST_DIR") or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="nvmeio_dcp_", dir=base) as folder:
        # Run in the folder: -c puts the working folder first on sys.path, and that may be
        # a build tree whose nvmeio_torch is this torch's.
        done = subprocess.run([TORCH_1_13_PYTHON, "-c", SAVE_ON_TORCH_1_13, folder],
                              env=dict(os.environ, PYTHONPATH=path), capture_output=True,
                              text=True, cwd=folder)
        if done.returncode != 0 and ("No module named 'torch'" in done.stderr or
                                     "AssertionError: " in done.stderr):
            pytest.skip(f"{TORCH_1_13_PYTHON} has no torch 1.13: {done.stderr.strip()[-200:]}")
        assert done.returncode == 0, done.stderr
        yield folder


def test_checkpoints_saved_on_torch_1_13_load_through_nvmeios_reader(torch_1_13_checkpoints):
    """torch 1.13's .metadata names DCP's classes in torch.distributed._shard.checkpoint;
    nvmeio's reader reads them as torch 2's (torch 2.15's own reader refuses them: "expected
    BytesStorageMetadata")."""
    import warnings
    for source in ("torch", "nvmeio"):
        loaded = {"w": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.int64),
                  "object": None, "half": torch.zeros(3, dtype=torch.float16)}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dcp_jobs.load(loaded, ndcp.FileSystemReader(os.path.join(torch_1_13_checkpoints,
                                                                     source)), no_dist=True)
        assert not [w for w in caught if issubclass(w.category, DeprecationWarning)], \
            [str(w.message) for w in caught]
        assert torch.equal(loaded["w"], torch.arange(12.0).reshape(3, 4)), source
        assert torch.equal(loaded["b"], torch.arange(5)), source
        assert torch.equal(loaded["half"], torch.ones(3, dtype=torch.float16)), source
        assert loaded["object"] == [1, "a"], source


@pytest.mark.skipif(_async_stager() is None,
                    reason=f"torch's AsyncStager is torch >= 2.3's; {torch.__version__} lacks it")
def test_a_cached_staging_whose_save_never_wrote_says_so_and_stages_apart():
    # A save that failed before writing leaves the cache taken: the next staging must not
    # overwrite what may still be written, says so once, and the cache serves again once a
    # write is done with it, even with a chunk of a staged buffer (as a plan resolves one).
    from nvmeio_torch import _dcp_staging

    stage = _dcp_staging.state_dict_stage(cache=True)
    state = {"w": torch.arange(10.0)}
    first = stage(state)
    with pytest.warns(RuntimeWarning, match="fresh memory"):
        second = stage(state)
    assert second["w"].data_ptr() != first["w"].data_ptr()
    assert torch.equal(second["w"], state["w"])
    stage.written([first["w"][2:5]])
    third = stage(state)
    assert third["w"].data_ptr() == first["w"].data_ptr()


def test_no_byte_of_a_records_pickle_damaged_loads_silently(workdir):
    # Every byte of a tensor record's pickle flipped in turn (its storage offset, size and
    # stride among them): the load raises, or gives the tensor exactly; with the CRC checked,
    # and without it (a view reaching past its record must not grow its storage).
    w = torch.arange(256 * 256, dtype=torch.float32).reshape(256, 256)
    dcp_jobs.save({"w": w}, ndcp.FileSystemWriter(workdir), no_dist=True)
    (info,) = [i for k, i in ndcp.FileSystemReader(workdir).read_metadata().storage_data.items()
               if k.fqn == "w"]
    path = os.path.join(workdir, info.relative_path)
    with open(path, "rb") as f:
        record = os.pread(f.fileno(), info.length, info.offset)
    (pickled,) = [m for m in zipfile.ZipFile(io.BytesIO(record)).infolist()
                  if m.filename.endswith("data.pkl")]
    start = info.offset + _zip.local_data_offset(
        record[pickled.header_offset:pickled.header_offset + _zip.LOCAL_HEADER_SIZE],
        pickled.header_offset, path, "")
    silent = []
    for at in range(start, start + pickled.file_size):
        _flip(path, at)
        for verify in (True, False):
            target = {"w": torch.zeros(256, 256)}
            try:
                dcp_jobs.load(target, ndcp.FileSystemReader(workdir, verify_crc=verify),
                              no_dist=True)
            except (tdcp.CheckpointException, ValueError, RuntimeError):
                continue
            if not torch.equal(target["w"], w):
                silent.append((at - start, verify))
        _flip(path, at)
    assert silent == []

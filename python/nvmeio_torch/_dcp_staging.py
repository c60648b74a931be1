"""What ``dcp.async_save`` stages through nvmeio's DCP writer (torch's ``AsyncStager``
protocol): a copy of the state dict on the CPU, taken before the save runs beside training, so
that later updates to the model cannot reach the files.

With ``cache`` (the writer's ``cache_staged_state_dict``) the copy's tensors are made once and
refilled at each save: no allocation, no page faults, after the first. They are page-locked
where CUDA is available (GPU tensors copy to them at the bus's rate). A state dict whose
structure, shapes or dtypes differ from the cached one gets a new cache (the old one is
dropped), never a copy into buffers of the wrong shapes. While a save may still be writing the
cache (staged, and its write not yet done: ``written``), the next staging takes fresh memory
rather than overwrite bytes in flight. Without ``cache`` each save copies into fresh pageable
memory, as torch's own writer does.

The copies are torch's (``torch.distributed._state_dict_utils``, which knows DTensor and
ShardedTensor); this module decides what to reuse.
"""

import importlib
import warnings

import torch

try:
    _state_dict_utils = importlib.import_module("torch.distributed._state_dict_utils")
    _create_cpu_state_dict = _state_dict_utils._create_cpu_state_dict
    _copy_state_dict = _state_dict_utils._copy_state_dict
    _check_state_dict_similarity = _state_dict_utils._check_state_dict_similarity
    AsyncStager = importlib.import_module("torch.distributed.checkpoint.staging").AsyncStager
except (ImportError, AttributeError):  # torch < 2.3: async_save stages with its own copy
    AsyncStager = None


def _similar(state_dict, staged):
    """Whether ``staged`` has the structure, shapes and dtypes of ``state_dict``."""
    try:
        return _check_state_dict_similarity(state_dict, staged)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return False


def _storage_address(tensor):
    """Where a tensor's storage starts: the same for every view of one staged buffer (a plan
    may resolve a narrowed chunk of it)."""
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else \
        tensor.storage()
    return storage.data_ptr()


def _tensors(staged):
    """The plain tensors a staged state dict holds (DTensors' and ShardedTensors' local ones)."""
    if isinstance(staged, dict):
        for value in staged.values():
            yield from _tensors(value)
    elif isinstance(staged, (list, tuple)):
        for value in staged:
            yield from _tensors(value)
    elif hasattr(staged, "local_shards"):
        for shard in staged.local_shards():
            yield shard.tensor
    elif hasattr(staged, "to_local"):
        yield staged.to_local()
    elif isinstance(staged, torch.Tensor):
        yield staged


class state_dict_stage:
    """Stages state dicts for ``dcp.async_save`` (module docstring). ``staged``: the cached
    copy, or None; ``in_flight``: whether a save staged in it may still be writing it."""

    def __init__(self, cache):
        self.cache = bool(cache)
        self.staged = None
        self.in_flight = False
        self._addresses = frozenset()
        self._warned = False

    def __getstate__(self):  # a writer sent to another process takes no copy of the cache
        return {"cache": self.cache, "staged": None, "in_flight": False,
                "_addresses": frozenset(), "_warned": False}

    def __call__(self, state_dict):
        if self.cache and self.in_flight and not self._warned:
            self._warned = True
            warnings.warn("nvmeio_torch.dcp: the staged copy of an earlier save may still be "
                          "written (its save not finished, or failed before writing): this save "
                          "stages into fresh memory, not the cache", RuntimeWarning, stacklevel=2)
        if not self.cache or self.in_flight:
            return _copy_state_dict(state_dict, _create_cpu_state_dict(state_dict),
                                    type_check=False)
        if self.staged is None or not _similar(state_dict, self.staged):
            self.staged = None  # the old copy's memory is free before the new one is taken
            self.staged = _create_cpu_state_dict(state_dict,
                                                 pin_memory=torch.cuda.is_available())
            self._addresses = frozenset(_storage_address(t) for t in _tensors(self.staged)
                                        if t.numel())
        staged = _copy_state_dict(state_dict, self.staged, type_check=False)
        self.in_flight = True
        return staged

    def written(self, tensors):
        """A save's write is done with ``tensors``: the cache is free again if they are its."""
        if self.in_flight and any(_storage_address(t) in self._addresses for t in tensors
                                  if t.numel()):
            self.in_flight = False

    def close(self):
        self.staged = None
        self.in_flight = False
        self._addresses = frozenset()

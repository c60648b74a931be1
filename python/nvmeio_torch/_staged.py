"""Tensors between files and a GPU through nvmeio's staging ring (``nvmeio/staged.hpp``): the
file's bytes are read with O_DIRECT into K page-locked slots and copied to the GPU on a stream of
nvmeio's own while the next slots are read (writes run the other way), so host memory stays at
the ring's K x slot bytes, whatever the size of the model.

Every loader and saver of nvmeio_torch that meets a CUDA device comes here: one pipeline.

The rings come from the process's pool (``python/src/ring_pool.hpp``), shared with the handle's
GPU calls: a ring given back is kept for its device's next transfer (page-locking 256 MiB costs
about as much as moving it), one per device at most; ``release_rings()``
(``nvmeio_torch.release_staging_rings``) frees them. A thread that finds its device's ring taken
gets one of its own for that transfer.
"""

import contextlib
import os
import re

import torch

from . import _C

# Host memory a ring may take when the caller sets no bound (0: none, nvmeio's default ring).
# Tests lower it to make every transfer wrap around a small ring.
DEFAULT_MAX_BYTES = 0


# After fork the pool's rings (their driver state) and its threads are the parent's: the child
# starts an empty pool, and leaves the parent's untouched rather than tearing them down.
os.register_at_fork(after_in_child=_C.forget_staging_rings)


def device_index(device):
    """The CUDA device index of ``device`` (a torch.device of type cuda), the current one when
    it names none; -1 for the CPU (the ring's host engine)."""
    if device.type == "cpu":
        return -1
    if device.type != "cuda":
        raise ValueError(f"nvmeio_torch moves tensors to and from the CPU and CUDA devices, not "
                         f"{device}")
    return torch.cuda.current_device() if device.index is None else device.index


def ring_shape_for(max_bytes):
    """(slots, slot size) of a ring within ``max_bytes`` bytes of host memory (None: the
    default bound): nvmeio's default ring when it fits, else 2 to 4 slots of whole pages."""
    return _C.ring_shape(DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)


@contextlib.contextmanager
def ring_for(index, max_bytes=None):
    """A ring of device ``index`` (-1: the host's) from the pool, within ``max_bytes`` (None:
    the default bound), given back when the block and every job on it are done."""
    lease = _C.take_ring(index, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
    yield lease.ring


def release_rings():
    """Frees the pool's kept rings (their page-locked host memory)."""
    _C.release_staging_rings()


def _bytes_view(tensor):
    """The contiguous tensor's bytes as a flat uint8 tensor on its device."""
    return tensor.reshape(-1).view(torch.uint8) if tensor.dim() else tensor.reshape(1).view(
        torch.uint8)


def completions(op, items, device, *, max_bytes=None, checksum=False, crcs=None):
    """Moves ``items`` — ``(path, file offset, tensor, name)``, each contiguous tensor's bytes at
    that offset of that file — between the files and the tensors (op ``"read"`` or
    ``"write"``) through the ring of ``device`` (the tensors on it or on the CPU); a generator
    yielding each item's index as its bytes have arrived (in its tensor for a read, in the file
    for a write).

    Tensors on the CPU are copied by the ring's own memcpy. Writes with ``checksum`` append each
    item's CRC-32 to the list ``crcs`` once done. An I/O failure raises ``OSError`` naming the
    file, the offset and the item's name; nothing is left in flight."""
    index = device_index(device)
    paths, where = [], {}
    files, offsets, lengths, addresses, on_host = [], [], [], [], []
    for path, offset, tensor, name in items:
        if tensor.device.type != "cpu" and (tensor.device.type != "cuda" or
                                            tensor.device.index != index):
            raise ValueError(f"{name}: on {tensor.device}, and this transfer is to {device}")
        if not tensor.is_contiguous():
            raise ValueError(f"{name}: not contiguous")
        if not 0 <= offset < 1 << 63:
            raise ValueError(f"{name}: file offset {offset} is not between 0 and 2**63 - 1")
        files.append(where.setdefault(path, len(where)))
        if files[-1] == len(paths):
            paths.append(path)
        offsets.append(offset)
        nbytes = tensor.numel() * tensor.element_size()
        lengths.append(nbytes)
        addresses.append(tensor.data_ptr() if nbytes else 0)
        on_host.append(tensor.device.type == "cpu")
    with ring_for(index, max_bytes) as ring:
        if index >= 0:
            # Destinations were allocated, and sources written, on torch's stream of the device;
            # nvmeio's copies run on a stream of their own.
            torch.cuda.current_stream(index).synchronize()
        try:
            job = ring.start(op, paths, files, offsets, lengths, addresses, on_host, checksum,
                             [item[2] for item in items])
        except ValueError as error:
            found = re.search(r"range (\d+) ", str(error))
            if found is None:
                raise
            raise ValueError(f"{error} (tensor {items[int(found.group(1))][3]!r})") from None
        try:
            while job.pending:
                try:
                    done = job.advance()
                except OSError as error:
                    item = getattr(error, "range", None)
                    if item is None:
                        raise
                    raise OSError(error.errno, f"{error.strerror} (tensor {items[item][3]!r})",
                                  error.filename) from error
                yield from done
            if checksum and crcs is not None:
                crcs.extend(job.crcs)
        finally:
            job.close()


def run(op, items, device, **options):
    """``completions`` to its end."""
    for _ in completions(op, items, device, **options):
        pass


def run_by_device(op, items, checksum=False):
    """``run`` for items whose tensors lie on several devices: one transfer per CUDA device, the
    CPU's items with the first (or alone, on the host engine, when none is on a GPU). Returns
    each item's CRC-32 in the items' order when ``checksum``."""
    groups = {}
    for i, item in enumerate(items):
        device = item[2].device
        if device.type not in ("cpu", "cuda"):  # before anything moves: no item is left out
            raise ValueError(f"tensor {item[3]!r} is on {device}; nvmeio_torch moves tensors "
                             "on the CPU and CUDA devices")
        groups.setdefault(device, []).append(i)
    cpu = torch.device("cpu")
    cuda = sorted((d for d in groups if d.type == "cuda"), key=str) or [cpu]
    crcs = [0] * len(items)
    for n, device in enumerate(cuda):
        members = (groups.get(device, []) if device.type == "cuda" else []) + \
            (groups.get(cpu, []) if n == 0 else [])
        found = []
        run(op, [items[i] for i in members], device, checksum=checksum, crcs=found)
        for i, crc in zip(members, found):
            crcs[i] = crc
    return crcs if checksum else None

"""What the whole-file jobs (checkpoints, safetensors) share: a file replaced atomically, and a
handle suited to moving whole files."""

import contextlib
import os
import secrets
import stat
import threading

from . import _C

ALIGN = 4096  # the file offsets and memory the jobs align to: O_DIRECT on any common device
POPULATE_CHUNK = 8 << 20  # what one populate call brings into use
POPULATE_MIN = 4 * POPULATE_CHUNK  # below this, helper threads cost more than they save


def align_up(n, align=ALIGN):
    return (n + align - 1) // align * align


def align_down(n, align=ALIGN):
    return n // align * align


@contextlib.contextmanager
def atomic_file(path, durable=True):
    """Yields the path of a new, empty temporary file beside ``path`` (same folder, so the same
    filesystem) for the caller to fill. On a normal exit the temporary is renamed over ``path``;
    with ``durable`` its data is flushed first (``fdatasync``) and the folder synced after, so a
    crash at any point leaves either the old file or the whole new one. Without ``durable`` the
    rename is still atomic for other processes, but a power loss may leave an empty or partial
    new file under ``path``. On an exception the temporary is removed, ``path`` is untouched and
    the exception propagates.

    As ``open(path, 'wb')`` would: a symlink is followed (its target is replaced, the link
    stays), and a file replaced keeps its permission bits (a new one gets 0o666 less the umask)."""
    path = os.path.realpath(os.fspath(path))
    folder = os.path.dirname(path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    # The name cut short so that the temporary's stays within NAME_MAX (255 bytes).
    stem = os.fsdecode(os.fsencode(os.path.basename(path))[:200])
    temporary = os.path.join(folder, ".%s.%s.tmp" % (stem, secrets.token_hex(6)))
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            yield temporary
            if durable:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        sync_folder(folder)


def sync_folder(folder):
    """Makes a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_handle(block_size=1 << 20, queue_depth=32, intra_op_parallelism=None, backend=None):
    """An ``aio_handle`` for whole-file jobs: 1 MiB blocks, a queue of 32 per worker, up to four
    workers (one per CPU), io_uring where it was built in and the kernel allows it (else libaio;
    a backend asked for by name gets no fallback)."""
    if intra_op_parallelism is None:
        intra_op_parallelism = max(1, min(4, os.cpu_count() or 1))
    settings = dict(block_size=block_size, queue_depth=queue_depth,
                    intra_op_parallelism=intra_op_parallelism)
    if backend is None and _C.io_uring_available:
        try:
            return _C.aio_handle(backend="io_uring", **settings)
        except OSError:  # built in, but refused here (io_uring_disabled, a seccomp filter)
            pass
    return _C.aio_handle(backend=backend or "libaio", **settings)


def populate(arenas):
    """Starts bringing fresh arenas (from ``_C.aligned_tensor``) into use from helper threads,
    ahead of the reads into them; returns a function that waits for the helpers.

    A read into fresh memory makes the kernel fault in and zero each page as the read pins it,
    one thread per read; the helpers (as many as the CPUs, at most 8) do it in parallel, in
    8 MiB chunks taken across the arenas from their starts, the order the reads go in, without
    changing any byte (``_C.populate``). Reads that catch up with them fault the rest as before.
    Where the kernel cannot (before Linux 5.14) the helpers stop at their first chunk."""
    sizes = [(a, a.numel()) for a in arenas if a is not None]
    if sum(n for _, n in sizes) < POPULATE_MIN:
        return lambda: None
    chunks = iter([(a, at, min(POPULATE_CHUNK, n - at))
                   for at in range(0, max(n for _, n in sizes), POPULATE_CHUNK)
                   for a, n in sizes if at < n])
    taking = threading.Lock()
    stop = threading.Event()

    def helper():
        while not stop.is_set():
            with taking:
                chunk = next(chunks, None)
            if chunk is None or not _C.populate(*chunk):
                stop.set()

    helpers = [threading.Thread(target=helper, name="nvmeio-populate", daemon=True)
               for _ in range(max(1, min(8, os.cpu_count() or 1)))]
    for h in helpers:
        h.start()

    def wait():
        for h in helpers:
            h.join()
    return wait

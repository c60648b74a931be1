"""What the whole-file jobs (checkpoints, safetensors) share: a file replaced atomically, and a
handle suited to moving whole files."""

import contextlib
import errno
import os
import secrets
import stat
import threading
import weakref

from . import _C

ALIGN = 4096  # the file offsets and memory the jobs align to: O_DIRECT on any common device
POPULATE_CHUNK = 8 << 20  # what one populate call brings into use
POPULATE_MIN = 4 * POPULATE_CHUNK  # below this, helper threads cost more than they save


def align_up(n, align=ALIGN):
    return (n + align - 1) // align * align


def align_down(n, align=ALIGN):
    return n // align * align


def open_regular(path):
    """A descriptor of ``path`` opened for reading, which must be a regular file: a model or a
    checkpoint is read at any offset, and opening a FIFO would wait for a writer forever. Opened
    without blocking, then checked; ``OSError`` (EINVAL, or EISDIR for a folder) names the path
    and what it is."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                    "a block device" if stat.S_ISBLK(mode) else
                    "a character device" if stat.S_ISCHR(mode) else "a socket")
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, f"{kind}, not a regular file", os.fsdecode(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


class opened:
    """A file opened once for reading (``open_regular``): ``fd``, ``path`` (for messages) and
    ``size``, from the descriptor. A loader reads every byte through ``fd`` (the handle reopens
    it through /proc/self/fd, never by name), so a file replaced atomically while it loads (as
    ``save`` replaces one) is read whole, the old one or the new one, never a mix. Closed by
    ``close()``, at the end of a ``with`` block, or when it is garbage-collected."""

    def __init__(self, path):
        self.path = os.fsdecode(os.fspath(path))
        self.fd = open_regular(self.path)
        self._closer = weakref.finalize(self, os.close, self.fd)
        self.stat = os.fstat(self.fd)
        self.size = self.stat.st_size

    def check_unchanged(self):
        """``OSError`` ``ESTALE`` naming the file where it was written or resized in place since
        it was opened (its size or modification time moved); one replaced under its name is
        not: this descriptor still reads the file it opened."""
        now = os.fstat(self.fd)
        if (now.st_size, now.st_mtime_ns) != (self.stat.st_size, self.stat.st_mtime_ns):
            raise OSError(errno.ESTALE, "the file changed (resized or written) since it was "
                          "opened", self.path)

    def close(self):
        """Closes the descriptor (once); ``fd`` is -1 from then on, never a number another
        file may have been given."""
        self._closer()
        self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


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
        intra_op_parallelism = cpus(4)
    settings = dict(block_size=block_size, queue_depth=queue_depth,
                    intra_op_parallelism=intra_op_parallelism)
    if backend is None and _C.io_uring_available:
        try:
            return _C.aio_handle(backend="io_uring", **settings)
        except OSError:  # built in, but refused here (io_uring_disabled, a seccomp filter)
            pass
    return _C.aio_handle(backend=backend or "libaio", **settings)


def handle_or_default(handle):
    """The caller's handle, or ``make_handle()`` when it gave none."""
    return handle if handle is not None else make_handle()


class draining:
    """Leaves a handle with nothing pending however a block ends: mark ``pending`` just before
    it queues an asynchronous request (an interrupt raised as the call returns then still finds
    it marked; waiting with nothing queued returns at once). On a normal exit the handle is
    waited for (its I/O error raised); on an exception too, its own error dropped, so that the
    one that stopped the block goes on."""

    def __init__(self, handle):
        self.handle = handle
        self.pending = False

    def __enter__(self):
        return self

    def wait(self):
        """Waits for what is pending now, raising its error."""
        self.pending = False
        self.handle.wait()

    def drop(self):
        """Waits for what is pending now, if anything, dropping its error."""
        if self.pending:
            try:
                self.wait()
            except OSError:
                pass

    def __exit__(self, kind, error, trace):
        if kind is None:
            if self.pending:
                self.wait()
        else:
            self.drop()
        return False


class spans:
    """Ranges of an ``opened`` file to be read into one arena of aligned memory that the
    caller's tensors then view: each range widened to ALIGN (clipped at the file's end, so that
    it reads with O_DIRECT) and merged with those it meets; the intervals laid one after another
    in the arena, each at an aligned offset. ``read_spans`` reads them through the file's
    descriptor."""

    def __init__(self, file, ranges):
        self.file = file
        file_size = file.size
        merged = []
        for start, end in sorted(ranges):
            start, end = align_down(start), min(align_up(end), file_size)
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.intervals, at = [], 0  # (file start, file end, arena offset)
        for start, end in merged:
            self.intervals.append((start, end, at))
            at += align_up(end - start)
        # Up to the last interval's end (which may be the file's, off ALIGN), not past it.
        last = self.intervals[-1] if self.intervals else (0, 0, 0)
        self.arena = _C.aligned_tensor(max(1, last[2] + last[1] - last[0]))

    def requests(self, begin=0, end=None):
        """The reads of arena bytes [begin, end) (an interval cut at ALIGN multiples):
        ([arena pieces], [file offsets])."""
        end = self.arena.numel() if end is None else end
        pieces = [(max(at, begin), min(at + stop - start, end), start - at)
                  for start, stop, at in self.intervals]
        pieces = [(a, b, shift) for a, b, shift in pieces if a < b]
        return [self.arena[a:b] for a, b, _ in pieces], [a + shift for a, _, shift in pieces]

    def waves(self, size):
        """The arena cut, in order, into [begin, end) of about ``size`` bytes, on ALIGN."""
        total = self.arena.numel()
        size = max(ALIGN, align_down(size))
        return [(begin, min(begin + size, total)) for begin in range(0, total, size)]

    def offset_of(self, begin, end):
        """Where file bytes [begin, end) lie in the arena, or None where no interval holds
        them all."""
        for start, stop, at in self.intervals:
            if start <= begin and end <= stop:
                return at + begin - start
        return None


def read_spans(handle, reads):
    """Reads every ``spans`` of ``reads`` (their arenas brought into use by helper threads
    meanwhile), all in flight at once; returns when every byte has arrived, or raises the
    first I/O error with nothing left pending."""
    with populating([r.arena for r in reads], handle.get_intra_op_parallelism()), \
            draining(handle) as queue:
        for r in reads:
            buffers, offsets = r.requests()
            if buffers:
                queue.pending = True  # first: an interrupt as the call returns still waits
                handle.async_pread_batch(buffers, r.file.fd, offsets)


WAVE = 128 << 20  # bytes read_in_waves has in flight while the last wave's bytes are used


def read_in_waves(handle, read, landed):
    """Reads the ``spans`` ``read`` a wave of its arena at a time, in order, and calls
    ``landed(end)`` once arena bytes [0, end) have all arrived, with the next wave already in
    flight: ``landed`` starts work on them (on other threads) while the device reads on."""
    waves = read.waves(WAVE)
    with populating([read.arena], handle.get_intra_op_parallelism()), \
            draining(handle) as queue:
        for i, (begin, end) in enumerate(waves):
            buffers, offsets = read.requests(begin, end)
            if buffers:
                queue.pending = True  # first: an interrupt as the call returns still waits
                handle.async_pread_batch(buffers, read.file.fd, offsets)
            if i > 0:
                landed(waves[i - 1][1])
            queue.wait()
        if waves:
            landed(waves[-1][1])


def cpus(most=None):
    """The CPUs this process may run on (its affinity, where the OS says), at most ``most``."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return max(1, count if most is None else min(most, count))


def _populate_chunks(arenas, pieces):
    """(arena, offset, length) to populate, arena by arena in the reads' order: each arena cut
    into ``pieces`` parts about as the handle's workers read it, the parts' chunks in turn."""
    chunks = []
    for arena in arenas:
        if arena is None:
            continue
        size = arena.numel() * arena.element_size()
        part = align_up(-(-size // pieces))
        for at in range(0, part, POPULATE_CHUNK):
            chunks += [(arena, begin + at, min(POPULATE_CHUNK, part - at, size - begin - at))
                       for begin in range(0, size, part) if begin + at < min(begin + part, size)]
    return chunks if sum(c[2] for c in chunks) >= POPULATE_MIN else []


@contextlib.contextmanager
def populating(arenas, pieces=1):
    """Brings fresh arenas (from ``_C.aligned_tensor``) into use from helper threads while the
    block runs the reads into them (read by ``pieces`` workers each); the helpers stop when it
    ends.

    A read into fresh memory makes the kernel fault in and zero each page as the read pins it;
    the helpers (one per CPU, at most 8) do it in parallel, 8 MiB at a time, ahead of the reads
    and without changing any byte (``_C.populate``), so the reads find the pages there. They are
    a hint: where the kernel cannot (before Linux 5.14) they stop at their first chunk, where no
    thread can be started there are none, and the reads fault the pages as before."""
    chunks = _populate_chunks(arenas, pieces)
    if not chunks:
        yield
        return
    queue = iter(chunks)
    taking = threading.Lock()
    stop = threading.Event()

    def helper():
        try:
            while not stop.is_set():
                with taking:
                    chunk = next(queue, None)
                if chunk is None or not _C.populate(*chunk):
                    return
        finally:
            stop.set()  # no chunk left, or the kernel refused: the others stop too

    helpers = []
    try:
        for _ in range(min(cpus(8), len(chunks))):
            h = threading.Thread(target=helper, name="nvmeio-populate", daemon=True)
            try:
                h.start()
            except RuntimeError:  # no more threads (RLIMIT_NPROC, a container's limit)
                break
            helpers.append(h)
        yield
    finally:
        stop.set()  # the reads are over: what is not populated yet no longer needs it
        for h in helpers:
            h.join()

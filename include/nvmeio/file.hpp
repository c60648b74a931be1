#pragma once
/// \file file.hpp
/// A move-only RAII file handle that opens with O_DIRECT (or says precisely why not).

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mount.h>  // BLKGETSIZE64, BLKSSZGET (linux/fs.h clashes with it)
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/size_lock.hpp"
#include "nvmeio/detail/unit_edge.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file_modes.hpp"
#include "nvmeio/memory.hpp"

NVMEIO_BEGIN_NAMESPACE

class file;

namespace detail {
inline io_failure trim_write_padding(const file& f, std::uint64_t padded_end, std::uint64_t keep);

/// `RWF_DONTCACHE` (Linux 6.14), which C libraries of 2023 do not name yet.
inline constexpr int rwf_dontcache = 0x00000080;
}  // namespace detail

/// An open file. Move-only; closes exactly once; a closed or moved-from handle still names its
/// file (every operation on it is an EBADF io_error). Distinct handles are independent, and one
/// handle may be used by several threads. Every I/O member is const: a `const file&` moves bytes
/// but cannot be closed, assigned or swapped (io_uring_backend::registered_file hands one out).
///
/// O_DIRECT: the asynchronous transfers (strategy.hpp) need buffers aligned to
/// `alignment().memory` and offsets to `alignment().offset`, any length; `read_at`/`write_at` take
/// anything, bouncing what is not aligned. Opens regular files, block devices and /dev/null,
/// zero, random, urandom (buffered only); refuses the rest with an io_error saying why
/// (docs/GUARANTEES.md 5b). Writers of disjoint ranges in one process never damage each other's
/// bytes, unless two O_DIRECT writers share an alignment unit (docs/GUARANTEES.md 7).
class file {
  public:
    /// A handle that holds no file.
    file() noexcept = default;

    /// Opens `path`; throws `io_error` naming the path and the reason, `std::invalid_argument`
    /// for a path with a NUL byte.
    file(std::string path, open_mode mode, direct_io direct = direct_io::on) {
        detail::throw_if(open_impl(std::move(path), mode, direct));
    }

    file(const file&) = delete;
    file& operator=(const file&) = delete;

    /// Takes over the other handle's descriptor; the other is closed but keeps its path.
    file(file&& other) noexcept { move_from(other); }
    /// Closes this handle's file and takes over the other's (which keeps its path).
    file& operator=(file&& other) noexcept {
        if (this != &other) {
            close_quietly();
            move_from(other);
        }
        return *this;
    }
    /// Closes the file (errors on close are ignored here; call `close()` to see them).
    ~file() { close_quietly(); }

    /// Opens `path` into a fresh handle, reporting failure through `ec` instead of throwing (a
    /// path with a NUL byte still throws `std::invalid_argument`).
    [[nodiscard]] static file open(std::string path, open_mode mode, direct_io direct,
                                   std::error_code& ec) {
        file result;
        ec = result.open_impl(std::move(path), mode, direct).code;
        return result;
    }

    /// Opens afresh the file that open descriptor `descriptor` refers to (its inode through
    /// `/proc/self/fd`, never its name again, which another file may have taken), with `mode`
    /// and `direct` of its own; where /proc refuses (permissions checked again, no procfs), a
    /// duplicate of the descriptor, O_DIRECT only if it has it (else `direct_io::on` is EINVAL).
    /// Messages name the descriptor's path now. Throws as the constructor, EBADF for a
    /// descriptor not open; `open_mode::write` truncates, once the file is known.
    [[nodiscard]] static file reopen(int descriptor, open_mode mode, direct_io direct) {
        file result;
        detail::throw_if(result.reopen_impl(descriptor, mode, direct));
        return result;
    }
    /// `reopen`, reporting failure through `ec` instead of throwing.
    [[nodiscard]] static file reopen(int descriptor, open_mode mode, direct_io direct,
                                     std::error_code& ec) {
        file result;
        ec = result.reopen_impl(descriptor, mode, direct).code;
        return result;
    }

    /// The operating system's descriptor, or -1.
    [[nodiscard]] int native_handle() const noexcept { return fd_; }
    /// True while a file is open.
    [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
    /// True when the descriptor has O_DIRECT (with `direct_io::automatic`, what it got).
    [[nodiscard]] bool is_direct() const noexcept { return direct_; }
    /// True when every read and write leaves the page cache behind (`direct_io::uncached`, or
    /// what `direct_io::automatic` got).
    [[nodiscard]] bool is_uncached() const noexcept { return rw_flags_ != 0; }
    /// The `RWF_*` flags every read and write of this file carries (`RWF_DONTCACHE` when
    /// uncached, else 0).
    [[nodiscard]] int rw_flags() const noexcept { return rw_flags_; }
    /// The path the file was opened with (kept after `close()` and after a move from it).
    [[nodiscard]] const std::string& path() const noexcept {
        static const std::string none;
        return path_ ? *path_ : none;
    }
    /// The mode the file was opened with.
    [[nodiscard]] open_mode mode() const noexcept { return mode_; }
    /// The file the handle reaches, from `fstat` (see `file_identity`); `io_error` EBADF when
    /// not open.
    [[nodiscard]] file_identity identity() const {
        std::error_code ec;
        const file_identity result = identity(ec);
        detail::throw_if({ec, operation_name("fstat"), path(), 0, 0});
        return result;
    }
    /// The file the handle reaches; `{}` and `ec` set on failure (EBADF when not open).
    [[nodiscard]] file_identity identity(std::error_code& ec) const noexcept;
    /// What the file is (regular file, block device...), as seen at open.
    [[nodiscard]] file_kind kind() const noexcept { return kind_; }
    /// What O_DIRECT requires of this file (queried at open even when buffered).
    [[nodiscard]] const dio_alignment& alignment() const noexcept { return alignment_; }

    /// For a block device, the largest request it takes without splitting it and how many it
    /// queues (from sysfs at open); zeros for anything else.
    [[nodiscard]] const nvmeio::queue_limits& queue_limits() const noexcept {
        return queue_limits_;
    }

    /// Alignment that transfers on this handle need: the strictest of `alignment()` when direct,
    /// 1 when buffered.
    [[nodiscard]] std::size_t required_alignment() const noexcept {
        return direct_ ? alignment_.strictest() : 1;
    }

    /// The file's current size in bytes: a block device's capacity (`BLKGETSIZE64`), a regular
    /// file's length, 0 for a character device.
    [[nodiscard]] std::uint64_t size() const {
        std::error_code ec;
        const std::uint64_t result = size(ec);
        if (ec) {
            const bool device = kind_ == file_kind::block_device;
            throw io_error(
                {ec, operation_name(device ? "ioctl(BLKGETSIZE64)" : "fstat"), path(), 0, 0});
        }
        return result;
    }
    /// The file's current size in bytes; 0 and `ec` set on failure (EBADF when not open).
    [[nodiscard]] std::uint64_t size(std::error_code& ec) const noexcept;

    /// Fills `memory` (any alignment) from `offset`, retrying short reads and EINTR. Returns the
    /// bytes read: fewer than `memory.size()` only at end of file. On an O_DIRECT handle the last
    /// alignment unit below 2^63, which O_DIRECT cannot address, reads as the end of the file
    /// when the file ends before it, and is an EOVERFLOW `io_error` otherwise.
    std::size_t read_at(mutable_memory memory, std::uint64_t offset) const {
        io_failure failure;
        const std::size_t got = read_at(memory, offset, failure);
        detail::throw_if(failure);
        return got;
    }
    /// As above, reporting failure through `ec`.
    std::size_t read_at(mutable_memory memory, std::uint64_t offset, std::error_code& ec) const {
        io_failure failure;
        const std::size_t got = read_at(memory, offset, failure);
        ec = failure.code;
        return got;
    }

    /// Writes every byte of `memory` (any alignment) at `offset`, retrying short writes and
    /// EINTR. The file is first extended to `offset + memory.size()` if shorter
    /// (`reserve_range`). On an O_DIRECT handle, partial alignment units at either end are merged
    /// with the file's bytes (read-modify-write) and the file ends `max(previous size, offset +
    /// memory.size())` long, also while other threads write other ranges (see the class comment).
    void write_at(const_memory memory, std::uint64_t offset) const {
        io_failure failure;
        write_at(memory, offset, failure);
        detail::throw_if(failure);
    }
    /// As above, reporting failure through `ec`.
    void write_at(const_memory memory, std::uint64_t offset, std::error_code& ec) const {
        io_failure failure;
        write_at(memory, offset, failure);
        ec = failure.code;
    }

    /// Makes the file at least `offset + length` bytes long before a write of that range, so that
    /// the write never changes its size: a shorter regular file gets the range allocated with
    /// `fallocate` (where the filesystem has none, its size raised with `ftruncate`), under the
    /// file's size mutex (see the class comment). Never shrinks a file; does nothing for ranges
    /// already inside it and for block devices and other special files. Every write path of
    /// nvmeio calls it first; on a full disk it fails before any byte moves (ENOSPC, "write
    /// (reserving its range with fallocate)", the whole range).
    void reserve_range(std::uint64_t offset, std::size_t length) const {
        io_failure failure;
        reserve_range(offset, length, failure);
        detail::throw_if(failure);
    }
    /// As above, reporting failure through `ec`.
    void reserve_range(std::uint64_t offset, std::size_t length, std::error_code& ec) const {
        io_failure failure;
        reserve_range(offset, length, failure);
        ec = failure.code;
    }

    /// Sets the file's size (under the file's size mutex, so that no concurrent write of nvmeio
    /// undoes it).
    void truncate(std::uint64_t size) const {
        std::error_code ec;
        truncate(size, ec);
        detail::throw_if({ec, operation_name("truncate"), path(), size, 0});
    }
    /// Sets the file's size, reporting failure through `ec`.
    void truncate(std::uint64_t size, std::error_code& ec) const {
        std::unique_lock<std::mutex> lock;
        if (size_lock_) lock = std::unique_lock<std::mutex>(*size_lock_);
        truncate_unlocked(size, ec);
    }

  private:
    void truncate_unlocked(std::uint64_t size, std::error_code& ec) const noexcept {
        ec.clear();
        if (!is_open()) {
            ec = detail::errno_code(EBADF);
            return;
        }
        while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
            if (errno != EINTR) {
                ec = detail::errno_code(errno);
                return;
            }
        }
    }
    // The one rule that cuts a padded write's last unit off again, under the size mutex: a
    // file that still ends at `padded_end` (nobody has grown it since) ends at `keep` again
    // (the writer's end, or where the file ended inside that unit before, if larger).
    void trim_padding_unlocked(std::uint64_t padded_end, std::uint64_t keep,
                               std::error_code& ec) const noexcept {
        ec.clear();
        if (keep < padded_end && size(ec) == padded_end && !ec) truncate_unlocked(keep, ec);
    }

  public:
    /// Flushes the file's data to the device (`fdatasync`).
    void sync() const {
        std::error_code ec;
        sync(ec);
        detail::throw_if({ec, operation_name("fdatasync"), path(), 0, 0});
    }
    /// Flushes the file's data to the device, reporting failure through `ec`.
    void sync(std::error_code& ec) const noexcept {
        ec.clear();
        if (::fdatasync(fd_) != 0) ec = detail::errno_code(errno);  // EBADF when closed
    }

    /// Closes the file, reporting the close's error (a handle closes once; this is then a no-op).
    void close() {
        std::error_code ec;
        close(ec);
        detail::throw_if({ec, "close", path(), 0, 0});
    }
    /// Closes the file, reporting failure through `ec`.
    void close(std::error_code& ec) noexcept {
        ec.clear();
        if (fd_ < 0) return;
        // Linux releases the descriptor even when close fails: never retry it.
        if (::close(fd_) != 0 && errno != EINTR) ec = detail::errno_code(errno);
        fd_ = -1;
        size_lock_.reset();
    }

    /// Exchanges two handles.
    void swap(file& other) noexcept { std::swap(*this, other); }

    /// read_at, write_at and reserve_range as above, recording the whole failure (operation,
    /// path, offset, length) in `failure` (empty on success), as a batch's results do.
    std::size_t read_at(mutable_memory memory, std::uint64_t offset, io_failure& failure) const;
    /// See read_at(mutable_memory, std::uint64_t, io_failure&).
    void write_at(const_memory memory, std::uint64_t offset, io_failure& failure) const;
    /// See read_at(mutable_memory, std::uint64_t, io_failure&).
    void reserve_range(std::uint64_t offset, std::size_t length, io_failure& failure) const;

  private:
    friend io_failure detail::trim_write_padding(const file&, std::uint64_t, std::uint64_t);

    // `existing`: neither create nor truncate (reopen does that only once the file is checked).
    io_failure open_impl(std::string path, open_mode mode, direct_io direct, bool existing = false);
    // open_impl on /proc/self/fd/N, checked to be the descriptor's inode, then named by it.
    io_failure reopen_impl(int descriptor, open_mode mode, direct_io direct);
    // Where /proc refuses that (it checks permissions again; no procfs), a duplicate of the
    // descriptor itself, with its own flags: O_DIRECT only if it has it.
    io_failure share_descriptor(int descriptor, open_mode mode, direct_io direct, std::string name);
    // open_mode::write's truncation, once the file is known to be the descriptor's.
    io_failure truncate_for(open_mode mode);
    // open_impl's steps, in order; a step that fails after open(2) leaves the descriptor for
    // open_impl to close.
    //
    // open(2) with `flags`, plus O_DIRECT when direct_ is set; where the filesystem refuses
    // O_DIRECT (EINVAL), buffered instead, direct_ then false. The descriptor, or -errno.
    int open_descriptor(int flags);
    // The failure of an open(2) that failed with `error`.
    io_failure open_failure(int error) const;
    // fstat into `st`, kind_ from it; refuses directories, what refusal() names, and a buffered
    // fallback (`refused`) where direct_io::on was asked.
    io_failure classify_opened(int fd, direct_io direct, bool refused, struct stat& st);
    // Sets rw_flags_ to RWF_DONTCACHE where uncached I/O is asked for (or automatic fell back
    // from O_DIRECT) and a one-byte read with it works; fails only for direct_io::uncached.
    io_failure probe_uncached(int fd, direct_io direct, bool refused);
    // Takes off the O_NONBLOCK that open_flags() set.
    io_failure clear_nonblock(int fd) const;
    // Keeps `fd` with what open learns from it: alignment, queue limits, the size mutex.
    void adopt(int fd, const struct stat& st);
    // Whether this process may open a file of `kind` (device `device`); else why not.
    static const char* refusal(file_kind kind, dev_t device) noexcept;
    void move_from(file& other) noexcept {
        fd_ = std::exchange(other.fd_, -1);
        direct_ = other.direct_;
        rw_flags_ = other.rw_flags_;
        mode_ = other.mode_;
        kind_ = other.kind_;
        path_ = other.path_;  // shared, so that the moved-from handle still names its file
        alignment_ = other.alignment_;
        queue_limits_ = other.queue_limits_;
        size_lock_ = std::move(other.size_lock_);
    }
    // `operation`, saying so when the handle holds no open file (its errno is then EBADF).
    std::string operation_name(const char* operation) const {
        if (is_open()) return operation;
        return std::string(operation) + (path_ ? " (the handle is closed or was moved from)"
                                               : " (the handle holds no file)");
    }
    void close_quietly() noexcept {
        std::error_code ignored;
        close(ignored);
    }
    // The plain loops, valid when the range satisfies the descriptor's constraints.
    std::size_t read_plain(void* buffer, std::size_t length, std::uint64_t offset,
                           io_failure& failure) const noexcept;
    bool write_plain(const void* buffer, std::size_t length, std::uint64_t offset,
                     io_failure& failure) const noexcept;
    // reserve_range, returning a size the file had afterwards (>= offset + length; 0 for
    // files that do not grow).
    std::uint64_t reserve_and_size(std::uint64_t offset, std::size_t length,
                                   io_failure& failure) const;
    // Writes the caller's `bytes` into the whole units of `cover`, merged with the file's bytes
    // in its partial units, through `bounce` (at least `cover.span` bytes).
    bool write_merged(std::byte* bounce, const std::byte* bytes, const detail::unit_cover& cover,
                      io_failure& failure) const;

    int fd_ = -1;
    bool direct_ = false;
    int rw_flags_ = 0;  // RWF_DONTCACHE when uncached
    open_mode mode_ = open_mode::read;
    file_kind kind_ = file_kind::regular;
    std::shared_ptr<const std::string> path_;
    dio_alignment alignment_;
    nvmeio::queue_limits queue_limits_;
    std::shared_ptr<std::mutex> size_lock_;  // regular files: shared by the file's handles
};

namespace detail {

/// For engines that write a last alignment unit whole and asynchronously: after
/// `reserve_range(offset, padded_end - offset)` and the write, cuts the padding off again by
/// file::write_at's rule (trim_padding_unlocked): a file another writer has grown further is
/// left alone. Regular files only; a no-op for others.
inline io_failure trim_write_padding(const file& f, std::uint64_t padded_end, std::uint64_t keep) {
    if (f.kind_ != file_kind::regular || !f.size_lock_ || keep >= padded_end) return {};
    std::lock_guard<std::mutex> lock(*f.size_lock_);
    std::error_code ec;
    f.trim_padding_unlocked(padded_end, keep, ec);
    if (ec) return {ec, "truncate (after a padded write)", f.path(), keep, 0};
    return {};
}

}  // namespace detail
NVMEIO_END_NAMESPACE

#include "nvmeio/detail/file_io.ipp"
#include "nvmeio/detail/file_open.ipp"
#include "nvmeio/version.hpp"

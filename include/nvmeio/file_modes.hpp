#pragma once
/// \file file_modes.hpp
/// How a file is opened (`open_mode`, `direct_io`), what it turned out to be (`file_kind`) and
/// which file it is (`file_identity`): the words of file.hpp, apart so that they can be read,
/// and named, without the handle.

#include <cstdint>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// What a file is opened for.
enum class open_mode {
    read,        ///< Read only; the file must exist.
    write,       ///< Create or truncate. Opened O_RDWR so that an unaligned tail can be merged.
    read_write,  ///< Read and write an existing or new file; never truncates.
};

/// How a file's bytes move: O_DIRECT, through the page cache, or through it without staying.
enum class direct_io {
    on,   ///< O_DIRECT, or an `io_error` when the filesystem refuses it.
    off,  ///< Ordinary buffered I/O through the page cache.
    /// O_DIRECT where the filesystem accepts it; else uncached where it accepts that; else
    /// buffered.
    automatic,
    /// Uncached buffered I/O (`RWF_DONTCACHE` on every read and write, Linux 6.14+): any buffer,
    /// offset and length, as buffered I/O takes them, but the pages a read brought in or a write
    /// put out leave the page cache once done, so loading a model or dumping a KV cache does not
    /// push the rest of the machine's cache out. An `io_error` (EOPNOTSUPP) at open where the
    /// kernel or the filesystem has no such mode (tmpfs; kernels before 6.14).
    uncached,
};

/// True for the modes that may open a file with O_DIRECT (and so impose its alignment).
[[nodiscard]] constexpr bool may_use_o_direct(direct_io mode) noexcept {
    return mode == direct_io::on || mode == direct_io::automatic;
}

/// What kind of object an open file is (from `fstat` at open).
enum class file_kind {
    regular,           ///< A regular file: sized by its inode, may grow, may be `fallocate`d.
    block_device,      ///< A block device such as `/dev/nvme0n1`: fixed size, never grows.
    character_device,  ///< `/dev/null`, `/dev/zero`, `/dev/random` or `/dev/urandom` (buffered).
    fifo,              ///< A named pipe (never opened: refused).
    socket,            ///< A socket (never opened: refused).
    other,             ///< Anything else (never opened: refused).
};

/// Name of a file kind, for messages and reports.
[[nodiscard]] constexpr const char* to_string(file_kind kind) noexcept {
    switch (kind) {
        case file_kind::regular:
            return "regular file";
        case file_kind::block_device:
            return "block device";
        case file_kind::character_device:
            return "character device";
        case file_kind::fifo:
            return "FIFO";
        case file_kind::socket:
            return "socket";
        case file_kind::other:
            break;
    }
    return "special file";
}

/// Name of a direct_io value, for messages and reports.
[[nodiscard]] constexpr const char* to_string(direct_io mode) noexcept {
    switch (mode) {
        case direct_io::on:
            return "on";
        case direct_io::off:
            return "off";
        case direct_io::automatic:
            return "automatic";
        case direct_io::uncached:
            break;
    }
    return "uncached";
}

/// The file a handle reaches, as nvmeio compares files (`file::identity()`): equal for one file
/// however it is reached (one handle twice, two opens of a path, hard links, bind mounts), and
/// for a device by its own number, so two nodes of one disk are one. Not seen as one, though
/// their bytes overlap: a partition and its whole disk, a loop device and its backing file.
struct file_identity {
    file_kind kind = file_kind::regular;  ///< What the file is.
    std::uint64_t device = 0;  ///< A device's own number (`st_rdev`); else its filesystem's.
    std::uint64_t inode = 0;   ///< The inode in that filesystem; 0 for a device.

    /// Whether both name one file.
    [[nodiscard]] friend bool operator==(const file_identity& a, const file_identity& b) noexcept {
        return a.kind == b.kind && a.device == b.device && a.inode == b.inode;
    }
    /// Whether they name two files.
    [[nodiscard]] friend bool operator!=(const file_identity& a, const file_identity& b) noexcept {
        return !(a == b);
    }
};

NVMEIO_END_NAMESPACE

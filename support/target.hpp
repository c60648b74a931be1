#pragma once
/// \file support/target.hpp
/// What a tool works on: a regular file or a block device (a raw NVMe namespace, a loop device).
/// Sizes come from nvmeio::file::size(); a tool never writes to a device unless its user said so
/// (--allow-device-write), and never works on a character device, FIFO or socket.

#include <sys/stat.h>

#include <nvmeio/file.hpp>

#include <cstdint>
#include <string>

#include "support/cli.hpp"

namespace nvmeio::support {

/// A file or device as the tool found it.
struct target_info {
    std::string path;                     ///< As given.
    bool exists = false;                  ///< False when nothing is at `path`.
    file_kind kind = file_kind::regular;  ///< What is there (regular when missing).
    std::uint64_t size = 0;               ///< Bytes it holds (file::size()); 0 when missing.
    /// True for a block device.
    [[nodiscard]] bool is_device() const noexcept { return kind == file_kind::block_device; }
};

/// Looks at `path` (opened for reading, buffered). Throws usage_error naming `flag` for what a
/// tool cannot use (a directory, a character device, a FIFO, a socket) and io_error when it
/// exists but cannot be opened.
[[nodiscard]] inline target_info inspect_target(const std::string& path,
                                                const std::string& flag = "--file") {
    target_info info;
    info.path = path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return info;
    if (S_ISDIR(st.st_mode)) throw usage_error(flag, "'" + path + "' is a directory");
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        throw usage_error(flag, "'" + path +
                                    "' is neither a regular file nor a block device; the tools "
                                    "measure files and block devices only");
    }
    file f(path, open_mode::read, direct_io::off);
    info.exists = true;
    info.kind = f.kind();
    info.size = f.size();
    return info;
}

/// Throws usage_error unless writing `target` is allowed: a block device needs
/// `allow_device_write` (--allow-device-write), as its old contents are someone's data.
inline void check_write_allowed(const target_info& target, bool allow_device_write) {
    if (target.is_device() && !allow_device_write) {
        throw usage_error("--allow-device-write",
                          "refusing to write to the block device '" + target.path +
                              "'; pass --allow-device-write if its contents may be overwritten");
    }
}

}  // namespace nvmeio::support

#pragma once
/// \file file_source.hpp
/// Where a request's file comes from: a path, or a caller's open descriptor. A descriptor is
/// reopened through /proc/self/fd (`nvmeio::file::reopen`), never by the name it had, so that a
/// file renamed or replaced meanwhile is never the one read or written, and a reader that opened
/// a file once reads every byte of that one file.

#include <fcntl.h>

#include <string>
#include <system_error>
#include <utility>

#include <nvmeio/file.hpp>

namespace nvmeio_torch {

/// A path, or an open descriptor of the caller's (which may be closed once the file is open).
struct file_source {
    std::string path;
    int descriptor = -1;
    bool by_descriptor = false;

    static file_source named(std::string path) { return {std::move(path), -1, false}; }
    static file_source of_descriptor(int fd) { return {"", fd, true}; }
};

/// EBADF, as pread or pwrite on it would be, where descriptor `fd` does not allow what `mode`
/// is for: reading (open_mode::read), else writing. A descriptor gives no more access reopened
/// than it has (O_APPEND, though, is not kept: every request has its own offset).
inline void check_access(int fd, nvmeio::open_mode mode) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0) return;  // not open: reopen says EBADF, naming it
    const int access = flags & O_ACCMODE;
    const bool reads = mode == nvmeio::open_mode::read;
    if (reads ? access != O_WRONLY : access != O_RDONLY) return;
    throw nvmeio::io_error({std::error_code(EBADF, std::generic_category()),
                            std::string(reads ? "read from" : "write to") + " descriptor " +
                                std::to_string(fd) + " (opened " +
                                (reads ? "write-only" : "read-only") + ")",
                            "/proc/self/fd/" + std::to_string(fd), 0, 0});
}

/// Opens `source` (throws as nvmeio::file's constructor; EBADF for a descriptor not open or
/// without the access `mode` is for).
inline nvmeio::file open_source(const file_source& source, nvmeio::open_mode mode,
                                nvmeio::direct_io direct) {
    if (!source.by_descriptor) return nvmeio::file(source.path, mode, direct);
    check_access(source.descriptor, mode);
    return nvmeio::file::reopen(source.descriptor, mode, direct);
}

/// Opens `source`, reporting an open's failure through `ec` (the access check still throws).
inline nvmeio::file open_source(const file_source& source, nvmeio::open_mode mode,
                                nvmeio::direct_io direct, std::error_code& ec) {
    if (!source.by_descriptor) return nvmeio::file::open(source.path, mode, direct, ec);
    check_access(source.descriptor, mode);
    return nvmeio::file::reopen(source.descriptor, mode, direct, ec);
}

}  // namespace nvmeio_torch

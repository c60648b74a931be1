#pragma once
/// \file file_source.hpp
/// Where a request's file comes from: a path, or a caller's open descriptor. A descriptor is
/// reopened through /proc/self/fd (`nvmeio::file::reopen`), never by the name it had, so that a
/// file renamed or replaced meanwhile is never the one read or written, and a reader that opened
/// a file once reads every byte of that one file.

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

/// Opens `source` (throws as nvmeio::file's constructor; EBADF for a descriptor not open).
inline nvmeio::file open_source(const file_source& source, nvmeio::open_mode mode,
                                nvmeio::direct_io direct) {
    if (source.by_descriptor) return nvmeio::file::reopen(source.descriptor, mode, direct);
    return nvmeio::file(source.path, mode, direct);
}

/// Opens `source`, reporting failure through `ec`.
inline nvmeio::file open_source(const file_source& source, nvmeio::open_mode mode,
                                nvmeio::direct_io direct, std::error_code& ec) {
    if (source.by_descriptor) return nvmeio::file::reopen(source.descriptor, mode, direct, ec);
    return nvmeio::file::open(source.path, mode, direct, ec);
}

}  // namespace nvmeio_torch

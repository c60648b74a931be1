#pragma once
/// \file detail/file_door.hpp
/// How the engine and the front ends reach the members of `file` that keep a failure's whole
/// record (operation, path, offset, length) instead of reporting it: the public API turns such a
/// record into an io_error or an std::error_code at its boundary.

#include <cstddef>
#include <cstdint>

#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"

namespace nvmeio::detail {

/// The file's members that record a failure whole (operation, path, offset, length), which the
/// public API reports as io_error or std::error_code: the engine keeps the record per segment.
struct file_door {
    static std::size_t read_at(file& f, void* buffer, std::size_t length, std::uint64_t offset,
                               io_failure& failure) {
        return f.read_at(buffer, length, offset, failure);
    }
    static void write_at(file& f, const void* buffer, std::size_t length, std::uint64_t offset,
                         io_failure& failure) {
        f.write_at(buffer, length, offset, failure);
    }
    static void reserve_range(file& f, std::uint64_t offset, std::size_t length,
                              io_failure& failure) {
        f.reserve_range(offset, length, failure);
    }
    static void trim_padding(file& f, std::uint64_t padded_end, std::uint64_t keep,
                             io_failure& failure) {
        f.trim_padding(padded_end, keep, failure);
    }
};

}  // namespace nvmeio::detail

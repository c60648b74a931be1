#pragma once
/// \file verify.hpp
/// Checks that bytes in memory are what a file holds, reading the file through ordinary buffered
/// I/O (an independent path from the O_DIRECT one under test), a chunk at a time.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "nvmeio/compare.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// What `verify_read` found.
struct verify_result {
    std::size_t requested = 0;   ///< Bytes asked to be checked.
    std::size_t file_bytes = 0;  ///< Bytes the file holds in the range (less at end of file).
    /// Differing bytes within the first `file_bytes`; offsets relative to the buffer's start.
    mismatch_summary mismatches{0, no_mismatch, no_mismatch};

    /// True when the file holds the whole range and every byte matches.
    [[nodiscard]] bool equal() const noexcept {
        return file_bytes == requested && mismatches.count == 0;
    }
};

/// How much memory `verify_read` uses for its chunk by default.
inline constexpr std::size_t default_verify_chunk = std::size_t{8} << 20;

/// How `verify_read` reads the file. A struct, not a trailing integer: an offset and a chunk
/// size side by side would take a length where the offset goes and compile.
struct verify_options {
    std::size_t chunk_size = default_verify_chunk;  ///< Bytes read at a time (>= 1).
};

namespace detail {

// verify_read, recording a failure to open or read in `failure`.
inline verify_result verify_into(const std::string& path, const_memory memory, std::uint64_t offset,
                                 std::size_t chunk_size, io_failure& failure) {
    const void* const buffer = memory.data();
    const std::size_t length = memory.size();
    failure = {};
    verify_result result;
    result.requested = length;
    if (chunk_size == 0) throw_invalid("verify_read: chunk_size must be at least 1 (got 0)");
    if (length != 0 && buffer == nullptr) throw_invalid("verify_read: the buffer is null");
    std::error_code ec;
    file reference = file::open(path, open_mode::read, direct_io::off, ec);
    if (ec) {
        failure = {ec, "open (for verification)", path, 0, 0};
        return result;
    }
    std::vector<unsigned char> chunk(std::min(chunk_size, std::max<std::size_t>(length, 1)));
    const auto* expected = static_cast<const unsigned char*>(buffer);
    std::size_t& done = result.file_bytes;
    while (done < length) {
        const std::size_t want = std::min(chunk.size(), length - done);
        const std::size_t got =
            reference.read_at(nvmeio::memory(chunk).first(want), offset + done, failure);
        if (failure) return result;
        const mismatch_summary part = count_mismatches(expected + done, chunk.data(), got);
        if (part.count != 0) {
            mismatch_summary& all = result.mismatches;
            if (all.count == 0) all.first = done + part.first;
            all.last = done + part.last;
            all.count += part.count;
        }
        done += got;
        if (got < want) break;  // end of file
    }
    return result;
}

}  // namespace detail

/// Compares the bytes of `memory` with as many at `offset` of the file at `path`, read with
/// buffered I/O a chunk at a time (the file is never loaded whole a second time). Throws
/// io_error when the file cannot be opened or read.
[[nodiscard]] inline verify_result verify_read(const std::string& path, const_memory memory,
                                               std::uint64_t offset,
                                               const verify_options& options = {}) {
    io_failure failure;
    verify_result result = detail::verify_into(path, memory, offset, options.chunk_size, failure);
    detail::throw_if(failure);
    return result;
}

/// As above; reports failure to open or read through `ec`.
[[nodiscard]] inline verify_result verify_read(const std::string& path, const_memory memory,
                                               std::uint64_t offset, std::error_code& ec,
                                               const verify_options& options = {}) {
    io_failure failure;
    verify_result result = detail::verify_into(path, memory, offset, options.chunk_size, failure);
    ec = failure.code;
    return result;
}

NVMEIO_END_NAMESPACE

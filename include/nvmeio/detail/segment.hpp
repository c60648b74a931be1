#pragma once
/// \file detail/segment.hpp
/// What a front end hands the engine (detail/engine.hpp): the segments of one file to move, how
/// to run, and what a write does to the file around them (reserving its range first, trimming
/// padding after).

#include <cstddef>
#include <cstdint>

#include "nvmeio/detail/file_door.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/perf.hpp"

namespace nvmeio::detail {

/// Makes `[offset, offset + length)` lie inside the file before any of it is written
/// (file::reserve_range: fallocate on regular files, under the file's size mutex; devices never
/// get one). An O_DIRECT write that grows a file is done synchronously inside io_submit on ext4
/// and XFS, which defeats the queue; and a reserved range is never cut by another writer's trim.
inline io_failure reserve_write_range(file& f, std::uint64_t offset, std::size_t length) {
    io_failure failure;
    file_door::reserve_range(f, offset, length, failure);
    return failure;
}

/// After a padded write (whole alignment units written past the caller's end, see
/// `segment::span`): when the file still ends where the padding ended, cuts it back to `keep`,
/// the larger of the caller's end and where the file ended inside that unit before. The check and
/// the cut hold the file's size mutex, so a range another writer reserved meanwhile is left alone.
inline io_failure trim_write_padding(file& f, std::uint64_t padded_end, std::uint64_t keep) {
    io_failure failure;
    file_door::trim_padding(f, padded_end, keep, failure);
    return failure;
}

/// One range of a transfer.
struct segment {
    std::byte* memory = nullptr;  ///< Memory side: aligned like the file's O_DIRECT rules.
    std::uint64_t offset = 0;     ///< File offset: aligned like the file's O_DIRECT rules.
    std::size_t length = 0;       ///< Bytes the caller wants moved.
    /// Bytes of `memory` the I/O may use, 0 for `length`. When it is `length` rounded up to the
    /// file's alignment (engine-owned memory), the whole segment goes through the queue: a read
    /// fetches whole units, a write writes whole units whose bytes past `length` the owner has
    /// merged from the file (and trims the file afterwards).
    std::size_t span = 0;
    std::size_t bytes = 0;  ///< Result: moved; fewer than `length` only for a read at the end.
    io_failure failure;     ///< Result: why the segment failed.
};

/// Before a write, reserves each run of adjacent segments (each starting where the one before
/// ends) with reserve_write_range; a run that cannot be reserved fails its segments.
inline void reserve_write_runs(file& f, segment* segments, std::size_t count) {
    for (std::size_t first = 0; first < count;) {
        std::size_t last = first;
        std::uint64_t end = segments[first].offset + segments[first].length;
        while (last + 1 < count && segments[last + 1].offset == end) {
            ++last;
            end += segments[last].length;
        }
        const std::uint64_t offset = segments[first].offset;
        const io_failure failure =
            reserve_write_range(f, offset, static_cast<std::size_t>(end - offset));
        for (std::size_t i = first; failure && i <= last; ++i) {
            if (!segments[i].failure) segments[i].failure = failure;
        }
        first = last + 1;
    }
}

/// How the engine runs.
struct engine_settings {
    bool drain_before_refill = false;   ///< Sequential: reap the whole round before refilling.
    bool one_request_per_call = false;  ///< submit_mode::single.
    transfer_perf* perf = nullptr;      ///< Measure into this (no clock is read without it).
};

}  // namespace nvmeio::detail

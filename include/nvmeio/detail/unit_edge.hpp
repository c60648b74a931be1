#pragma once
/// \file detail/unit_edge.hpp
/// The one mechanism for a range whose ends are off the file's O_DIRECT unit: the whole units that
/// cover it, which of them are partial, and what a partial unit holds before it is written (the
/// file's bytes, zeros past its end). file::read_at/write_at carry it out synchronously through a
/// bounce buffer (the engine's remnants too); a batch carries it out through the queue, as
/// staged segments padded to whole units (detail/batch_engine.hpp). Each only does the I/O its
/// way.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

/// The whole units [start, start + span) that cover bytes [start + skip, start + skip + length).
struct unit_cover {
    std::uint64_t start = 0;  ///< File offset of the first unit.
    std::size_t skip = 0;     ///< Bytes of the first unit before the range.
    std::size_t length = 0;   ///< The range's own bytes.
    std::size_t span = 0;     ///< skip + length, rounded up to whole units.
    std::size_t unit = 1;

    /// The cover of `length` bytes at `position` in units of `unit` (1: no unit, no padding), or
    /// of as many of them as fit, with the units' bytes before them, in `room` bytes.
    static unit_cover of(std::uint64_t position, std::size_t length, std::size_t unit,
                         std::size_t room = static_cast<std::size_t>(-1)) noexcept {
        // Spelled out rather than from alignment.hpp: file.hpp stands on this header, and the
        // headers it stands on include nothing of nvmeio's but version.hpp (tests/layout_test.sh).
        const std::uint64_t start = position / unit * unit;
        const auto skip = static_cast<std::size_t>(position - start);
        if (length > room - skip) length = room - skip;
        const std::size_t covered = skip + length;
        const std::size_t rest = covered % unit;
        return {start, skip, length, rest == 0 ? covered : covered + (unit - rest), unit};
    }

    /// Calls `merge(at)` for each partial unit (at its position in the cover, the first unit
    /// first, a unit both ends share once): the units a write must first fill with the file's
    /// bytes. Stops at the first `merge` that answers false, and answers that.
    template <class Merge>
    bool for_each_partial_unit(Merge&& merge) const {
        const bool head = skip != 0;
        const bool tail = (skip + length) % unit != 0 && (span > unit || !head);
        if (head && !merge(std::size_t{0})) return false;
        return !tail || merge(span - unit);
    }
};

/// After a merge read of one partial unit that got `got` bytes: the rest of it lies past the
/// file's end, where the file reads as zeros, and a padded write must put zeros there too.
inline void zero_past_end(std::byte* unit_memory, std::size_t got, std::size_t unit) noexcept {
    if (got < unit) std::memset(unit_memory + got, 0, unit - got);
}

/// Of `length` bytes at `at` in units from which a read got the first `got` bytes, how many the
/// file had (what is copied out to the caller; the rest lies past its end).
[[nodiscard]] inline std::size_t bytes_found(std::size_t at, std::size_t length,
                                             std::size_t got) noexcept {
    if (got <= at) return 0;
    return got - at < length ? got - at : length;
}

/// Where the file ends after a padded write of [.., padded_end) that the writer has trimmed: its
/// own end `writer_end`, or where the file ended before inside the padding, if further.
[[nodiscard]] inline std::uint64_t padded_write_keep(std::uint64_t writer_end,
                                                     std::uint64_t file_end_before) noexcept {
    return writer_end > file_end_before ? writer_end : file_end_before;
}

}  // namespace detail
NVMEIO_END_NAMESPACE

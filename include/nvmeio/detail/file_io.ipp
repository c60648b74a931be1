#pragma once
/// \file detail/file_io.ipp
/// nvmeio::file's synchronous reads and writes: the plain loops, and the ranges O_DIRECT cannot
/// take as they are (bounced through whole alignment units, merged with the file's bytes).

// Included by file.hpp after the class; not meant to be included on its own.

NVMEIO_BEGIN_NAMESPACE

inline std::size_t file::read_plain(void* buffer, std::size_t length, std::uint64_t offset,
                                    io_failure& failure) const noexcept {
    auto* out = static_cast<std::byte*>(buffer);
    std::size_t done = 0;
    while (done < length) {
        const iovec part{out + done, length - done};
        const ssize_t got = ::preadv2(fd_, &part, 1, static_cast<off_t>(offset + done), rw_flags_);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            failure = {detail::errno_code(errno), "read", path(), offset + done, length - done};
            return done;
        }
        if (got == 0) break;  // end of file
        done += static_cast<std::size_t>(got);
        // On O_DIRECT a short read ending off alignment can only be the end of the file, and
        // asking again from there would be refused.
        if (direct_ && !is_aligned(offset + done, alignment_.offset)) break;
    }
    return done;
}

inline bool file::write_plain(const void* buffer, std::size_t length, std::uint64_t offset,
                              io_failure& failure) const noexcept {
    const auto* in = static_cast<const std::byte*>(buffer);
    std::size_t done = 0;
    while (done < length) {
        const iovec part{const_cast<std::byte*>(in + done), length - done};
        const ssize_t put = ::pwritev2(fd_, &part, 1, static_cast<off_t>(offset + done), rw_flags_);
        if (put < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            failure = {detail::errno_code(errno), "write", path(), offset + done, length - done};
            return false;
        }
        if (put == 0) {  // no progress and no error: the device is full in all but name
            failure = {detail::errno_code(ENOSPC), "write", path(), offset + done, length - done};
            return false;
        }
        done += static_cast<std::size_t>(put);
    }
    return true;
}

namespace detail {
// file::read_at and write_at bounce unaligned O_DIRECT ranges through a buffer of this size
// (rounded to the file's alignment); not batch_options::bounce_size, a batch's bound.
inline constexpr std::size_t sync_bounce_size = 64 * 1024;
}  // namespace detail

inline std::size_t file::read_at(mutable_memory memory, std::uint64_t offset,
                                 io_failure& failure) const {
    void* const buffer = memory.data();
    const std::size_t length = memory.size();
    failure = {};
    if (!is_open()) {
        failure = {detail::errno_code(EBADF), operation_name("read"), path(), offset, length};
        return 0;
    }
    const std::size_t unit = required_alignment();
    if (unit == 1 || (is_aligned(buffer, alignment_.memory) && is_aligned(offset, unit) &&
                      is_aligned(length, unit))) {
        return read_plain(buffer, length, offset, failure);
    }
    // Unaligned on an O_DIRECT handle: read the whole units that cover it into a bounce buffer
    // and copy out what the file had (detail/unit_edge.hpp).
    aligned_buffer bounce(static_cast<std::size_t>(align_up(detail::sync_bounce_size, unit)),
                          std::max<std::size_t>(unit, 64));
    auto* out = static_cast<std::byte*>(buffer);
    std::size_t done = 0;
    while (done < length) {
        const std::uint64_t position = offset + done;
        auto cover = detail::unit_cover::of(position, length - done, unit, bounce.capacity());
        // The kernel refuses a range ending past 2^63 - 1, so O_DIRECT cannot address the last
        // unit below it (a buffered read of those bytes is the end of the file).
        constexpr auto max_offset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
        if (cover.start <= max_offset && cover.span > max_offset - cover.start) {
            const auto reachable =
                static_cast<std::size_t>(align_down(max_offset - cover.start, unit));
            if (reachable <= cover.skip) {
                std::error_code ignored;
                if (size(ignored) <= position && !ignored) break;  // the file ends before
                failure = {detail::errno_code(EOVERFLOW),
                           "read (O_DIRECT cannot address the last alignment unit below 2^63; "
                           "open with direct_io::off)",
                           path(), position, length - done};
                return done;
            }
            cover.span = reachable;
            cover.length = reachable - cover.skip;
        }
        const std::size_t got = read_plain(bounce.data(), cover.span, cover.start, failure);
        if (failure) {
            failure.offset = position;
            failure.length = length - done;
            return done;
        }
        const std::size_t useful = detail::bytes_found(cover.skip, cover.length, got);
        if (useful == 0) break;  // end of file before `position`
        std::memcpy(out + done, bounce.data() + cover.skip, useful);
        done += useful;
        if (useful < cover.length) break;  // end of file inside this cover
    }
    return done;
}

inline void file::reserve_range(std::uint64_t offset, std::size_t length,
                                io_failure& failure) const {
    (void)reserve_and_size(offset, length, failure);
}

inline std::uint64_t file::reserve_and_size(std::uint64_t offset, std::size_t length,
                                            io_failure& failure) const {
    failure = {};
    if (length == 0 || kind_ != file_kind::regular || !size_lock_) return 0;
    const std::uint64_t end = offset + length;
    std::error_code ec;
    // The size never drops below what a writer reserved (trims stop there), so a range seen
    // inside the file stays inside it.
    const std::uint64_t seen = size(ec);
    if (seen >= end && !ec) return seen;
    std::lock_guard<std::mutex> lock(*size_lock_);
    const std::uint64_t current = size(ec);
    if (ec) {
        failure = {ec, "fstat (before a write)", path(), offset, length};
        return 0;
    }
    if (current >= end) return current;
    int rc;
    do {
        rc = ::fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(length));
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) return end;
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
        failure = {detail::errno_code(errno), "write (reserving its range with fallocate)", path(),
                   offset, length};
        return 0;
    }
    truncate_unlocked(end, ec);  // no fallocate here: raise the size only
    if (ec) failure = {ec, "write (extending the file with ftruncate)", path(), offset, length};
    return end;
}

inline bool file::write_merged(std::byte* bounce, const std::byte* bytes,
                               const detail::unit_cover& cover, io_failure& failure) const {
    // Only the partial units need the file's bytes; what the file does not have (past its end)
    // is zero.
    const bool merged = cover.for_each_partial_unit([&](std::size_t at) {
        const std::size_t got = read_plain(bounce + at, cover.unit, cover.start + at, failure);
        if (failure) {
            failure.operation = "read (merging an unaligned write)";
            return false;
        }
        detail::zero_past_end(bounce + at, got, cover.unit);
        return true;
    });
    if (!merged) return false;
    std::memcpy(bounce + cover.skip, bytes, cover.length);
    return write_plain(bounce, cover.span, cover.start, failure);
}

inline void file::write_at(const_memory memory, std::uint64_t offset, io_failure& failure) const {
    const void* const buffer = memory.data();
    const std::size_t length = memory.size();
    failure = {};
    if (!is_open()) {
        failure = {detail::errno_code(EBADF), operation_name("write"), path(), offset, length};
        return;
    }
    if (length == 0) return;
    // A size the file had after the reservation: it never drops below that (see reserve_range).
    const std::uint64_t known_size = reserve_and_size(offset, length, failure);
    if (failure) return;
    const std::size_t unit = required_alignment();
    if (unit == 1 || (is_aligned(buffer, alignment_.memory) && is_aligned(offset, unit) &&
                      is_aligned(length, unit))) {
        write_plain(buffer, length, offset, failure);
        return;
    }
    // Unaligned on an O_DIRECT handle: merge the caller's bytes into the whole units that cover
    // them (detail/unit_edge.hpp).
    aligned_buffer bounce(static_cast<std::size_t>(align_up(detail::sync_bounce_size, unit)),
                          std::max<std::size_t>(unit, 64));
    const auto* in = static_cast<const std::byte*>(buffer);
    const std::uint64_t end = offset + length;
    std::size_t done = 0;
    while (done < length) {
        const std::uint64_t position = offset + done;
        const auto cover = detail::unit_cover::of(position, length - done, unit, bounce.capacity());
        const std::uint64_t padded_end = cover.start + cover.span;
        bool written;
        std::error_code ec;
        if (padded_end <= known_size || kind_ != file_kind::regular || !size_lock_ ||
            (size(ec) >= padded_end && !ec)) {
            // Inside the file (reserve_range made it reach `end`): the size does not change.
            written = write_merged(bounce.data(), in + done, cover, failure);
        } else {
            // The last unit passes the end: write it whole, then trim the file back to the size
            // that stood before, which holds every other writer's end (they reserved under this
            // mutex), and never below this writer's own end.
            std::lock_guard<std::mutex> lock(*size_lock_);
            const std::uint64_t before = size(ec);
            if (ec) {
                failure = {ec, "fstat (before an unaligned write)", path(), position, cover.length};
                return;
            }
            written = write_merged(bounce.data(), in + done, cover, failure);
            const std::uint64_t keep = detail::padded_write_keep(end, before);
            if (written) {
                trim_padding_unlocked(padded_end, keep, ec);
                if (ec) {
                    failure = {ec, "truncate (after an unaligned write)", path(), keep, 0};
                    return;
                }
            }
        }
        if (!written) {
            failure.offset = position;
            failure.length = length - done;
            return;
        }
        done += cover.length;
    }
}

NVMEIO_END_NAMESPACE

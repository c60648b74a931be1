#pragma once
/// \file backend/request.hpp
/// What a strategy hands a backend and what it gets back: the whole Backend contract.
///
/// A Backend policy is a move-less class with
///  - `explicit Backend(unsigned queue_depth, ...)` — throws on failure;
///  - `int submit(const io_request* requests, std::size_t count) noexcept` — queues up to
///    `count` requests and returns how many it accepted (possibly fewer), or `-errno`;
///  - `int reap(io_completion* out, std::size_t min, std::size_t max, const timespec* timeout)
///    noexcept` — waits for at least `min` completions (or the timeout) and returns how many it
///    stored, or `-errno` (`-EINTR` is possible and means "call again");
///  - `std::size_t in_flight() const noexcept` — requests submit accepted whose completions reap
///    has not handed back yet (a completion the backend holds itself counts until it does): the
///    one count of them, which the engine asks (a run whose reap failed leaves some behind, and
///    the next run collects them before it reuses any memory of its own);
///  - `static constexpr const char* name`;
///  - optionally, where it cuts requests (io_uring on a block device), `limits_for`,
///    `segment_stays_whole` and `request_length`, which keep nothing between calls: what one
///    answers, the engine passes to the next (docs/ARCHITECTURE.md, "The backend contract";
///    io_uring_backend's).
/// A backend never retries, never reorders results and never looks at what a result means.

#include <cstddef>
#include <cstdint>

#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {
class pin_record;
}

/// One asynchronous request: `length` bytes between `buffer` and `offset` of descriptor `fd`.
struct io_request {
    int fd = -1;                     ///< Open descriptor.
    operation op = operation::read;  ///< Direction.
    void* buffer = nullptr;          ///< Memory side.
    std::size_t length = 0;          ///< Bytes.
    std::uint64_t offset = 0;        ///< File offset.
    std::uint64_t user_data = 0;     ///< Returned untouched in the completion.
    /// `RWF_*` flags for the kernel (`RWF_DONTCACHE` on a `direct_io::uncached` file), 0 for none.
    int rw_flags = 0;
    /// The pin record of the aligned_buffer that `buffer` lies in, or null: what lets an io_uring
    /// ring pin that buffer once (detail/pin_record.hpp); other backends ignore it.
    detail::pin_record* pins = nullptr;
};

/// How a backend cuts a transfer's requests: its longest request (the block size when it does
/// not cut), and the requests it lets be in flight at once (at least the queue depth).
struct request_limits {
    std::size_t request_size = 0;  ///< Bytes per request at most, unless a block stays whole.
    unsigned slots = 0;            ///< Requests in flight at most.
};

/// One finished request.
struct io_completion {
    std::uint64_t user_data = 0;  ///< The request's `user_data`.
    std::int64_t result = 0;      ///< Bytes moved (maybe fewer than asked), or `-errno`.
};

NVMEIO_END_NAMESPACE

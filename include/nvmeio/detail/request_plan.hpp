#pragma once
/// \file detail/request_plan.hpp
/// How large the engine's requests are and how many it keeps in flight, for one file.
///
/// A backend like io_uring tries each request without blocking first. On a block device under
/// O_DIRECT, a request the block layer would have to split fails that try and is issued again
/// from a kernel worker thread, its pages pinned twice (see queue_limits). For such a backend
/// requests are cut to the largest size the device takes whole, and a block cut into pieces
/// keeps its bytes in flight: queue depth x pieces requests, no more than the backend holds
/// completions for and, past the queue depth, than the device queues (more would only wait).

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "nvmeio/alignment.hpp"

namespace nvmeio::detail {

/// Whether `Backend` declares `keeps_to_queue_limits` true.
template <class Backend, class = void>
struct keeps_to_queue_limits : std::false_type {};
template <class Backend>
struct keeps_to_queue_limits<Backend, std::void_t<decltype(Backend::keeps_to_queue_limits)>>
    : std::bool_constant<Backend::keeps_to_queue_limits> {};

/// Request size and requests in flight at most.
struct request_plan {
    std::size_t request_size = 0;
    unsigned slots = 0;
};

/// The plan for a context of `queue_depth` x `block_size` on a file with `limits`, O_DIRECT
/// alignment `unit` (when `direct`), through a backend that keeps to the limits and holds
/// `completion_capacity` (>= queue_depth) completions.
[[nodiscard]] inline request_plan plan_requests(const queue_limits& limits, bool direct,
                                                std::size_t unit, std::size_t block_size,
                                                unsigned queue_depth,
                                                std::size_t completion_capacity) noexcept {
    const std::size_t whole = limits.unsplit_request_bytes;
    if (!direct || whole < unit || whole % unit != 0 || whole >= block_size)
        return {block_size, queue_depth};
    const std::size_t pieces = (block_size + whole - 1) / whole;
    std::size_t slots = pieces > completion_capacity / queue_depth
                            ? completion_capacity
                            : std::size_t{queue_depth} * pieces;
    if (limits.requests > 0)
        slots = std::min(slots, std::max<std::size_t>(queue_depth, limits.requests));
    return {whole, static_cast<unsigned>(std::max<std::size_t>(queue_depth, slots))};
}

}  // namespace nvmeio::detail

#pragma once
/// \file detail/engine_scratch.hpp
/// The engine's working memory. Each context keeps one and every transfer on it reuses it, so a
/// transfer in steady state allocates nothing. A context serves one thread at a time
/// (basic_aio_context::begin_transfer), so its scratch needs no lock.

#include <chrono>
#include <cstddef>
#include <tuple>
#include <vector>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/detail/request_plan.hpp"
#include "nvmeio/detail/spin_backoff.hpp"

namespace nvmeio::detail {

struct engine_scratch {
    struct segment_state {
        std::size_t body = 0;         // bytes that go through the backend
        std::size_t end_of_data = 0;  // where a read met the end of the file
    };
    struct slot {  // one queue entry: a request's range of a segment
        std::size_t segment = 0;
        std::size_t position = 0;  // of the request's range within its segment
        std::size_t length = 0;
        std::size_t done = 0;
        std::chrono::steady_clock::time_point submitted{};
    };
    struct remnant {  // what goes through the synchronous path afterwards
        std::size_t segment;
        std::size_t position;
        std::size_t length;
        bool operator<(const remnant& o) const {
            return std::tie(segment, position) < std::tie(o.segment, o.position);
        }
    };

    std::vector<segment_state> state;
    std::vector<slot> slots;
    std::vector<unsigned> free;
    std::vector<io_request> pending;
    std::vector<io_completion> completions;
    std::vector<remnant> remnants;
    std::vector<double> submit_samples;
    std::vector<double> completion_samples;
    spin_backoff backoff;  // which waits poll before sleeping (context_options::spin)
    pagemap pages;         // which memory huge pages back (request_plan.hpp)
    aligned_buffer arena;  // batches' bounce arena, kept for the next (engine_door::arena_loan)
};

}  // namespace nvmeio::detail

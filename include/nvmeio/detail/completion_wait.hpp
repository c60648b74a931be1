#pragma once
/// \file detail/completion_wait.hpp
/// How the engine (detail/engine.hpp) waits for completions: where context_options::spin asks
/// for it and the back-off lets it, it first polls the backend (a reap of at least 0, which
/// never sleeps) until enough came or the time ran out; then it sleeps in the backend for the
/// rest. Interrupted reaps (-EINTR) are asked again.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <vector>

#include "nvmeio/backend/request.hpp"
#include "nvmeio/detail/spin_backoff.hpp"

namespace nvmeio::detail {

// Waits for at least `min` completions (at most `completions.size()`), handing each reap's
// results to `handle(first, count)`. False when reaping failed: `error` is then its -errno, and
// requests may still be in flight.
template <class Backend, class Handle>
bool wait_for_completions(Backend& backend, std::vector<io_completion>& completions,
                          std::size_t min, std::chrono::steady_clock::duration spin,
                          spin_backoff& backoff, int& error, Handle&& handle) {
    using clock = std::chrono::steady_clock;
    const auto take = [&](std::size_t at_least) {
        int got;
        do {
            got = backend.reap(completions.data(), at_least, completions.size(), nullptr);
        } while (got == -EINTR);
        if (got > 0) handle(completions.data(), static_cast<std::size_t>(got));
        return got;
    };
    min = std::min(min, completions.size());
    if (spin.count() > 0 && backoff.should_poll()) {
        const clock::time_point deadline = clock::now() + spin;
        bool ran_out = false;
        while (min > 0) {
            const int got = take(0);
            if (got < 0) {
                error = got;
                return false;
            }
            min -= std::min(min, static_cast<std::size_t>(got));
            if (min == 0) break;
            if (clock::now() >= deadline) {
                backoff.ran_out();
                ran_out = true;
                break;
            }
            cpu_relax();
        }
        if (!ran_out) backoff.succeeded();
    }
    if (min == 0) return true;
    const int got = take(min);
    if (got >= 0) return true;
    error = got;
    return false;
}

}  // namespace nvmeio::detail

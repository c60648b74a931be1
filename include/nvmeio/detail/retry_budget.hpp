#pragma once
/// \file detail/retry_budget.hpp
/// How long the engine keeps asking again when the kernel says "try again".

#include <chrono>

namespace nvmeio::detail {

/// How long a request the kernel keeps refusing is tried again: an io_submit answering EAGAIN
/// with nothing in flight, or completions answering EAGAIN/EINTR/ECANCELED without progress.
inline constexpr std::chrono::seconds submit_retry_budget{10};

/// Counts `submit_retry_budget` from the first of a run of "try again" answers.
class retry_budget {
  public:
    /// Progress: the next "try again" starts a new budget.
    void reset() noexcept { deadline_ = {}; }
    /// Starts the budget on first use; true once it is spent.
    bool spent() noexcept {
        const auto now = std::chrono::steady_clock::now();
        if (deadline_ == std::chrono::steady_clock::time_point{})
            deadline_ = now + submit_retry_budget;
        return now >= deadline_;
    }

  private:
    std::chrono::steady_clock::time_point deadline_{};
};

}  // namespace nvmeio::detail

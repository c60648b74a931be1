#pragma once
/// \file detail/spin_backoff.hpp
/// When a wait for completions polls before it sleeps (context_options::spin), and how a polling
/// thread spins.

namespace nvmeio::detail {

/// Decides which waits poll. Every wait polls until polls run out of time twice in a row; from
/// then on the next 1, 2, 4, ... 64 waits sleep at once before one polls again. A poll that
/// succeeds resets it, so one slow completion among quick ones costs only its own wait, and a
/// device slower than the limit is polled for a few waits in a hundred.
class spin_backoff {
  public:
    /// Whether this wait polls (false: it sleeps at once, and counts as skipped).
    [[nodiscard]] bool should_poll() noexcept {
        if (skip_ == 0) return true;
        --skip_;
        return false;
    }
    /// The poll found what it waited for.
    void succeeded() noexcept { failures_ = 0; }
    /// The poll ran out of time.
    void ran_out() noexcept {
        if (failures_ < max_failures) ++failures_;
        skip_ = failures_ < 2 ? 0 : 1U << (failures_ - 2);
    }

  private:
    static constexpr unsigned max_failures = 8;  // skips up to 1 << 6 = 64 waits
    unsigned skip_ = 0;                          // waits left that sleep at once
    unsigned failures_ = 0;                      // polls in a row that ran out of time
};

/// Tells the CPU that this thread is spinning (x86 `pause`, Arm `yield`), so that it waits a few
/// cycles without hammering the memory it polls or starving a sibling hyperthread.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    asm volatile("yield" ::: "memory");
#endif
}

}  // namespace nvmeio::detail

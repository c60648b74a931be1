#pragma once
/// \file detail/context_guard.hpp
/// The two cheap checks every context makes when a transfer starts: that it is used in the
/// process that created it (not in a child after fork), and, for a single-queue context, that no
/// other thread is using it at the same time. Both are misuse, reported as std::logic_error
/// before anything touches the queue, so the rightful user's transfer is unaffected.
///
/// The process id comes from detail/process.hpp (cached, refreshed in a child by a pthread_atfork
/// handler): one load and one comparison. A child made with raw clone() or vfork() is not detected.

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "nvmeio/detail/process.hpp"

namespace nvmeio {
namespace detail {

/// Remembers the process that created an object.
class creator_process {
  public:
    creator_process() noexcept : pid_(this_process_id()) {}

    /// True in the creating process; false in a child made by fork.
    [[nodiscard]] bool is_current() const noexcept { return pid_ == this_process_id(); }

    /// Throws std::logic_error naming `what` when called in another process than the creator's.
    void require_current(const char* what) const {
        if (is_current()) return;
        throw std::logic_error(std::string("nvmeio: ") + what +
                               " used in a process other than the one that created it (created "
                               "by pid " +
                               std::to_string(pid_) + ", used by pid " +
                               std::to_string(this_process_id()) +
                               "): its queue and threads belong to the parent after fork; create "
                               "a new one in the child");
    }

  private:
    pid_t pid_;
};

/// A flag that one transfer at a time may hold.
class exclusive_use {
  public:
    /// Holds the flag until destroyed.
    class claim {
      public:
        explicit claim(std::atomic<bool>& flag) noexcept : flag_(&flag) {}
        claim(const claim&) = delete;
        claim& operator=(const claim&) = delete;
        ~claim() { flag_->store(false, std::memory_order_release); }

      private:
        std::atomic<bool>* flag_;
    };

    /// Takes the flag; throws std::logic_error naming `what` when another thread holds it.
    [[nodiscard]] claim acquire(const char* what) {
        if (in_use_.exchange(true, std::memory_order_acquire)) {
            throw std::logic_error(
                std::string("nvmeio: ") + what +
                " used by two threads at once (a transfer is already running on it): use one "
                "context per thread, or a parallel_context or async_context, which take "
                "transfers from any number of threads");
        }
        return claim(in_use_);
    }

  private:
    std::atomic<bool> in_use_{false};
};

}  // namespace detail
}  // namespace nvmeio

#pragma once
/// \file detail/process.hpp
/// Who may use an object: the two cheap checks every context makes when a transfer starts, that
/// it runs in its creator's process (after fork a child shares its rings but must not use them)
/// and that no other thread is using it; both are misuse, an std::logic_error before anything
/// touches the queue. The process id is cached (glibc's getpid() is a system call) and refreshed
/// in a child by a pthread_atfork handler; a child made by raw clone() or vfork() runs none.

#include <pthread.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

inline std::atomic<pid_t>& cached_process_id() noexcept {
    static std::atomic<pid_t> pid{0};
    return pid;
}

// Which fork of this memory image the process is: 1 in the first process to ask, one more in
// each child than in its parent.
inline std::atomic<std::uint32_t>& cached_generation() noexcept {
    static std::atomic<std::uint32_t> generation{0};
    return generation;
}

inline void refresh_process_id() noexcept {
    cached_process_id().store(::getpid(), std::memory_order_relaxed);
    cached_generation().fetch_add(1, std::memory_order_relaxed);
}

inline void register_process_id() noexcept {
    static const bool registered = [] {
        refresh_process_id();
        ::pthread_atfork(nullptr, nullptr, &refresh_process_id);
        return true;
    }();
    (void)registered;
}

/// This process's id: one load once the handler is registered (on the first call).
[[nodiscard]] inline pid_t this_process_id() noexcept {
    register_process_id();
    return cached_process_id().load(std::memory_order_relaxed);
}

/// This process among those that share its memory image by fork: its id and its generation,
/// so that a descendant given a pid its ancestor had (once that one has exited) still differs.
[[nodiscard]] inline std::uint64_t this_process_token() noexcept {
    register_process_id();
    return std::uint64_t{cached_generation().load(std::memory_order_relaxed)} << 32 |
           static_cast<std::uint32_t>(cached_process_id().load(std::memory_order_relaxed));
}

/// The calling thread's kernel id (gettid), for objects that serve one thread: cached per thread,
/// and asked again in a child after fork, where the forking thread has a new id.
[[nodiscard]] inline pid_t this_thread_id() noexcept {
    thread_local pid_t id = 0;
    thread_local pid_t in_process = 0;
    const pid_t process = this_process_id();
    if (in_process != process) {
        id = static_cast<pid_t>(::syscall(SYS_gettid));
        in_process = process;
    }
    return id;
}

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
NVMEIO_END_NAMESPACE

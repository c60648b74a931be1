#pragma once
/// \file detail/process.hpp
/// This process's id without a system call (glibc's getpid() is one), for objects that belong to
/// the process that created them: after fork a child shares their memory mappings (a kernel
/// ring among them) but must not use them. The id is cached and refreshed in the child by a
/// pthread_atfork handler; a child made by raw clone() or vfork() runs no handler.

#include <pthread.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>

namespace nvmeio::detail {

inline std::atomic<pid_t>& cached_process_id() noexcept {
    static std::atomic<pid_t> pid{0};
    return pid;
}

inline void refresh_process_id() noexcept {
    cached_process_id().store(::getpid(), std::memory_order_relaxed);
}

/// This process's id: one load once the handler is registered (on the first call).
[[nodiscard]] inline pid_t this_process_id() noexcept {
    static const bool registered = [] {
        refresh_process_id();
        ::pthread_atfork(nullptr, nullptr, &refresh_process_id);
        return true;
    }();
    (void)registered;
    return cached_process_id().load(std::memory_order_relaxed);
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

}  // namespace nvmeio::detail

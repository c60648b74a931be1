#pragma once
/// \file backend/io_uring_support.hpp
/// Whether io_uring can be used: in this build (`io_uring_available`; the build defines
/// `NVMEIO_HAS_IO_URING`, else the header looks for `<liburing.h>`), and by this process on this
/// kernel (`io_uring_supported()`, so that a program can fall back to `libaio_backend`; see
/// docs/PARALLEL.md, "When the kernel refuses io_uring").

#ifndef NVMEIO_HAS_IO_URING
#if __has_include(<liburing.h>)
#define NVMEIO_HAS_IO_URING 1
#else
#define NVMEIO_HAS_IO_URING 0
#endif
#endif

#include <cerrno>
#include <string>
#include <system_error>

#include "nvmeio/alignment.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

#if NVMEIO_HAS_IO_URING
#include <liburing.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

NVMEIO_BEGIN_NAMESPACE

/// True when this build has `io_uring_backend`.
inline constexpr bool io_uring_available = NVMEIO_HAS_IO_URING != 0;

/// The value of `/proc/sys/kernel/io_uring_disabled` (0 allowed, 1 root/group only, 2 disabled),
/// or -1 when the kernel has no such setting.
[[nodiscard]] inline int io_uring_disabled_setting() {
    return detail::read_number("/proc/sys/kernel/io_uring_disabled", -1);
}

namespace detail {

// Why io_uring_setup failed, in words a user can act on.
inline std::string describe_io_uring_setup_failure(int error_number, unsigned queue_depth) {
    std::string text = "io_uring_setup(queue_depth=" + std::to_string(queue_depth) + ")";
    if (error_number == EPERM || error_number == ENOSYS || error_number == EACCES) {
        const int setting = io_uring_disabled_setting();
        text += " (the kernel refuses io_uring: ";
        if (setting > 0) {
            text += "kernel.io_uring_disabled = " + std::to_string(setting);
        } else {
            text +=
                "a seccomp filter, as container runtimes install by default, or a kernel "
                "built without io_uring";
        }
        text += "; use libaio_backend instead)";
    } else if (error_number == ENOMEM) {
        text +=
            " (RLIMIT_MEMLOCK too low for the rings on this kernel; lower the queue depth or "
            "raise the limit)";
    }
    return text;
}

}  // namespace detail

#if NVMEIO_HAS_IO_URING

namespace detail {

// Sets `ring` up for `queue_depth` requests and `completions` completions with the newest flags
// this kernel takes, falling back flag by flag; 0 with `params` filled, or -errno.
//  - For one thread (`one_thread`): SINGLE_ISSUER | DEFER_TASKRUN (Linux 6.1), then
//    SINGLE_ISSUER alone (6.0). Made disabled (R_DISABLED): the thread that first submits
//    enables it (enable_ring) and so becomes its one issuer, wherever it was made.
//  - Then, for any thread: COOP_TASKRUN | TASKRUN_FLAG (5.19), CQSIZE (5.5), nothing.
// COOP_TASKRUN: no interrupt per completion, as the submitting thread reaps; TASKRUN_FLAG: the
// ring says when the kernel holds completions it posts only once the thread enters it
// (IORING_SQ_TASKRUN), so a reap polling from user space knows when to enter.
inline int setup_ring(io_uring& ring, io_uring_params& params, unsigned queue_depth,
                      unsigned completions, bool one_thread) noexcept {
    constexpr unsigned cooperative =
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE;
    constexpr unsigned disabled_for_one = IORING_SETUP_R_DISABLED | IORING_SETUP_SINGLE_ISSUER;
    constexpr unsigned choices[] = {disabled_for_one | IORING_SETUP_DEFER_TASKRUN | cooperative,
                                    disabled_for_one | cooperative, cooperative,
                                    IORING_SETUP_CQSIZE, 0u};
    int rc = -EINVAL;
    for (const unsigned flags : choices) {
        if (!one_thread && (flags & IORING_SETUP_SINGLE_ISSUER) != 0) continue;
        params = {};
        params.flags = flags;
        if ((flags & IORING_SETUP_CQSIZE) != 0) params.cq_entries = completions;
        rc = ::io_uring_queue_init_params(queue_depth, &ring, &params);
        if (rc != -EINVAL) break;
    }
    return rc;
}

// Enables a ring set up disabled; the calling thread becomes its issuer. 0 or -errno. (Called
// raw: liburing 2.3 declares io_uring_enable_rings but its library lacks it.)
inline int enable_ring(const io_uring& ring) noexcept {
    const long rc =
        ::syscall(__NR_io_uring_register, ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
    return rc < 0 ? -errno : 0;
}

}  // namespace detail

/// True when the kernel lets this process create an io_uring; otherwise `why` holds the
/// reason (EPERM, ENOSYS...) and a program can fall back to libaio_backend.
[[nodiscard]] inline bool io_uring_supported(std::error_code& why) noexcept {
    io_uring ring{};
    const int rc = ::io_uring_queue_init(1, &ring, 0);
    if (rc < 0) {
        why = detail::errno_code(-rc);
        return false;
    }
    ::io_uring_queue_exit(&ring);
    why.clear();
    return true;
}

#else

/// Without liburing in the build io_uring is never supported; `why` is ENOTSUP.
[[nodiscard]] inline bool io_uring_supported(std::error_code& why) noexcept {
    why = detail::errno_code(ENOTSUP);
    return false;
}

#endif

/// True when the kernel (and the build) lets this process use io_uring.
[[nodiscard]] inline bool io_uring_supported() noexcept {
    std::error_code ignored;
    return io_uring_supported(ignored);
}

NVMEIO_END_NAMESPACE

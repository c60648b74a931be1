#pragma once
/// \file backend/io_uring_support.hpp
/// Whether io_uring can be used: in this build, and by this process on this kernel.
///
/// Present when liburing is: the build defines `NVMEIO_HAS_IO_URING` to 1 or 0 (CMake option
/// `NVMEIO_WITH_IO_URING`); without that definition the header looks for `<liburing.h>`.
/// `nvmeio::io_uring_available` says at compile time whether `io_uring_backend`
/// (backend/io_uring.hpp) exists.
///
/// A kernel may refuse io_uring at run time (`kernel.io_uring_disabled`, a seccomp filter as
/// container runtimes install by default, or a kernel built without it). The backend's
/// constructor then throws `io_error` saying so; `io_uring_supported()` asks the same question
/// without throwing, so a program can fall back to `libaio_backend` (see docs/PARALLEL.md).

#ifndef NVMEIO_HAS_IO_URING
#if __has_include(<liburing.h>)
#define NVMEIO_HAS_IO_URING 1
#else
#define NVMEIO_HAS_IO_URING 0
#endif
#endif

#include <cerrno>
#include <fstream>
#include <string>
#include <system_error>

#include "nvmeio/error.hpp"

#if NVMEIO_HAS_IO_URING
#include <liburing.h>
#endif

namespace nvmeio {

/// True when this build has `io_uring_backend`.
inline constexpr bool io_uring_available = NVMEIO_HAS_IO_URING != 0;

/// The value of `/proc/sys/kernel/io_uring_disabled` (0 allowed, 1 root/group only, 2 disabled),
/// or -1 when the kernel has no such setting.
[[nodiscard]] inline int io_uring_disabled_setting() {
    std::ifstream in("/proc/sys/kernel/io_uring_disabled");
    int value = -1;
    if (in >> value) return value;
    return -1;
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

}  // namespace nvmeio

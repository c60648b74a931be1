#pragma once
/// \file backend/io_uring.hpp
/// The second Backend policy: io_uring through liburing (optional).
///
/// Present when liburing is: the build defines `NVMEIO_HAS_IO_URING` to 1 or 0 (CMake option
/// `NVMEIO_WITH_IO_URING`); without that definition the header looks for `<liburing.h>`.
/// `nvmeio::io_uring_available` says at compile time whether `io_uring_backend` exists.
///
/// A kernel may refuse io_uring at run time (`kernel.io_uring_disabled`, a seccomp filter as
/// container runtimes install by default, or a kernel built without it). The constructor then
/// throws `io_error` saying so; `io_uring_supported()` asks the same question without throwing,
/// so a program can fall back to `libaio_backend` (see docs/PARALLEL.md).

#ifndef NVMEIO_HAS_IO_URING
#if __has_include(<liburing.h>)
#define NVMEIO_HAS_IO_URING 1
#else
#define NVMEIO_HAS_IO_URING 0
#endif
#endif

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <string>
#include <system_error>

#include "nvmeio/backend/request.hpp"
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

/// io_uring. One ring per instance; not thread-safe (one per thread, like libaio_backend).
///
/// A request accepted by `submit` is in the submission ring: if the kernel does not consume it
/// at once (io_uring_enter answered EAGAIN or EBUSY), the next `reap` hands it over, so an
/// accepted request is never lost and never submitted twice.
///
/// Signals: a wait interrupted by a signal returns -EINTR (the engine calls again). A request the
/// kernel cannot finish inline goes to the thread's io-wq workers; when a worker cannot be started
/// (a signal pending during the clone, RLIMIT_NPROC, pids.max) the request completes with
/// -ECANCELED, which the engine resubmits: nvmeio never cancels a request itself.
class io_uring_backend {
  public:
    /// The backend's name in reports.
    static constexpr const char* name = "io_uring";

    /// Creates a ring for up to `queue_depth` requests in flight. Throws std::invalid_argument
    /// for 0 or a depth above the kernel's limit (the message names the limit: 32768 since Linux
    /// 5.4), io_error when the kernel refuses (the message says why and names the fallback).
    explicit io_uring_backend(unsigned queue_depth) : queue_depth_(queue_depth) {
        if (queue_depth == 0) detail::throw_invalid("queue_depth must be at least 1 (got 0)");
        io_uring_params params{};
        // Completions are reaped by the submitting thread: no need for an interrupt per I/O.
        params.flags = IORING_SETUP_COOP_TASKRUN;
        int rc = ::io_uring_queue_init_params(queue_depth, &ring_, &params);
        if (rc == -EINVAL) {  // kernels before 5.19 do not know the flag
            params = {};
            rc = ::io_uring_queue_init_params(queue_depth, &ring_, &params);
        }
        if (rc == -EINVAL) {
            const unsigned limit = max_queue_depth();
            if (limit != 0 && queue_depth > limit) {
                detail::throw_invalid("queue_depth " + std::to_string(queue_depth) +
                                      " exceeds this kernel's io_uring limit of " +
                                      std::to_string(limit) +
                                      " entries (IORING_MAX_ENTRIES); lower the queue depth");
            }
        }
        if (rc < 0) {
            throw io_error({detail::errno_code(-rc),
                            detail::describe_io_uring_setup_failure(-rc, queue_depth), "", 0, 0});
        }
    }

    io_uring_backend(const io_uring_backend&) = delete;
    io_uring_backend& operator=(const io_uring_backend&) = delete;

    /// Tears the ring down; the kernel cancels or waits for requests still in flight.
    ~io_uring_backend() { ::io_uring_queue_exit(&ring_); }

    /// Queues up to `count` requests (at most the free queue depth) and hands them to the kernel;
    /// returns how many were queued, or -errno when none could be.
    int submit(const io_request* requests, std::size_t count) noexcept {
        std::size_t queued = 0;
        for (; queued < count; ++queued) {
            io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
            if (sqe == nullptr) break;  // the submission ring is full
            const io_request& r = requests[queued];
            // An SQE holds a 32-bit length; a shorter transfer is a short result the caller
            // already continues from.
            const auto length =
                static_cast<unsigned>(r.length < max_length ? r.length : max_length);
            if (r.op == operation::read) {
                ::io_uring_prep_read(sqe, r.fd, r.buffer, length, r.offset);
            } else {
                ::io_uring_prep_write(sqe, r.fd, r.buffer, length, r.offset);
            }
            ::io_uring_sqe_set_data64(sqe, r.user_data);
        }
        const int rc = ::io_uring_submit(&ring_);
        if (queued > 0) return static_cast<int>(queued);  // in the ring now, whatever rc says
        return rc < 0 ? rc : -EAGAIN;
    }

    /// Waits for between `min` and `max` completions; returns how many were stored, or -errno.
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        if (min > max) min = max;
        std::size_t got = take(out, max);
        if (got >= min) return static_cast<int>(got);
        const auto wanted = static_cast<unsigned>(min - got);
        int rc;
        if (timeout != nullptr) {
            __kernel_timespec limit{timeout->tv_sec, timeout->tv_nsec};
            io_uring_cqe* first = nullptr;
            rc = ::io_uring_submit_and_wait_timeout(&ring_, &first, wanted, &limit, nullptr);
            if (rc == -ETIME) rc = 0;
        } else {
            rc = ::io_uring_submit_and_wait(&ring_, wanted);  // also flushes queued requests
        }
        got += take(out + got, max - got);
        if (got == 0 && rc < 0) return rc;
        return static_cast<int>(got);
    }

    /// The queue depth the ring was created for.
    [[nodiscard]] unsigned queue_depth() const noexcept { return queue_depth_; }

    /// The deepest ring this kernel creates, or 0 when it cannot tell. Asked with
    /// IORING_SETUP_CLAMP, which makes the kernel shrink a too-deep ring to its limit instead of
    /// refusing it (so this briefly creates a ring of that depth).
    [[nodiscard]] static unsigned max_queue_depth() noexcept {
        io_uring ring{};
        io_uring_params params{};
        params.flags = IORING_SETUP_CLAMP;
        if (::io_uring_queue_init_params(1u << 30, &ring, &params) < 0) return 0;
        const unsigned limit = params.sq_entries;
        ::io_uring_queue_exit(&ring);
        return limit;
    }

  private:
    // Moves up to `max` ready completions into `out` without waiting.
    std::size_t take(io_completion* out, std::size_t max) noexcept {
        std::size_t got = 0;
        while (got < max) {
            io_uring_cqe* cqes[64];
            const std::size_t want = max - got < 64 ? max - got : 64;
            const unsigned ready =
                ::io_uring_peek_batch_cqe(&ring_, cqes, static_cast<unsigned>(want));
            for (unsigned i = 0; i < ready; ++i) {
                out[got + i].user_data = ::io_uring_cqe_get_data64(cqes[i]);
                out[got + i].result = cqes[i]->res;
            }
            ::io_uring_cq_advance(&ring_, ready);
            got += ready;
            if (ready < want) break;
        }
        return got;
    }

    static constexpr std::size_t max_length = std::size_t{1} << 30;

    io_uring ring_{};
    unsigned queue_depth_;
};

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

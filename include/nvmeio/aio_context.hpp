#pragma once
/// \file aio_context.hpp
/// An asynchronous I/O context: a Backend policy, the queue depth and block size that every
/// transfer through it uses, and the engine that runs them (detail/engine.hpp).

#include <chrono>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "nvmeio/backend/libaio.hpp"
#include "nvmeio/detail/engine.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// A queue of asynchronous requests served by `Backend` (libaio by default).
///
/// Not thread-safe: one context per thread. Two threads running transfers on it at once, or a
/// child after fork using it, get an `std::logic_error` before anything touches the queue, and the
/// rightful user is unaffected (docs/GUARANTEES.md 8); a child destroying it waits for nothing.
/// Destroying it waits for requests still in flight.
template <class Backend = libaio_backend>
class basic_aio_context {
  public:
    using backend_type = Backend;  ///< The policy.

    /// Creates the context; extra arguments go to the Backend's constructor after the queue
    /// depth. Throws std::invalid_argument for a zero queue depth or block size, and whatever the
    /// backend throws (io_error from its setup call).
    template <class... BackendArgs>
    explicit basic_aio_context(context_options options = {}, BackendArgs&&... backend_args)
        : options_(checked(options)),
          backend_(options.queue_depth, std::forward<BackendArgs>(backend_args)...) {
        if constexpr (has_ring<Backend>::value) {
            backend_.set_pin_once(options.pin_once);
            backend_.set_single_issuer(options.single_issuer);
        }
    }

    basic_aio_context(const basic_aio_context&) = delete;
    basic_aio_context& operator=(const basic_aio_context&) = delete;

    /// Requests in flight at once.
    [[nodiscard]] unsigned queue_depth() const noexcept { return options_.queue_depth; }
    /// Bytes per request.
    [[nodiscard]] std::size_t block_size() const noexcept { return options_.block_size; }
    /// Both settings.
    [[nodiscard]] const context_options& options() const noexcept { return options_; }
    /// The backend (to register buffers and files with an io_uring backend, say).
    [[nodiscard]] Backend& backend() noexcept { return backend_; }

  private:
    friend class detail::engine<Backend>;  // runs every transfer on the members below

    // Whether Backend has a ring that pins memory on its own and serves one thread
    // (io_uring_backend), so that pin_once and single_issuer apply.
    template <class B, class = void>
    struct has_ring : std::false_type {};
    template <class B>
    struct has_ring<B, std::void_t<decltype(std::declval<B&>().set_pin_once(true)),
                                   decltype(std::declval<B&>().set_single_issuer(true))>>
        : std::true_type {};

    static context_options checked(context_options options) {
        if (options.queue_depth == 0)
            detail::throw_invalid("queue_depth must be at least 1 (got 0)");
        if (options.block_size == 0) detail::throw_invalid("block_size must be at least 1 (got 0)");
        if (options.spin < std::chrono::microseconds::zero() ||
            options.spin > std::chrono::seconds(1))
            detail::throw_invalid("spin must be between 0 and 1 second (got " +
                                  std::to_string(options.spin.count()) + " us)");
        if (options.retry_budget < std::chrono::milliseconds::zero() ||
            options.retry_budget > std::chrono::hours(1))
            detail::throw_invalid("retry_budget must be between 0 and 1 hour (got " +
                                  std::to_string(options.retry_budget.count()) + " ms)");
        return options;
    }

    context_options options_;
    Backend backend_;
    detail::engine<Backend> engine_;  // after backend_: it dies first
    detail::creator_process creator_;
    detail::exclusive_use in_use_;
};

/// The common case: native Linux AIO.
using aio_context = basic_aio_context<libaio_backend>;

NVMEIO_END_NAMESPACE

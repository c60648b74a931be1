#pragma once
/// \file aio_context.hpp
/// An asynchronous I/O context: a Backend policy plus the queue depth and block size that every
/// transfer through it uses.

#include <cstddef>
#include <string>
#include <utility>

#include "nvmeio/backend/libaio.hpp"
#include "nvmeio/error.hpp"

namespace nvmeio {

/// How deep the queue is and how large each request is.
struct context_options {
    /// Requests in flight at once (>= 1, <= fs.aio-max-nr for libaio).
    unsigned queue_depth = 32;
    /// Bytes per request (>= 1). On an O_DIRECT file it must be a multiple of the file's
    /// alignment; that is checked when a transfer starts, because it depends on the file.
    std::size_t block_size = std::size_t{1} << 20;
};

/// A queue of asynchronous requests served by `Backend` (libaio by default).
///
/// Not thread-safe: use one context per thread (issue transfers from one thread at a time).
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
          backend_(options.queue_depth, std::forward<BackendArgs>(backend_args)...) {}

    basic_aio_context(const basic_aio_context&) = delete;
    basic_aio_context& operator=(const basic_aio_context&) = delete;

    /// Requests in flight at once.
    [[nodiscard]] unsigned queue_depth() const noexcept { return options_.queue_depth; }
    /// Bytes per request.
    [[nodiscard]] std::size_t block_size() const noexcept { return options_.block_size; }
    /// Both settings.
    [[nodiscard]] const context_options& options() const noexcept { return options_; }
    /// The backend, for strategies.
    [[nodiscard]] Backend& backend() noexcept { return backend_; }

  private:
    static context_options checked(context_options options) {
        if (options.queue_depth == 0)
            detail::throw_invalid("queue_depth must be at least 1 (got 0)");
        if (options.block_size == 0) detail::throw_invalid("block_size must be at least 1 (got 0)");
        return options;
    }

    context_options options_;
    Backend backend_;
};

/// The common case: native Linux AIO.
using aio_context = basic_aio_context<libaio_backend>;

}  // namespace nvmeio

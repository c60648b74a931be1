#pragma once
/// \file async.hpp
/// Asynchronous transfers: `submit` now, `wait` (or poll) later, several outstanding at once
/// (DeepSpeed's `async_pread` / `wait`, KvikIO's futures), each run whole on one of the
/// context's worker threads. The file and the buffer must outlive the transfer: destroying a
/// handle, or the context, waits for it. The whole contract: docs/GUARANTEES.md, section 5c.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/detail/worker_pool.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// What a worker hands back to a handle.
struct async_state {
    std::mutex mutex;
    std::condition_variable done_signal;
    bool done = false;
    transfer_result result;
    io_failure failure;
    std::exception_ptr error;  // anything but an I/O failure (std::bad_alloc...)
    creator_process creator;   // the only process whose workers will ever finish it

    void finish() {
        std::lock_guard<std::mutex> lock(mutex);
        done = true;
        done_signal.notify_all();
    }
};

}  // namespace detail

/// The future of one submitted transfer. Move-only; the destructor waits for the transfer.
class transfer_handle {
  public:
    /// A handle with no transfer.
    transfer_handle() noexcept = default;

    transfer_handle(const transfer_handle&) = delete;
    transfer_handle& operator=(const transfer_handle&) = delete;
    /// Takes over the other handle's transfer.
    transfer_handle(transfer_handle&& other) noexcept = default;
    /// Waits for this handle's transfer, then takes over the other's.
    transfer_handle& operator=(transfer_handle&& other) noexcept {
        if (this != &other) {
            release();
            state_ = std::move(other.state_);
        }
        return *this;
    }
    /// Waits for the transfer (its outcome is dropped: call `wait` to see it); in a child after
    /// fork it does not wait (the transfer is the parent's).
    ~transfer_handle() { release(); }

    /// True when the handle holds a transfer.
    [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }

    /// True when the transfer has finished (or there is none): `wait` will not block.
    [[nodiscard]] bool ready() const {
        if (!state_) return true;
        state_->creator.require_current("transfer_handle");
        std::lock_guard<std::mutex> lock(state_->mutex);
        return state_->done;
    }

    /// Waits at most `timeout`; true when the transfer has finished.
    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
        if (!state_) return true;
        state_->creator.require_current("transfer_handle");
        std::unique_lock<std::mutex> lock(state_->mutex);
        return state_->done_signal.wait_for(lock, timeout, [this] { return state_->done; });
    }

    /// Waits for the transfer and returns what it did; throws io_error on failure (the same a
    /// synchronous transfer throws). May be called again; a handle without a transfer returns an
    /// empty result.
    transfer_result wait() const {
        const transfer_result& result = settled();
        if (state_) detail::throw_if(state_->failure);
        return result;
    }

    /// As above; reports failure through `ec`.
    transfer_result wait(std::error_code& ec) const {
        const transfer_result& result = settled();
        ec = state_ ? state_->failure.code : std::error_code{};
        return result;
    }

  private:
    template <class Backend>
    friend class basic_async_context;  // the only maker of handles that hold a transfer

    explicit transfer_handle(std::shared_ptr<detail::async_state> state) noexcept
        : state_(std::move(state)) {}

    // Waits for the transfer; rethrows what was not an I/O failure.
    const transfer_result& settled() const {
        static const transfer_result none;
        if (!state_) return none;
        state_->creator.require_current("transfer_handle");
        block();
        if (state_->error) std::rethrow_exception(state_->error);
        return state_->result;
    }

    // Waits for the transfer before the handle lets go of it. In a child after fork nothing
    // would ever finish it, and its condition variable may have waiters that do not exist there
    // (destroying it would wait for them forever): the child leaves the state allocated.
    void release() noexcept {
        if (state_ && !state_->creator.is_current()) {
            (void)new std::shared_ptr<detail::async_state>(std::move(state_));
            return;
        }
        block();
        state_.reset();
    }

    void block() const noexcept {
        if (!state_) return;
        std::unique_lock<std::mutex> lock(state_->mutex);
        state_->done_signal.wait(lock, [this] { return state_->done; });
    }

    std::shared_ptr<detail::async_state> state_;
};

/// Worker threads with one `basic_aio_context<Backend>` each, running submitted transfers.
///
/// Thread-safety: `submit` and `cancel_pending` may be called from several threads at once.
template <class Backend = libaio_backend>
class basic_async_context {
  public:
    using backend_type = Backend;  ///< The policy of every worker's context.

    /// Creates the contexts, then the threads. Throws std::invalid_argument for zero threads,
    /// queue depth or block size, and what the backend throws when it cannot be set up.
    explicit basic_async_context(async_options options = {})
        : pool_(options.threads, options.context) {}

    basic_async_context(const basic_async_context&) = delete;
    basic_async_context& operator=(const basic_async_context&) = delete;

    /// Waits for every transfer still queued or running.
    ~basic_async_context() = default;

    /// Worker threads.
    [[nodiscard]] unsigned threads() const noexcept { return pool_.size(); }
    /// Block size of each worker's context.
    [[nodiscard]] std::size_t block_size() const noexcept { return pool_.options().block_size; }
    /// Queue depth of each worker's context.
    [[nodiscard]] unsigned queue_depth() const noexcept { return pool_.options().queue_depth; }

    /// Starts moving the bytes of `memory` between it and `offset` of `f`; returns at once.
    /// Throws std::invalid_argument now when a precondition of strategy.hpp is violated.
    [[nodiscard]] transfer_handle submit(const file& f, operation op, mutable_memory memory,
                                         std::uint64_t offset, const transfer_config& config = {}) {
        pool_.creator().require_current("async_context");
        detail::check_transfer(f, op, memory, offset, block_size());
        auto state = std::make_shared<detail::async_state>();
        pool_.post([state, &f, op, memory, offset, config](basic_aio_context<Backend>* context) {
            if (context == nullptr) {
                state->failure = {std::make_error_code(std::errc::operation_canceled),
                                  std::string(to_string(op)) + " (cancelled before it started)",
                                  f.path(), offset, memory.size()};
            } else {
                try {
                    state->result = detail::run_transfer(*context, f, op, memory, offset, config,
                                                         state->failure);
                } catch (...) {
                    state->error = std::current_exception();
                }
            }
            state->finish();
        });
        return transfer_handle(std::move(state));
    }

    /// A temporary file would be gone before the transfer runs.
    transfer_handle submit(const file&&, operation, mutable_memory, std::uint64_t,
                           const transfer_config& = {}) = delete;

    /// Cancels the transfers no worker has started; returns how many. Their handles report
    /// std::errc::operation_canceled; running transfers finish normally.
    std::size_t cancel_pending() {
        pool_.creator().require_current("async_context");
        return pool_.cancel_pending();
    }

  private:
    detail::worker_pool<basic_aio_context<Backend>> pool_;
};

/// The common case: native Linux AIO on every worker.
using async_context = basic_async_context<libaio_backend>;

/// Starts filling `memory` from `offset` of `f`; see basic_async_context.
template <class Backend>
[[nodiscard]] transfer_handle async_read(basic_async_context<Backend>& context, const file& f,
                                         mutable_memory memory, std::uint64_t offset,
                                         const transfer_config& config = {}) {
    return context.submit(f, operation::read, memory, offset, config);
}

/// Starts writing every byte of `memory` at `offset` of `f`; see basic_async_context.
template <class Backend>
[[nodiscard]] transfer_handle async_write(basic_async_context<Backend>& context, const file& f,
                                          const_memory memory, std::uint64_t offset,
                                          const transfer_config& config = {}) {
    return context.submit(f, operation::write, detail::unconst(memory), offset, config);
}

/// A temporary file would be gone before the transfer runs.
template <class Backend>
transfer_handle async_read(basic_async_context<Backend>&, const file&&, mutable_memory,
                           std::uint64_t, const transfer_config& = {}) = delete;
/// A temporary file would be gone before the transfer runs.
template <class Backend>
transfer_handle async_write(basic_async_context<Backend>&, const file&&, const_memory,
                            std::uint64_t, const transfer_config& = {}) = delete;

NVMEIO_END_NAMESPACE

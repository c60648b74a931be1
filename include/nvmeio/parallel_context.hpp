#pragma once
/// \file parallel_context.hpp
/// A pool of threads created once, each with its own aio context, that a front end spreads its
/// work over (DeepSpeed's `intra_op_parallelism`, without its "must divide evenly" rule).

#include <cstddef>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/detail/worker_pool.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// A pool of threads with one `basic_aio_context<Backend>` each, splitting transfers over them
/// (parallel.hpp, batch.hpp, stripe.hpp).
///
/// Thread-safety: transfers and `run` may be called from several threads at once (their pieces
/// queue for the same workers). Destroying the context waits for the pieces in progress.
///
/// fork: the threads exist only in the process that created the context. In a child, transfers
/// and `run` throw std::logic_error; destroying the context there waits for nothing and joins
/// nothing (see detail/worker_pool.hpp). Create a new context in the child.
template <class Backend = libaio_backend>
class basic_parallel_context {
  public:
    using backend_type = Backend;                       ///< The policy of every worker's context.
    using worker_context = basic_aio_context<Backend>;  ///< What each job is given.

    /// Creates the contexts, then the threads. Throws std::invalid_argument for zero threads,
    /// queue depth or block size, and what the backend throws when it cannot be set up.
    explicit basic_parallel_context(parallel_options options = {})
        : options_(options), pool_(options.threads, options.context) {}

    basic_parallel_context(const basic_parallel_context&) = delete;
    basic_parallel_context& operator=(const basic_parallel_context&) = delete;

    /// Worker threads.
    [[nodiscard]] unsigned threads() const noexcept { return pool_.size(); }
    /// Queue depth of each worker's context.
    [[nodiscard]] unsigned queue_depth() const noexcept { return options_.context.queue_depth; }
    /// Block size of each worker's context.
    [[nodiscard]] std::size_t block_size() const noexcept { return options_.context.block_size; }
    /// Everything the context was created with.
    [[nodiscard]] const parallel_options& options() const noexcept { return options_; }

    /// Runs `job(index, context)` for every index in [0, count) on the workers (each call on one
    /// worker's context) and returns when all have finished. The first exception a job throws is
    /// rethrown here after the others have finished. Called from inside a job (whose worker
    /// would wait for itself) or in a child after fork, it throws std::logic_error.
    template <class Job>
    void run(std::size_t count, Job&& job) {
        check_caller();
        if (count == 0) return;
        detail::completion_latch latch(count);
        std::mutex error_mutex;
        std::exception_ptr error;
        for (std::size_t i = 0; i < count; ++i) {
            pool_.post([&, i](basic_aio_context<Backend>* context) {
                try {
                    if (context == nullptr) throw std::runtime_error("nvmeio: job cancelled");
                    job(i, *context);
                } catch (...) {
                    std::lock_guard<std::mutex> lock(error_mutex);
                    if (!error) error = std::current_exception();
                }
                latch.count_down();
            });
        }
        latch.wait();
        if (error) std::rethrow_exception(error);
    }

  private:
    void check_caller() const {
        pool_.creator().require_current("parallel_context");
        if (pool_.on_worker_thread()) {
            throw std::logic_error(
                "nvmeio: parallel_context used from inside one of its own jobs: the job's worker "
                "would wait for itself (use the aio context the job is given)");
        }
    }

    parallel_options options_;
    detail::worker_pool<basic_aio_context<Backend>> pool_;
};

/// The common case: native Linux AIO on every thread.
using parallel_context = basic_parallel_context<libaio_backend>;

NVMEIO_END_NAMESPACE

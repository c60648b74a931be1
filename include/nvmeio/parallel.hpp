#pragma once
/// \file parallel.hpp
/// Intra-op parallelism: one transfer split over several threads, each with its own aio context
/// (DeepSpeed's `intra_op_parallelism`, without its "must divide evenly" rule).
///
/// The threads are created with the context and reused by every transfer. A transfer of any
/// length is cut into at most `threads()` pieces whose boundaries are multiples of the file's
/// O_DIRECT alignment (the last piece takes the remainder, unaligned tail included), so the
/// O_DIRECT rules are those of strategy.hpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/worker_pool.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/strategy.hpp"

namespace nvmeio {

/// How many threads and what each thread's context looks like.
struct parallel_options {
    /// Worker threads, each owning one context (>= 1).
    unsigned threads = 4;
    /// Queue depth and block size of every worker's context.
    context_options context{};
    /// Smallest piece worth a thread of its own; 0 means the context's block size. A transfer
    /// shorter than `threads * min_piece_size` uses fewer threads.
    std::size_t min_piece_size = 0;
};

/// A pool of threads with one `basic_aio_context<Backend>` each, splitting transfers over them.
///
/// Thread-safety: `transfer` and `run` may be called from several threads at once (their pieces
/// queue for the same workers). Destroying the context waits for the pieces in progress.
///
/// fork: the threads exist only in the process that created the context. In a child, `transfer`
/// and `run` throw std::logic_error; destroying the context there waits for nothing and joins
/// nothing (see detail/worker_pool.hpp). Create a new context in the child.
template <class Backend = libaio_backend>
class basic_parallel_context {
  public:
    using backend_type = Backend;  ///< The policy of every worker's context.

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

    /// Moves `length` bytes between `buffer` and `offset` of `f` over the threads, recording a
    /// failure (the one at the lowest offset) in `failure`. Throws std::invalid_argument when a
    /// precondition of strategy.hpp is violated. With `config.measure`, `perf` holds the wall
    /// time, the summed request counts and the pieces' latencies merged (percentiles: the
    /// largest of the pieces').
    transfer_result transfer(file& f, operation op, void* buffer, std::size_t length,
                             std::uint64_t offset, const transfer_config& config,
                             io_failure& failure) {
        failure = {};
        check_caller();
        detail::check_transfer(f, op, buffer, length, offset, block_size());
        transfer_result result;
        if (length == 0) return result;

        const auto start = std::chrono::steady_clock::now();
        const std::size_t unit = f.required_alignment();
        const std::size_t smallest = std::max<std::size_t>(
            options_.min_piece_size != 0 ? options_.min_piece_size : block_size(), unit);
        // Divisions only: `smallest` comes from the caller and may be near SIZE_MAX.
        std::size_t count =
            std::min<std::size_t>(threads(), length / smallest + (length % smallest != 0 ? 1 : 0));
        const auto piece = static_cast<std::size_t>(align_up((length + count - 1) / count, unit));
        count = length / piece + (length % piece != 0 ? 1 : 0);  // rounding may idle a thread

        struct outcome {
            transfer_result result;
            io_failure failure;
        };
        std::vector<outcome> outcomes(count);
        auto* bytes = static_cast<std::byte*>(buffer);
        run(count, [&](std::size_t i, basic_aio_context<Backend>& context) {
            const std::size_t begin = i * piece;
            const std::size_t size = std::min(piece, length - begin);
            outcomes[i].result = detail::run_transfer(context, f, op, bytes + begin, size,
                                                      offset + begin, config, outcomes[i].failure);
        });

        // A read meeting the end of the file stops at the first piece that came up short.
        result.bytes = length;
        for (std::size_t i = 0; i < count; ++i) {
            const std::size_t begin = i * piece;
            const std::size_t size = std::min(piece, length - begin);
            if (outcomes[i].failure) {
                failure = outcomes[i].failure;
                result.bytes = 0;
                break;
            }
            if (outcomes[i].result.bytes < size) {
                result.bytes = begin + outcomes[i].result.bytes;
                break;
            }
        }
        if (config.measure) {
            std::vector<const transfer_perf*> pieces;
            for (const outcome& o : outcomes)
                pieces.push_back(&o.result.perf);
            result.perf = detail::merge_perf(pieces, result.bytes, start);
        }
        return result;
    }

    /// As above; throws io_error on failure.
    transfer_result transfer(file& f, operation op, void* buffer, std::size_t length,
                             std::uint64_t offset, const transfer_config& config = {}) {
        io_failure failure;
        transfer_result result = transfer(f, op, buffer, length, offset, config, failure);
        detail::throw_if(failure);
        return result;
    }

    /// As above; reports failure through `ec`.
    transfer_result transfer(file& f, operation op, void* buffer, std::size_t length,
                             std::uint64_t offset, const transfer_config& config,
                             std::error_code& ec) {
        io_failure failure;
        transfer_result result = transfer(f, op, buffer, length, offset, config, failure);
        ec = failure.code;
        return result;
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
    detail::worker_pool<Backend> pool_;
};

/// The common case: native Linux AIO on every thread.
using parallel_context = basic_parallel_context<libaio_backend>;

/// Reads `length` bytes at `offset` of `f` into `buffer` over the context's threads; throws
/// io_error on failure.
template <class Backend>
transfer_result read(basic_parallel_context<Backend>& context, file& f, void* buffer,
                     std::size_t length, std::uint64_t offset, const transfer_config& config = {}) {
    return context.transfer(f, operation::read, buffer, length, offset, config);
}

/// Reads over the threads; reports failure through `ec`.
template <class Backend>
transfer_result read(basic_parallel_context<Backend>& context, file& f, void* buffer,
                     std::size_t length, std::uint64_t offset, const transfer_config& config,
                     std::error_code& ec) {
    return context.transfer(f, operation::read, buffer, length, offset, config, ec);
}

/// Writes `length` bytes from `buffer` at `offset` of `f` over the context's threads; throws
/// io_error on failure.
template <class Backend>
transfer_result write(basic_parallel_context<Backend>& context, file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset,
                      const transfer_config& config = {}) {
    return context.transfer(f, operation::write, const_cast<void*>(buffer), length, offset, config);
}

/// Writes over the threads; reports failure through `ec`.
template <class Backend>
transfer_result write(basic_parallel_context<Backend>& context, file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset, const transfer_config& config,
                      std::error_code& ec) {
    return context.transfer(f, operation::write, const_cast<void*>(buffer), length, offset, config,
                            ec);
}

}  // namespace nvmeio

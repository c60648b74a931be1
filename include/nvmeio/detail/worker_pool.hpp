#pragma once
/// \file detail/worker_pool.hpp
/// Threads created once, each owning a basic_aio_context, that run posted jobs in order (under
/// parallel_context.hpp and async.hpp).
///
/// fork: a child inherits the pool's memory but not its threads. Destroying the pool there must
/// not join threads that do not exist, lock a mutex one of them may have held, or destroy the
/// condition variable they were waiting on (glibc waits for those waiters, forever). So in a
/// child the pool abandons its queue and threads (their memory stays allocated in the child) and
/// destroys only the contexts, whose backends release just the child's copies.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

template <class Context>
class worker_pool {
  public:
    using context_type = Context;
    using options_type = std::decay_t<decltype(std::declval<const Context&>().options())>;
    // Called with the worker's context, or with nullptr when the job is cancelled before it ran.
    using job = std::function<void(context_type*)>;

    // Creates every context first (so a refused setup throws before any thread exists), then
    // the threads.
    worker_pool(unsigned workers, const options_type& options)
        : options_(options), queue_(std::make_unique<queue>()) {
        if (workers == 0) throw_invalid("the number of threads must be at least 1 (got 0)");
        contexts_.reserve(workers);
        for (unsigned i = 0; i < workers; ++i)
            contexts_.push_back(std::make_unique<context_type>(options));
        queue_->threads.reserve(workers);
        try {
            for (unsigned i = 0; i < workers; ++i)
                queue_->threads.emplace_back([this, i] { work(*contexts_[i]); });
        } catch (...) {
            stop();
            throw;
        }
    }

    worker_pool(const worker_pool&) = delete;
    worker_pool& operator=(const worker_pool&) = delete;

    // Runs every job already posted, then joins the threads; in a child after fork, abandons
    // them (see the file comment).
    ~worker_pool() {
        if (creator_.is_current()) {
            stop();
        } else {
            (void)queue_.release();
        }
    }

    void post(job j) {
        {
            std::lock_guard<std::mutex> lock(queue_->mutex);
            queue_->jobs.push_back(std::move(j));
        }
        queue_->wake.notify_one();
    }

    // Cancels the jobs no worker has started; returns how many.
    std::size_t cancel_pending() {
        std::deque<job> dropped;
        {
            std::lock_guard<std::mutex> lock(queue_->mutex);
            dropped.swap(queue_->jobs);
        }
        for (job& j : dropped)
            j(nullptr);
        return dropped.size();
    }

    unsigned size() const noexcept { return static_cast<unsigned>(contexts_.size()); }
    const options_type& options() const noexcept { return options_; }
    // The process that created the pool (its threads exist only there).
    const creator_process& creator() const noexcept { return creator_; }
    // True on one of this pool's worker threads (a job that waits for the pool would hang).
    bool on_worker_thread() const noexcept { return current_pool() == this; }

  private:
    struct queue {
        std::vector<std::thread> threads;
        std::mutex mutex;
        std::condition_variable wake;
        std::deque<job> jobs;
        bool stopping = false;
    };

    static const worker_pool*& current_pool() noexcept {
        static thread_local const worker_pool* pool = nullptr;
        return pool;
    }

    void work(context_type& context) {
        current_pool() = this;
        queue& q = *queue_;
        for (;;) {
            job next;
            {
                std::unique_lock<std::mutex> lock(q.mutex);
                q.wake.wait(lock, [&q] { return q.stopping || !q.jobs.empty(); });
                if (q.jobs.empty()) return;  // stopping, and nothing left to run
                next = std::move(q.jobs.front());
                q.jobs.pop_front();
            }
            next(&context);  // jobs catch their own exceptions
        }
    }

    void stop() noexcept {
        {
            std::lock_guard<std::mutex> lock(queue_->mutex);
            queue_->stopping = true;
        }
        queue_->wake.notify_all();
        for (std::thread& t : queue_->threads) {
            if (t.joinable()) t.join();
        }
        queue_->threads.clear();
    }

    options_type options_;
    creator_process creator_;
    std::vector<std::unique_ptr<context_type>> contexts_;
    std::unique_ptr<queue> queue_;  // released, not destroyed, in a child after fork
};

// Counts finished jobs so that a caller can wait for a group of them.
class completion_latch {
  public:
    explicit completion_latch(std::size_t count) : remaining_(count) {}
    void count_down() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (--remaining_ == 0) done_.notify_all();
    }
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return remaining_ == 0; });
    }

  private:
    std::mutex mutex_;
    std::condition_variable done_;
    std::size_t remaining_;
};

}  // namespace detail
NVMEIO_END_NAMESPACE

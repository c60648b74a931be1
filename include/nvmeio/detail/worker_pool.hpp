#pragma once
/// \file detail/worker_pool.hpp
/// Threads created once, each owning an aio context, that run posted jobs in order. The parallel
/// and asynchronous front ends (parallel.hpp, async.hpp) are built on it.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "nvmeio/aio_context.hpp"

namespace nvmeio {
namespace detail {

template <class Backend>
class worker_pool {
  public:
    using context_type = basic_aio_context<Backend>;
    // Called with the worker's context, or with nullptr when the job is cancelled before it ran.
    using job = std::function<void(context_type*)>;

    // Creates every context first (so a refused setup throws before any thread exists), then
    // the threads.
    worker_pool(unsigned workers, context_options options) : options_(options) {
        if (workers == 0) throw_invalid("the number of threads must be at least 1 (got 0)");
        contexts_.reserve(workers);
        for (unsigned i = 0; i < workers; ++i)
            contexts_.push_back(std::make_unique<context_type>(options));
        threads_.reserve(workers);
        try {
            for (unsigned i = 0; i < workers; ++i)
                threads_.emplace_back([this, i] { work(*contexts_[i]); });
        } catch (...) {
            stop();
            throw;
        }
    }

    worker_pool(const worker_pool&) = delete;
    worker_pool& operator=(const worker_pool&) = delete;

    // Runs every job already posted, then joins the threads.
    ~worker_pool() { stop(); }

    void post(job j) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            jobs_.push_back(std::move(j));
        }
        wake_.notify_one();
    }

    // Cancels the jobs no worker has started; returns how many.
    std::size_t cancel_pending() {
        std::deque<job> dropped;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            dropped.swap(jobs_);
        }
        for (job& j : dropped)
            j(nullptr);
        return dropped.size();
    }

    unsigned size() const noexcept { return static_cast<unsigned>(contexts_.size()); }
    const context_options& options() const noexcept { return options_; }

  private:
    void work(context_type& context) {
        for (;;) {
            job next;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
                if (jobs_.empty()) return;  // stopping, and nothing left to run
                next = std::move(jobs_.front());
                jobs_.pop_front();
            }
            next(&context);  // jobs catch their own exceptions
        }
    }

    void stop() noexcept {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (std::thread& t : threads_) {
            if (t.joinable()) t.join();
        }
        threads_.clear();
    }

    context_options options_;
    std::vector<std::unique_ptr<context_type>> contexts_;
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<job> jobs_;
    bool stopping_ = false;
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
}  // namespace nvmeio

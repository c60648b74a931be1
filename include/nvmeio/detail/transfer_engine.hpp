#pragma once
/// \file detail/transfer_engine.hpp
/// The loop both strategies share: split a range into requests, keep the backend fed, check every
/// result. A strategy only chooses when to refill (after each completion, or after the whole
/// batch) and how to submit (one request per call, or the batch in one call).

#include <fcntl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/perf.hpp"

namespace nvmeio {

/// How requests are handed to the backend.
enum class submit_mode {
    single,  ///< One request per submission call (DeepSpeed's single_submit = true).
    block,   ///< Every ready request in one call.
};

/// Name of a submit mode, for reports.
[[nodiscard]] constexpr const char* to_string(submit_mode mode) noexcept {
    return mode == submit_mode::single ? "single" : "block";
}

namespace detail {

/// How long an io_submit that keeps answering EAGAIN with nothing in flight is retried.
inline constexpr std::chrono::seconds submit_retry_budget{10};

/// What an engine does when a submission call accepts nothing and no request is in flight to
/// reap for room: pause 100 us and try again, for at most `submit_retry_budget` in a row.
class submit_backoff {
  public:
    /// A submission made progress: the budget starts afresh.
    void reset() noexcept { deadline_ = {}; }
    /// After a submission call returned `rc` with nothing accepted: true when the caller should
    /// call again, having reaped one completion for room (`reap_one`) when requests are in
    /// flight, or paused otherwise; false when `rc` is a hard error or the budget is spent.
    template <class ReapOne>
    bool retry(int rc, bool in_flight, ReapOne&& reap_one) {
        if (rc != 0 && rc != -EAGAIN && rc != -EINTR) return false;
        if (!in_flight) return pause();
        reap_one();
        return true;
    }

    /// Pauses and returns true while the budget lasts; false once it is spent.
    bool pause() noexcept {
        const auto now = std::chrono::steady_clock::now();
        if (deadline_ == std::chrono::steady_clock::time_point{})
            deadline_ = now + submit_retry_budget;
        if (now >= deadline_) return false;
        const timespec interval{0, 100'000};
        ::nanosleep(&interval, nullptr);
        return true;
    }

  private:
    std::chrono::steady_clock::time_point deadline_{};
};

template <class Backend>
class transfer_engine {
    using clock = std::chrono::steady_clock;

  public:
    transfer_engine(Backend& backend, unsigned queue_depth, std::size_t block_size, file& target,
                    operation op, std::byte* buffer, std::size_t length, std::uint64_t offset)
        : backend_(backend),
          queue_depth_(queue_depth),
          block_size_(block_size),
          file_(target),
          op_(op),
          buffer_(buffer),
          length_(length),
          offset_(offset),
          unit_(target.required_alignment()),
          body_(static_cast<std::size_t>(align_down(length, unit_))),
          end_of_data_(length) {}

    /// Moves the range; returns the bytes moved (fewer than asked only for a read reaching the
    /// end of the file). On failure, `failure` says what, and no request is left in flight.
    std::size_t run(bool drain_before_refill, submit_mode mode, io_failure& failure,
                    transfer_perf* perf) {
        perf_ = perf;
        const clock::time_point start = perf_ != nullptr ? clock::now() : clock::time_point{};
        slots_.resize(queue_depth_);
        free_.reserve(queue_depth_);
        for (unsigned i = queue_depth_; i > 0; --i)
            free_.push_back(i - 1);
        pending_.reserve(queue_depth_);
        completions_.resize(std::min<std::size_t>(queue_depth_, 256));
        if (perf_ != nullptr) {
            const std::size_t expected = body_ / block_size_ + 2 * queue_depth_;
            submit_samples_.reserve(mode == submit_mode::single ? expected : expected / 2 + 1);
            completion_samples_.reserve(expected);
        }

        if (op_ == operation::write) reserve_range();
        while (!failure_ && !lost_) {
            if (!drain_before_refill || inflight_ == 0) fill();
            submit_pending(mode);
            if (failure_ || lost_) break;
            if (inflight_ == 0) {
                if (next_ >= std::min(body_, end_of_data_)) break;
                continue;
            }
            reap(drain_before_refill ? inflight_ : 1);
        }
        if (failure_) drain_after_failure();
        if (!failure_ && !lost_) finish_synchronously();

        if (perf_ != nullptr) {
            perf_->elapsed_us = microseconds(clock::now() - start);
            perf_->submit = latency_stats::from_samples(submit_samples_);
            perf_->completion = latency_stats::from_samples(completion_samples_);
            perf_->requests = requests_;
            perf_->resubmissions = resubmissions_;
        }
        failure = failure_;
        const std::size_t moved =
            op_ == operation::read ? std::min(end_of_data_, length_) : length_;
        if (perf_ != nullptr) perf_->bytes = failure ? 0 : moved;
        return failure ? 0 : moved;
    }

  private:
    struct slot {
        std::size_t position = 0;  // offset of the request's range within the transfer
        std::size_t length = 0;
        std::size_t done = 0;
        clock::time_point submitted{};
    };
    struct range {
        std::size_t position;
        std::size_t length;
    };

    static double microseconds(clock::duration d) {
        return std::chrono::duration<double, std::micro>(d).count();
    }

    io_request request_for(unsigned id) const {
        const slot& s = slots_[id];
        return {file_.native_handle(),         op_,
                buffer_ + s.position + s.done, s.length - s.done,
                offset_ + s.position + s.done, id};
    }

    void fill() {
        const std::size_t limit = std::min(body_, end_of_data_);
        while (!free_.empty() && next_ < limit) {
            const unsigned id = free_.back();
            free_.pop_back();
            slots_[id] = slot{next_, std::min(block_size_, limit - next_), 0, {}};
            pending_.push_back(request_for(id));
            next_ += slots_[id].length;
        }
    }

    void release(unsigned id) { free_.push_back(id); }

    void fail(io_failure failure) {
        if (!failure_) failure_ = std::move(failure);
    }

    // An O_DIRECT write that grows the file is done synchronously inside io_submit on ext4 and
    // XFS, which defeats the queue; and a write that changes the size would race with other
    // writers' tails. Reserving the range first (file.hpp) avoids both.
    void reserve_range() { file_.reserve_range(offset_, length_, failure_); }

    void submit_pending(submit_mode mode) {
        std::size_t sent = 0;
        submit_backoff backoff;
        while (sent < pending_.size() && !failure_ && !lost_) {
            const std::size_t count = mode == submit_mode::single ? 1 : pending_.size() - sent;
            const clock::time_point before = perf_ != nullptr ? clock::now() : clock::time_point{};
            const int rc = backend_.submit(&pending_[sent], count);
            if (perf_ != nullptr) submit_samples_.push_back(microseconds(clock::now() - before));
            if (rc > 0) {
                // A partial submit leaves the rest in pending_ for the next round of this loop.
                for (int i = 0; i < rc; ++i)
                    slots_[pending_[sent + i].user_data].submitted = before;
                inflight_ += static_cast<unsigned>(rc);
                sent += static_cast<std::size_t>(rc);
                backoff.reset();
                continue;
            }
            if (backoff.retry(rc, inflight_ > 0, [this] { reap(1); })) continue;
            const io_request& refused = pending_[sent];
            fail({errno_code(rc < 0 ? -rc : EAGAIN),
                  std::string("io_submit of a ") + to_string(op_), file_.path(), refused.offset,
                  refused.length});
        }
        // Requests never accepted are not in flight: their slots are free again.
        for (std::size_t i = sent; i < pending_.size(); ++i) {
            release(static_cast<unsigned>(pending_[i].user_data));
        }
        pending_.clear();
    }

    void reap(std::size_t min) {
        int got;
        do {
            got = backend_.reap(completions_.data(), std::min(min, completions_.size()),
                                completions_.size(), nullptr);
        } while (got == -EINTR);
        if (got < 0) {
            // Requests may still be in flight and we cannot wait for them: say so and stop.
            fail({errno_code(-got), "io_getevents (requests may still be in flight)", file_.path(),
                  offset_, length_});
            lost_ = true;
            return;
        }
        const clock::time_point now = perf_ != nullptr ? clock::now() : clock::time_point{};
        for (int i = 0; i < got; ++i)
            complete(completions_[static_cast<std::size_t>(i)], now);
    }

    void complete(const io_completion& c, clock::time_point now) {
        const auto id = static_cast<unsigned>(c.user_data);
        slot& s = slots_[id];
        --inflight_;
        if (failure_) {  // draining after a failure: nothing more is issued
            release(id);
            return;
        }
        if (c.result == -EINTR || c.result == -EAGAIN) {  // transient: ask again for the same range
            pending_.push_back(request_for(id));
            ++resubmissions_;
            return;
        }
        if (c.result < 0) {
            fail({errno_code(static_cast<int>(-c.result)), to_string(op_), file_.path(),
                  offset_ + s.position + s.done, s.length - s.done});
            release(id);
            return;
        }
        ++requests_;
        if (perf_ != nullptr) completion_samples_.push_back(microseconds(now - s.submitted));
        const auto moved = static_cast<std::size_t>(c.result);
        if (moved > s.length - s.done) {
            fail({errno_code(EIO),
                  std::string(to_string(op_)) + " (the kernel reported more bytes than asked)",
                  file_.path(), offset_ + s.position + s.done, s.length - s.done});
            release(id);
            return;
        }
        s.done += moved;
        if (s.done == s.length) {
            release(id);
            return;
        }
        const std::size_t at = s.position + s.done;
        if (moved == 0) {
            if (op_ == operation::read) {
                end_of_data_ = std::min(end_of_data_, at);  // end of file
            } else {
                fail({errno_code(ENOSPC), "write (the device accepted no bytes)", file_.path(),
                      offset_ + at, s.length - s.done});
            }
            release(id);
            return;
        }
        if (!is_aligned(offset_ + at, unit_)) {
            // O_DIRECT cannot continue from an unaligned offset: finish this range synchronously.
            remnants_.push_back({at, s.length - s.done});
            release(id);
            return;
        }
        pending_.push_back(request_for(id));
        ++resubmissions_;
    }

    void drain_after_failure() {
        pending_.clear();
        while (inflight_ > 0 && !lost_)
            reap(inflight_);
    }

    // Short-result remnants and the unaligned tail go through the file's synchronous path, which
    // merges partial alignment units through a bounce buffer.
    void finish_synchronously() {
        std::sort(remnants_.begin(), remnants_.end(),
                  [](const range& a, const range& b) { return a.position < b.position; });
        if (body_ < length_) remnants_.push_back({body_, length_ - body_});
        for (const range& r : remnants_) {
            if (op_ == operation::read) {
                if (r.position >= end_of_data_) break;
                const std::size_t got =
                    file_.read_at(buffer_ + r.position, r.length, offset_ + r.position, failure_);
                if (failure_) return;
                if (got < r.length) end_of_data_ = std::min(end_of_data_, r.position + got);
            } else {
                file_.write_at(buffer_ + r.position, r.length, offset_ + r.position, failure_);
                if (failure_) return;
            }
        }
    }

    Backend& backend_;
    const unsigned queue_depth_;
    const std::size_t block_size_;
    file& file_;
    const operation op_;
    std::byte* const buffer_;
    const std::size_t length_;
    const std::uint64_t offset_;
    const std::size_t unit_;   // 1 when buffered
    const std::size_t body_;   // the aligned prefix that goes through the backend
    std::size_t end_of_data_;  // where a read met the end of the file (length_ if it did not)

    std::size_t next_ = 0;  // start of the next range not yet handed out
    unsigned inflight_ = 0;
    std::vector<slot> slots_;
    std::vector<unsigned> free_;
    std::vector<io_request> pending_;
    std::vector<io_completion> completions_;
    std::vector<range> remnants_;
    io_failure failure_;
    bool lost_ = false;  // reaping failed: in-flight requests could not be waited for

    transfer_perf* perf_ = nullptr;
    std::vector<double> submit_samples_;
    std::vector<double> completion_samples_;
    std::uint64_t requests_ = 0;
    std::uint64_t resubmissions_ = 0;
};

}  // namespace detail
}  // namespace nvmeio

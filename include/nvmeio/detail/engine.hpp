#pragma once
/// \file detail/engine.hpp
/// The one submit/reap loop every front end runs on. It moves a list of segments (memory, file
/// offset, length) of one file through a context's backend, keeping the queue full across
/// segment boundaries, and records a result per segment. A plain transfer is one segment; a batch
/// or a stripe share is many. The strategy chooses when to refill (after each completion, or
/// after the whole round) and how to submit (one request per call, or all ready ones).
///
/// Per segment: the aligned prefix (or the whole padded span, see `segment::span`) goes through
/// the backend in block-size requests; short results are asked again from where they stopped;
/// an unaligned remainder goes through the file's synchronous path. A failure fails its segment
/// only: nothing more of it is issued, its requests in flight are waited for, the other segments
/// go on.

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
#include "nvmeio/detail/completion_wait.hpp"
#include "nvmeio/detail/engine_scratch.hpp"
#include "nvmeio/detail/request_cursor.hpp"
#include "nvmeio/detail/request_plan.hpp"
#include "nvmeio/detail/retry_budget.hpp"
#include "nvmeio/detail/segment.hpp"
#include "nvmeio/detail/spin_backoff.hpp"
#include "nvmeio/detail/sync_tail.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/perf.hpp"
#include "nvmeio/transfer.hpp"

namespace nvmeio {
namespace detail {

template <class Backend>
class engine {
    using clock = std::chrono::steady_clock;

  public:
    // What a context hands the engine: its backend, its options and its working memory.
    engine(Backend& backend, const context_options& options, engine_scratch& scratch, file& target,
           operation op, segment* segments, std::size_t count, engine_settings settings)
        : backend_(backend),
          queue_depth_(options.queue_depth),
          block_size_(options.block_size),
          slot_count_(queue_depth_),
          file_(target),
          op_(op),
          segments_(segments),
          count_(count),
          unit_(target.required_alignment()),
          settings_(settings),
          perf_(settings.perf),
          state_(scratch.state),
          slots_(scratch.slots),
          free_(scratch.free),
          pending_(scratch.pending),
          completions_(scratch.completions),
          remnants_(scratch.remnants),
          submit_samples_(scratch.submit_samples),
          completion_samples_(scratch.completion_samples),
          spin_(options.spin),
          backoff_(scratch.backoff),
          cursor_(backend, scratch.pages, target, segments, count, scratch.state, block_size_) {}

    void run() {
        const clock::time_point start = perf_ != nullptr ? clock::now() : clock::time_point{};
        std::size_t body_total = 0;
        state_.assign(count_, {});  // the context's scratch: no allocation once it is large enough
        for (std::size_t i = 0; i < count_; ++i) {
            segment& s = segments_[i];  // one that arrives failed is not moved
            s.bytes = 0;
            const bool padded = s.span > s.length;
            state_[i].body =
                padded ? s.span : static_cast<std::size_t>(align_down(s.length, unit_));
            state_[i].end_of_data = std::max(s.length, state_[i].body);
            body_total += state_[i].body;
        }
        if constexpr (keeps_to_queue_limits<Backend>::value) {
            const request_plan plan =
                plan_requests(file_.queue_limits(), file_.is_direct(), unit_, block_size_,
                              queue_depth_, backend_.completion_capacity());
            cursor_.follow(plan);
            slot_count_ = plan.slots;
        }
        slots_.resize(slot_count_);
        free_.clear();
        for (unsigned i = slot_count_; i > 0; --i)
            free_.push_back(i - 1);
        pending_.clear();
        pending_.reserve(slot_count_);
        completions_.resize(std::min<std::size_t>(slot_count_, 256));
        remnants_.clear();
        submit_samples_.clear();
        completion_samples_.clear();
        if (perf_ != nullptr) {
            const std::size_t expected =
                body_total / cursor_.request_size() + count_ + 2 * slot_count_;
            submit_samples_.reserve(settings_.one_request_per_call ? expected : expected / 2 + 1);
            completion_samples_.reserve(expected);
        }

        if (op_ == operation::write) reserve_write_runs(file_, segments_, count_);
        while (!lost_) {
            if (!settings_.drain_before_refill || inflight_ == 0) fill();
            submit_pending();
            if (lost_) break;
            if (inflight_ == 0) {
                if (cursor_.exhausted()) break;
                continue;
            }
            reap(settings_.drain_before_refill ? inflight_ : 1);
        }
        finish_synchronously(file_, op_, segments_, count_, state_, remnants_);

        std::uint64_t moved = 0;
        for (std::size_t i = 0; i < count_; ++i) {
            segment& s = segments_[i];
            s.bytes = s.failure ? 0 : std::min(state_[i].end_of_data, s.length);
            if (op_ == operation::write && !s.failure) s.bytes = s.length;
            moved += s.bytes;
        }
        if (perf_ != nullptr) {
            perf_->elapsed_us = microseconds(clock::now() - start);
            perf_->submit = latency_stats::from_samples(submit_samples_);
            perf_->completion = latency_stats::from_samples(completion_samples_);
            perf_->requests = requests_;
            perf_->resubmissions = resubmissions_;
            perf_->bytes = moved;
        }
    }

  private:
    using segment_state = engine_scratch::segment_state;
    using slot = engine_scratch::slot;
    using remnant = engine_scratch::remnant;

    static double microseconds(clock::duration d) {
        return std::chrono::duration<double, std::micro>(d).count();
    }

    io_request request_for(unsigned id) const {
        const slot& s = slots_[id];
        const segment& g = segments_[s.segment];
        return {file_.native_handle(),
                op_,
                g.memory + s.position + s.done,
                s.length - s.done,
                g.offset + s.position + s.done,
                id,
                file_.rw_flags()};
    }

    // Hands out requests while slots are free. Blocks that stay whole in a cut plan hold at most
    // queue depth slots, as they would uncut; their pieces may take the rest.
    void fill() {
        while (!free_.empty() && !cursor_.exhausted()) {
            const auto next = cursor_.next();
            if (next.length > cursor_.request_size() && whole_held_ >= queue_depth_) break;
            const unsigned id = free_.back();
            free_.pop_back();
            slots_[id] = {next.segment, next.position, next.length, 0, {}};
            if (next.length > cursor_.request_size()) ++whole_held_;
            pending_.push_back(request_for(id));
            cursor_.advance(next.length);
        }
    }

    void release(unsigned id) {
        if (slots_[id].length > cursor_.request_size()) --whole_held_;
        free_.push_back(id);
    }

    void fail(std::size_t i, io_failure failure) {
        if (!segments_[i].failure) {
            segments_[i].failure = std::move(failure);
            purge_ = true;
        }
    }

    // Requests of segments that failed since they were queued are not submitted.
    void drop_failed_pending(std::size_t from) {
        purge_ = false;
        std::size_t kept = from;
        for (std::size_t i = from; i < pending_.size(); ++i) {
            const auto id = static_cast<unsigned>(pending_[i].user_data);
            if (segments_[slots_[id].segment].failure) {
                release(id);
            } else {
                pending_[kept++] = pending_[i];
            }
        }
        pending_.resize(kept);
    }

    void submit_pending() {
        std::size_t sent = 0;
        retry_budget backoff;
        while (!lost_) {
            if (purge_) drop_failed_pending(sent);
            if (sent >= pending_.size()) break;
            // Block submit is paced: a call holds no more requests than are already in flight
            // (one to start an idle queue), because the kernel plugs a multi-request io_submit
            // and dispatches nothing until the call ends; so the device always has work while the
            // next call is prepared, and a full queue still takes what is ready in one call.
            const std::size_t count =
                settings_.one_request_per_call
                    ? 1
                    : std::min(pending_.size() - sent, std::max<std::size_t>(1, inflight_));
            const clock::time_point before = perf_ != nullptr ? clock::now() : clock::time_point{};
            const int rc = backend_.submit(&pending_[sent], count);
            if (perf_ != nullptr) submit_samples_.push_back(microseconds(clock::now() - before));
            if (rc > 0) {
                // A partial submit leaves the rest in pending_ for the next round of this loop.
                if (perf_ != nullptr) {
                    for (int i = 0; i < rc; ++i)
                        slots_[pending_[sent + i].user_data].submitted = before;
                }
                inflight_ += static_cast<unsigned>(rc);
                sent += static_cast<std::size_t>(rc);
                backoff.reset();
                continue;
            }
            if (rc == 0 || rc == -EAGAIN || rc == -EINTR) {
                // Refused for now: reap a completion to make room, or, with nothing in flight,
                // pause 100 us and try again while the budget lasts.
                if (inflight_ > 0) {
                    reap(1);
                    continue;
                }
                if (!backoff.spent()) {
                    const timespec pause{0, 100'000};
                    ::nanosleep(&pause, nullptr);
                    continue;
                }
            }
            // Refused: the request's segment fails; the other segments go on.
            const io_request& refused = pending_[sent];
            const auto id = static_cast<unsigned>(refused.user_data);
            fail(slots_[id].segment, {errno_code(rc < 0 ? -rc : EAGAIN),
                                      std::string("io_submit of a ") + to_string(op_), file_.path(),
                                      refused.offset, refused.length});
        }
        pending_.clear();
    }

    // Waits for at least `min` completions (at most one reap's worth) and handles them.
    void reap(std::size_t min) {
        int error = 0;
        const bool reaped = wait_for_completions(
            backend_, completions_, min, spin_, backoff_, error,
            [this](const io_completion* done, std::size_t count) {
                const clock::time_point now = perf_ != nullptr ? clock::now() : clock::time_point{};
                for (std::size_t i = 0; i < count; ++i)
                    complete(done[i], now);
            });
        if (!reaped) lose(error);
    }

    // Reaping failed: requests may still be in flight and cannot be waited for. Every segment
    // not finished yet fails and nothing more is issued; finished ones keep their result.
    void lose(int rc) {
        lost_ = true;
        (void)cursor_.exhausted();  // wholly issued, a segment is finished unless a request is busy
        std::vector<bool> unfinished(count_, false);
        for (std::size_t i = cursor_.segment_index(); i < count_; ++i)
            unfinished[i] = true;
        std::vector<bool> idle(slot_count_, false);
        for (unsigned id : free_)
            idle[id] = true;
        for (unsigned id = 0; id < slot_count_; ++id) {
            if (!idle[id]) unfinished[slots_[id].segment] = true;
        }
        for (std::size_t i = 0; i < count_; ++i) {
            if (!unfinished[i]) continue;
            fail(i, {errno_code(-rc), "io_getevents (requests may still be in flight)",
                     file_.path(), segments_[i].offset, segments_[i].length});
        }
    }

    void complete(const io_completion& c, clock::time_point now) {
        const auto id = static_cast<unsigned>(c.user_data);
        slot& s = slots_[id];
        segment& g = segments_[s.segment];
        --inflight_;
        if (g.failure) {  // its segment failed: nothing more is issued for it
            release(id);
            return;
        }
        const std::uint64_t at_offset = g.offset + s.position + s.done;
        if (c.result == -EINTR || c.result == -EAGAIN || c.result == -ECANCELED) {
            // Transient (nvmeio never cancels, so ECANCELED comes from a signal storm): ask again
            // for the same range, within the retry budget.
            if (transient_.spent()) {
                fail(s.segment, {errno_code(static_cast<int>(-c.result)),
                                 std::string(to_string(op_)) + " (refused again and again)",
                                 file_.path(), at_offset, s.length - s.done});
                release(id);
                return;
            }
            pending_.push_back(request_for(id));
            ++resubmissions_;
            return;
        }
        if (c.result < 0) {
            fail(s.segment, {errno_code(static_cast<int>(-c.result)), to_string(op_), file_.path(),
                             at_offset, s.length - s.done});
            release(id);
            return;
        }
        ++requests_;
        if (perf_ != nullptr) completion_samples_.push_back(microseconds(now - s.submitted));
        const auto moved = static_cast<std::size_t>(c.result);
        if (moved > s.length - s.done) {
            fail(s.segment,
                 {errno_code(EIO),
                  std::string(to_string(op_)) + " (the kernel reported more bytes than asked)",
                  file_.path(), at_offset, s.length - s.done});
            release(id);
            return;
        }
        if (moved != 0) transient_.reset();
        s.done += moved;
        if (s.done == s.length) {
            release(id);
            return;
        }
        const std::size_t at = s.position + s.done;
        if (moved == 0) {
            if (op_ == operation::read) {
                segment_state& st = state_[s.segment];
                st.end_of_data = std::min(st.end_of_data, at);  // end of file
            } else {
                fail(s.segment, {errno_code(ENOSPC), "write (the device accepted no bytes)",
                                 file_.path(), g.offset + at, s.length - s.done});
            }
            release(id);
            return;
        }
        if (!is_aligned(g.offset + at, unit_)) {
            // O_DIRECT cannot continue from an unaligned offset: finish this range synchronously
            // (up to the caller's length: padding past it is not the caller's).
            if (at < g.length)
                remnants_.push_back(
                    {s.segment, at, std::min(g.length, s.position + s.length) - at});
            release(id);
            return;
        }
        pending_.push_back(request_for(id));
        ++resubmissions_;
    }

    Backend& backend_;
    const unsigned queue_depth_;
    const std::size_t block_size_;
    unsigned whole_held_ = 0;  // slots held by blocks that stay whole in a cut plan
    unsigned slot_count_;      // requests in flight at most: queue_depth_, or more pieces
    file& file_;
    const operation op_;
    segment* const segments_;
    const std::size_t count_;
    const std::size_t unit_;  // 1 when buffered
    const engine_settings settings_;
    transfer_perf* const perf_;
    std::vector<segment_state>& state_;  // these live in the context's engine_scratch

    unsigned inflight_ = 0;
    std::vector<slot>& slots_;
    std::vector<unsigned>& free_;
    std::vector<io_request>& pending_;
    std::vector<io_completion>& completions_;
    std::vector<remnant>& remnants_;
    retry_budget transient_;  // completions answering EAGAIN/EINTR/ECANCELED
    bool purge_ = false;      // a segment failed: drop its queued requests before submitting
    bool lost_ = false;       // reaping failed: in-flight requests could not be waited for

    std::vector<double>& submit_samples_;
    std::vector<double>& completion_samples_;
    std::uint64_t requests_ = 0;
    std::uint64_t resubmissions_ = 0;
    const clock::duration spin_;      // context_options::spin
    spin_backoff& backoff_;           // in the context's scratch: it outlives a transfer
    request_cursor<Backend> cursor_;  // the next request to hand out
};

}  // namespace detail
}  // namespace nvmeio

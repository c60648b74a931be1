#pragma once
/// \file detail/engine.hpp
/// The one submit/reap loop every front end runs on, a template of the strategy policy
/// (transfer.hpp). It moves a list of segments of one file through a context's backend, keeping
/// the queue full across segment boundaries, and records a result per segment. A failure fails
/// its segment only: its requests in flight are waited for, the other segments go on.
/// Walk-through: docs/ARCHITECTURE.md, "The path of one read".

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/perf.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

/// One range of a transfer.
struct segment {
    /// Memory side: aligned like the file's O_DIRECT rules; null for a staged segment, whose
    /// bytes the run's stager copies through the engine's staging memory.
    std::byte* memory = nullptr;
    std::uint64_t offset = 0;    ///< File offset: aligned like the file's O_DIRECT rules.
    std::size_t length = 0;      ///< Bytes to move.
    pin_record* pins = nullptr;  ///< The pin record of the buffer `memory` lies in, or null.
    std::size_t bytes = 0;       ///< Result: moved; fewer than `length` only for a read at the end.
    io_failure failure;          ///< Result: why the segment failed.
};

/// How a run reaches the caller's bytes of its staged segments (`memory` null): each request of
/// one gets a staging slot of the engine's, which `copy` fills before the request is submitted
/// (a write) or empties once it has completed (a read), so the copies overlap the device's work
/// on the other requests in flight. `copy(state, index, position, slot, length, into_slot)`
/// moves bytes [position, position + length) of segment `index` between the caller and `slot`.
struct stager {
    void (*copy)(const void* state, std::size_t index, std::size_t position, std::byte* slot,
                 std::size_t length, bool into_slot) = nullptr;
    const void* state = nullptr;
    std::size_t budget = 0;  ///< Staging bytes in use at most (at least one block's).
};

/// What the engine keeps per segment while it runs.
struct segment_state {
    std::size_t body = 0;         // bytes that go through the backend
    std::size_t end_of_data = 0;  // where a read met the end of the file
};

/// The time a run of "try again" answers from the kernel may take (context_options::
/// retry_budget), counted from the first of the run.
class retry_budget {
  public:
    explicit retry_budget(std::chrono::milliseconds limit) noexcept : limit_(limit) {}
    [[nodiscard]] std::chrono::milliseconds limit() const noexcept { return limit_; }
    /// Progress: the next "try again" starts a new run.
    void reset() noexcept { deadline_ = {}; }
    /// Counts one more "try again" answer (the first of a run starts the clock); whether the
    /// request may be tried again.
    bool try_again() noexcept {
        const auto now = std::chrono::steady_clock::now();
        if (deadline_ == std::chrono::steady_clock::time_point{}) deadline_ = now + limit_;
        return now < deadline_;
    }

  private:
    std::chrono::milliseconds limit_;
    std::chrono::steady_clock::time_point deadline_{};
};

/// Which waits for completions poll before they sleep (context_options::spin). Every wait polls
/// until polls run out of time twice in a row; from then on the next 1, 2, 4, ... 64 waits sleep
/// at once before one polls again. A poll that succeeds resets it.
class spin_backoff {
  public:
    /// Whether this wait polls (false: it sleeps at once, and counts as skipped).
    [[nodiscard]] bool should_poll() noexcept {
        if (skip_ == 0) return true;
        --skip_;
        return false;
    }
    /// The poll found what it waited for.
    void succeeded() noexcept { failures_ = 0; }
    /// The poll ran out of time.
    void ran_out() noexcept {
        if (failures_ < max_failures) ++failures_;
        skip_ = failures_ < 2 ? 0 : 1U << (failures_ - 2);
    }

  private:
    static constexpr unsigned max_failures = 8;  // skips up to 1 << 6 = 64 waits
    unsigned skip_ = 0;                          // waits left that sleep at once
    unsigned failures_ = 0;                      // polls in a row that ran out of time
};

/// Tells the CPU that this thread is spinning (x86 `pause`, Arm `yield`).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    asm volatile("yield" ::: "memory");
#endif
}

// The page an uncached file's requests are cut at (see request_cursor::next).
inline constexpr std::size_t uncached_page = 4096;

/// Whether `Backend` cuts requests (backend/request.hpp: limits_for, segment_stays_whole and
/// request_length).
template <class Backend, class = void>
struct cuts_requests : std::false_type {};
template <class Backend>
struct cuts_requests<Backend, std::void_t<decltype(std::declval<Backend&>().limits_for(
                                  std::declval<const file&>(), std::size_t{}))>> : std::true_type {
};

/// Where the engine's next request starts and how long it is: the segment and the position in it
/// not handed out yet, walked block by block. Where the backend cuts requests, each block's
/// length is asked of it once (backend/request.hpp); on an uncached file a request ends on a
/// page boundary of the file.
template <class Backend>
class request_cursor {
  public:
    struct request_range {
        std::size_t segment;
        std::size_t position;
        std::size_t length;
    };

    request_cursor(Backend& backend, const file& target, segment* segments, std::size_t count,
                   const std::vector<segment_state>& state, std::size_t block_size)
        : backend_(backend),
          file_(target),
          segments_(segments),
          count_(count),
          state_(state),
          block_size_(block_size),
          request_size_(block_size),
          block_request_(block_size) {}

    // Blocks are cut as `limits` say unless the backend keeps them whole.
    void cut_to(const request_limits& limits) {
        limits_ = limits;
        request_size_ = block_request_ = limits.request_size;
        asked_ = false;  // the block at the next position is asked again, under the new size
        segment_asked_ = false;
    }

    // What a block that does not stay whole is cut to (the block size when blocks are not cut).
    [[nodiscard]] std::size_t request_size() const noexcept { return request_size_; }

    // Moves past segments with nothing left to hand out; false when none is left.
    bool seek_unfinished() {
        while (next_segment_ < count_ &&
               (segments_[next_segment_].failure || next_position_ >= limit(next_segment_))) {
            ++next_segment_;
            next_position_ = 0;
            asked_ = false;
            segment_asked_ = false;
        }
        return next_segment_ < count_;
    }

    // The first segment not wholly handed out (after seek_unfinished()).
    [[nodiscard]] std::size_t segment_index() const noexcept { return next_segment_; }

    // The next request (call after seek_unfinished() answered true); advance() hands it out. Asked
    // again before that, it is the same request: the block's question is not asked twice.
    request_range next() {
        if (request_size_ < block_size_ && next_position_ % block_size_ == 0 && !asked_) {
            block_request_ = block_request();
            asked_ = true;
        }
        const std::size_t left = limit(next_segment_) - next_position_;
        std::size_t length = std::min(block_request_, left);
        if (file_.is_uncached() && length < left) {
            // A page two requests share is found in the cache by the second and stays there.
            const std::uint64_t start = segments_[next_segment_].offset + next_position_;
            const std::uint64_t end = align_down(start + length, uncached_page);
            if (end > start) length = static_cast<std::size_t>(end - start);
        }
        return {next_segment_, next_position_, length};
    }

    void advance(std::size_t length) noexcept {
        next_position_ += length;
        asked_ = false;
    }

  private:
    // Bytes of segment `i` that go through the backend, up to where a read met the end of file.
    [[nodiscard]] std::size_t limit(std::size_t i) const {
        return std::min(state_[i].body, state_[i].end_of_data);
    }

    // The request size of the block at the next position: request_size_, or the whole block
    // where the backend says so.
    std::size_t block_request() {
        const std::size_t length = std::min(block_size_, limit(next_segment_) - next_position_);
        // A staged segment's requests fit a staging slot; there is no memory of its to ask about.
        if (length <= request_size_ || segments_[next_segment_].memory == nullptr)
            return request_size_;
        if constexpr (cuts_requests<Backend>::value) {
            const std::byte* memory = segments_[next_segment_].memory;
            if (!segment_asked_) {
                segment_whole_ =
                    backend_.segment_stays_whole(memory, state_[next_segment_].body, limits_);
                segment_asked_ = true;
            }
            return backend_.request_length(limits_, segment_whole_, memory + next_position_,
                                           length);
        } else {
            return request_size_;
        }
    }

    Backend& backend_;
    const file& file_;
    segment* const segments_;
    const std::size_t count_;
    const std::vector<segment_state>& state_;
    const std::size_t block_size_;
    std::size_t request_size_;    // block_size_, or the backend's piece (cut_to)
    std::size_t block_request_;   // request_size_, or the length of a block that stays whole
    bool asked_ = false;          // block_request_ answers for the block at the next position
    request_limits limits_{};     // the backend's cut (cut_to)
    bool segment_whole_ = false;  // the backend keeps every block of the segment whole
    bool segment_asked_ = false;  // segment_whole_ answers for the segment at the next position
    std::size_t next_segment_ = 0;
    std::size_t next_position_ = 0;
};

/// Calls `f(first, last)` for each run of adjacent segments (each starting where the one before
/// ends) that ends past `size`, in order. A segment that arrives failed is moved by nobody, so it
/// is in no run.
template <class F>
void for_each_run_past(const segment* segments, std::size_t count, std::uint64_t size, F&& f) {
    for (std::size_t first = 0; first < count;) {
        if (segments[first].failure) {
            ++first;
            continue;
        }
        std::size_t last = first;
        std::uint64_t end = segments[first].offset + segments[first].length;
        while (last + 1 < count && !segments[last + 1].failure &&
               segments[last + 1].offset == end) {
            ++last;
            end += segments[last].length;
        }
        if (end > size) f(first, last);
        first = last + 1;
    }
}

/// The engine of one context (basic_aio_context<Backend> holds one and befriends it): its working
/// memory, which every transfer on the context reuses (a transfer in steady state allocates
/// nothing), and the loop. A context serves one thread at a time, so none of it needs a lock.
/// Requests a failed reap left in flight (strays) may write into the staging slots until they are
/// collected: until then no run frees or reuses them, and neither does the engine's end.
template <class Backend>
class engine {
    using clock = std::chrono::steady_clock;

  public:
    engine() = default;
    // Strays name the staging slots and the engine waits for them on its context's backend, so
    // the engine stays where it is (and so does its context).
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    /// Waits for the strays before the staging slots are freed: the context's backend outlives
    /// its engine. Where that wait fails, the slots are never freed (a leak, where the
    /// alternative is memory the kernel may write into after it is given to someone else).
    ~engine() {
        if (backend_ == nullptr || backend_->in_flight() == 0) return;
        if (collect_strays(*backend_) < 0 && !staging_.empty())
            (void)new aligned_buffer(std::move(staging_));
    }

    /// Moves `segments` of `f` through `context` with `settings`, a strategy policy or a
    /// transfer_config, measuring into `perf` unless it is null; afterwards each segment has its
    /// `bytes` and `failure`. Throws std::logic_error for a context used by two threads at once
    /// or after fork. Staged segments (null `memory`) need `stage`. The loop is a template of
    /// the policy; a transfer_config's strategy picks one here, the one place it is read.
    template <class Settings, class Context>
    static void move(Context& context, const file& f, operation op, segment* segments,
                     std::size_t count, const Settings& settings, transfer_perf* perf,
                     const stager* stage = nullptr) {
        if (count == 0) return;
        context.creator_.require_current("aio_context");
        const auto busy = context.in_use_.acquire("aio_context");
        engine& e = context.engine_;
        if constexpr (is_policy<Settings>) {
            e.template run<Settings>(context.backend_, context.options_, f, op, segments, count,
                                     settings.submit, perf, stage);
        } else if (settings.strategy == strategy_kind::sequential) {
            e.template run<sequential>(context.backend_, context.options_, f, op, segments, count,
                                       settings.submit, perf, stage);
        } else {
            e.template run<overlapped>(context.backend_, context.options_, f, op, segments, count,
                                       settings.submit, perf, stage);
        }
    }

  private:
    struct slot {  // one queue entry: a request's range of a segment
        std::size_t segment = 0;
        std::size_t position = 0;  // of the request's range within its segment
        std::size_t length = 0;
        std::size_t done = 0;
        clock::time_point submitted{};
        std::byte* staging = nullptr;  // the request's staging slot, for a staged segment
    };
    struct remnant {  // what goes through the synchronous path afterwards
        std::size_t segment;
        std::size_t position;
        std::size_t length;
        bool operator<(const remnant& o) const {
            return std::tie(segment, position) < std::tie(o.segment, o.position);
        }
    };
    // What one run works on: set by run(), gone when it returns.
    struct job {
        Backend& backend;
        const file& target;
        const operation op;
        segment* const segments;
        const std::size_t count;
        const unsigned queue_depth;
        const std::size_t unit;  // 1 when buffered
        const bool one_request_per_call;
        transfer_perf* const perf;  // measure into this (no clock is read without it)
        const clock::duration spin;
        const stager* const stage;  // for staged segments
        request_cursor<Backend> cursor;
        unsigned slot_count;      // requests in flight at most: queue depth, or more pieces
        unsigned whole_held = 0;  // slots held by blocks that stay whole in a cut plan
        retry_budget transient;   // completions answering EAGAIN/EINTR/ECANCELED
        bool purge = false;       // a segment failed: drop its queued requests first
        bool lost = false;        // reaping failed: requests in flight cannot be waited for
        std::uint64_t requests = 0;
        std::uint64_t resubmissions = 0;
    };

    static double microseconds(clock::duration d) {
        return std::chrono::duration<double, std::micro>(d).count();
    }

    template <class Strategy>
    void run(Backend& backend, const context_options& options, const file& target, operation op,
             segment* segments, std::size_t count, submit_mode submit, transfer_perf* perf,
             const stager* stage) {
        constexpr bool drain_before_refill = Strategy::kind == strategy_kind::sequential;
        job j{backend,
              target,
              op,
              segments,
              count,
              options.queue_depth,
              target.required_alignment(),
              submit == submit_mode::single,
              perf,
              options.spin,
              stage,
              {backend, target, segments, count, state_, options.block_size},
              options.queue_depth,
              0,
              retry_budget{options.retry_budget}};
        job_ = &j;
        backend_ = &backend;
        struct forget {  // job_ never outlives the run, however it ends
            job*& current;
            ~forget() { current = nullptr; }
        } forget_job{job_};
        const clock::time_point start = perf != nullptr ? clock::now() : clock::time_point{};
        if (const int strays = collect_strays(backend); strays < 0) {
            refuse(strays);  // prepare would reuse the staging slots the strays may write into
            settle(start);
            return;
        }
        prepare(options);
        if (op == operation::write && !j.lost) reserve_write_runs(target, segments, count);
        while (!j.lost) {
            if (!drain_before_refill || in_flight() == 0) hand_out();
            submit_pending();
            if (j.lost) break;
            if (in_flight() == 0) {
                if (free_.size() != j.slot_count) {  // slots wait for requests it says are done
                    lose(-EPROTO, "reap (the backend reports no request in flight while some are)");
                    break;
                }
                if (!j.cursor.seek_unfinished()) break;
                continue;
            }
            reap(drain_before_refill ? in_flight() : 1);
        }
        finish_synchronously();
        settle(start);
    }

    // Requests in flight: the backend's count, the only one kept.
    std::size_t in_flight() const noexcept { return job_->backend.in_flight(); }

    // Waits for the requests an earlier run left in flight when its reap failed, and drops their
    // completions: until then they may write into the memory they name (the caller's, or this
    // engine's staging slots), so this comes before any of it is used again, and none
    // of them is taken for one of the next run's requests. 0, or the -errno of a reap that failed
    // again (the requests are still in flight). Allocates nothing (the destructor calls it).
    static int collect_strays(Backend& backend) noexcept {
        io_completion dropped[64];
        constexpr std::size_t room = sizeof dropped / sizeof dropped[0];
        while (backend.in_flight() > 0) {
            int got;
            do {
                got = backend.reap(dropped, std::min(backend.in_flight(), room), room, nullptr);
            } while (got == -EINTR);
            if (got < 0) return got;
        }
        return 0;
    }

    // The strays could not be collected (`rc`, the reap's -errno): they may still write into the
    // memory they name, the staging slots among it, so the run touches none of it and moves
    // nothing, not even what would go through the synchronous path. Every segment fails, as
    // lose() fails those not finished.
    void refuse(int rc) {
        job& j = *job_;
        j.lost = true;
        submit_samples_.clear();
        completion_samples_.clear();
        for (std::size_t i = 0; i < j.count; ++i) {
            const segment& s = j.segments[i];
            fail(i, {errno_code(-rc),
                     "io_getevents of the requests an earlier transfer left in flight when its "
                     "reap failed (they may still be in flight)",
                     j.target.path(), s.offset, s.length});
        }
    }

    // Sets up the run's state: each segment's body (what goes asynchronously) and end of data,
    // the backend's cut, the queue slots, staging for staged segments, and room for the
    // requests, completions and samples, reusing the vectors of earlier runs.
    void prepare(const context_options& options) {
        job& j = *job_;
        std::size_t body_total = 0;
        std::size_t longest_staged = 0;
        state_.assign(j.count, {});  // no allocation once it is large enough
        for (std::size_t i = 0; i < j.count; ++i) {
            segment& s = j.segments[i];  // one that arrives failed is not moved
            s.bytes = 0;
            state_[i].body = static_cast<std::size_t>(align_down(s.length, j.unit));
            if (s.memory == nullptr) longest_staged = std::max(longest_staged, s.length);
            state_[i].end_of_data = s.length;
            body_total += state_[i].body;
        }
        if constexpr (cuts_requests<Backend>::value) {
            const request_limits limits = j.backend.limits_for(j.target, options.block_size);
            j.cursor.cut_to(limits);
            j.slot_count = limits.slots;
        }
        slots_.resize(j.slot_count);
        free_.clear();
        for (unsigned i = j.slot_count; i > 0; --i)
            free_.push_back(i - 1);
        if (longest_staged != 0) make_staging(j.target, longest_staged);
        pending_.clear();
        pending_.reserve(j.slot_count);
        completions_.resize(std::min<std::size_t>(j.slot_count, 256));
        remnants_.clear();
        submit_samples_.clear();
        completion_samples_.clear();
        if (j.perf != nullptr) {
            const std::size_t expected =
                body_total / j.cursor.request_size() + j.count + 2 * j.slot_count;
            submit_samples_.reserve(j.one_request_per_call ? expected : expected / 2 + 1);
            completion_samples_.reserve(expected);
        }
    }

    // The run's end: each segment's bytes (a failed one moved none; a read, up to its end of
    // data; a write, all), and the measurements since `start`.
    void settle(clock::time_point start) {
        const job& j = *job_;
        std::uint64_t moved = 0;
        for (std::size_t i = 0; i < j.count; ++i) {
            segment& s = j.segments[i];
            s.bytes = s.failure ? 0 : std::min(state_[i].end_of_data, s.length);
            if (j.op == operation::write && !s.failure) s.bytes = s.length;
            moved += s.bytes;
        }
        if (j.perf == nullptr) return;
        j.perf->elapsed_us = microseconds(clock::now() - start);
        j.perf->submit = latency_stats::from_samples(submit_samples_);
        j.perf->completion = latency_stats::from_samples(completion_samples_);
        j.perf->requests = j.requests;
        j.perf->resubmissions = j.resubmissions;
        j.perf->bytes = moved;
    }

    // Before a write, reserves each run of adjacent segments that ends past the file's size
    // (for_each_run_past) with file::reserve_range; a run that cannot be reserved fails its
    // segments. One fstat answers for every run inside the size: that size never drops below an
    // end a writer has reserved (size_lock.hpp).
    static void reserve_write_runs(const file& f, segment* segments, std::size_t count) {
        if (f.kind() != file_kind::regular) return;  // nothing to reserve (file::reserve_range)
        std::error_code ec;
        const std::uint64_t size = f.size(ec);
        for_each_run_past(segments, count, ec ? 0 : size, [&](std::size_t first, std::size_t last) {
            io_failure failure;
            f.reserve_range(segments[first].offset,
                            static_cast<std::size_t>(segments[last].offset + segments[last].length -
                                                     segments[first].offset),
                            failure);
            for (std::size_t i = first; failure && i <= last; ++i) {
                if (!segments[i].failure) segments[i].failure = failure;
            }
        });
    }

    // The staging slots of a run with staged segments: as many as the stager's budget holds (at
    // least one, at most one per queue slot), each as long as a request of theirs can be, plus
    // one the synchronous path uses; memory the engine keeps for its next runs.
    void make_staging(const file& target, std::size_t longest_staged) {
        const job& j = *job_;
        if (j.stage == nullptr || j.stage->copy == nullptr)
            throw std::logic_error("nvmeio: a staged segment without a stager");
        const std::size_t alignment = std::max<std::size_t>(target.alignment().memory, 4096);
        staging_stride_ = static_cast<std::size_t>(
            align_up(std::min(j.cursor.request_size(), longest_staged), alignment));
        const std::size_t slots =
            std::clamp<std::size_t>(j.stage->budget / staging_stride_, 1, j.slot_count);
        const std::size_t bytes = (slots + 1) * staging_stride_;
        if (staging_.capacity() < bytes || staging_.alignment() < alignment)
            staging_ = aligned_buffer(bytes, alignment);
        staging_free_.clear();
        for (std::size_t k = slots; k > 0; --k)
            staging_free_.push_back(staging_.data() + k * staging_stride_);
    }

    io_request request_for(unsigned id) const {
        const slot& s = slots_[id];
        const segment& g = job_->segments[s.segment];
        const bool staged = s.staging != nullptr;
        std::byte* memory = staged ? s.staging : g.memory + s.position;
        return {job_->target.native_handle(),
                job_->op,
                memory + s.done,
                s.length - s.done,
                g.offset + s.position + s.done,
                id,
                job_->target.rw_flags(),
                staged ? staging_.pins() : g.pins};
    }

    // Hands out requests while slots are free. Blocks that stay whole in a cut plan hold at most
    // queue depth slots, as they would uncut; their pieces may take the rest.
    void hand_out() {
        job& j = *job_;
        while (!free_.empty() && j.cursor.seek_unfinished()) {
            const auto next = j.cursor.next();
            const bool whole = next.length > j.cursor.request_size();
            if (whole && j.whole_held >= j.queue_depth) break;
            std::byte* staging = nullptr;
            if (j.segments[next.segment].memory == nullptr) {
                if (staging_free_.empty()) break;  // a staged request completes first
                staging = staging_free_.back();
                staging_free_.pop_back();
                if (j.op == operation::write) {  // the caller's bytes, before the kernel sees them
                    j.stage->copy(j.stage->state, next.segment, next.position, staging, next.length,
                                  true);
                }
            }
            const unsigned id = free_.back();
            free_.pop_back();
            slots_[id] = {next.segment, next.position, next.length, 0, {}, staging};
            if (whole) ++j.whole_held;
            pending_.push_back(request_for(id));
            j.cursor.advance(next.length);
        }
    }

    void release(unsigned id) {
        slot& s = slots_[id];
        if (s.length > job_->cursor.request_size()) --job_->whole_held;
        if (s.staging != nullptr) staging_free_.push_back(std::exchange(s.staging, nullptr));
        free_.push_back(id);
    }

    // Frees a request's slot once it has moved what it will: a staged read's bytes go to the
    // caller first.
    void retire(unsigned id) {
        const slot& s = slots_[id];
        if (s.staging != nullptr && job_->op == operation::read && s.done != 0)
            job_->stage->copy(job_->stage->state, s.segment, s.position, s.staging, s.done, false);
        release(id);
    }

    void fail(std::size_t i, io_failure failure) {
        if (!job_->segments[i].failure) {
            job_->segments[i].failure = std::move(failure);
            job_->purge = true;
        }
    }

    // Requests of segments that failed since they were queued are not submitted.
    void drop_failed_pending(std::size_t from) {
        job_->purge = false;
        std::size_t kept = from;
        for (std::size_t i = from; i < pending_.size(); ++i) {
            const auto id = static_cast<unsigned>(pending_[i].user_data);
            if (job_->segments[slots_[id].segment].failure) {
                release(id);
            } else {
                pending_[kept++] = pending_[i];
            }
        }
        pending_.resize(kept);
    }

    void submit_pending() {
        job& j = *job_;
        transfer_perf* const perf = j.perf;
        std::size_t sent = 0;
        retry_budget backoff{j.transient.limit()};  // io_submit's refusals
        while (!j.lost) {
            if (j.purge) drop_failed_pending(sent);
            if (sent >= pending_.size()) break;
            // Block submit is paced: a call holds no more requests than are already in flight
            // (one to start an idle queue), because the kernel dispatches nothing of a
            // multi-request call until it ends (docs/perf/causes.md, "Cause 7").
            const std::size_t count =
                j.one_request_per_call
                    ? 1
                    : std::min(pending_.size() - sent, std::max<std::size_t>(1, in_flight()));
            const clock::time_point before = perf != nullptr ? clock::now() : clock::time_point{};
            const int rc = j.backend.submit(&pending_[sent], count);
            if (perf != nullptr) submit_samples_.push_back(microseconds(clock::now() - before));
            if (rc > 0) {
                if (perf != nullptr) {
                    for (int i = 0; i < rc; ++i)
                        slots_[pending_[sent + i].user_data].submitted = before;
                }
                sent += static_cast<std::size_t>(rc);
                backoff.reset();
                continue;
            }
            if (rc == 0 || rc == -EAGAIN || rc == -EINTR) {
                // Refused for now: reap a completion to make room, or, with nothing in flight,
                // pause 100 us and try again while the budget lasts.
                if (in_flight() > 0) {
                    reap(1);
                    continue;
                }
                if (backoff.try_again()) {
                    const timespec pause{0, 100'000};
                    ::nanosleep(&pause, nullptr);
                    continue;
                }
            }
            const io_request& refused = pending_[sent];
            const auto id = static_cast<unsigned>(refused.user_data);
            fail(slots_[id].segment, {errno_code(rc < 0 ? -rc : EAGAIN),
                                      std::string("io_submit of a ") + to_string(j.op),
                                      j.target.path(), refused.offset, refused.length});
        }
        pending_.clear();
    }

    // One reap of at least `at_least` completions (retried on EINTR), each handled.
    int reap_once(std::size_t at_least) {
        int got;
        do {
            got = job_->backend.reap(completions_.data(), at_least, completions_.size(), nullptr);
        } while (got == -EINTR);
        if (got > 0) {
            const clock::time_point now =
                job_->perf != nullptr ? clock::now() : clock::time_point{};
            for (int i = 0; i < got; ++i)
                complete(completions_[static_cast<std::size_t>(i)], now);
        }
        return got;
    }

    // Waits for at least `min` completions (at most one reap's worth) and handles them; where
    // context_options::spin and the back-off allow, it polls (reaps of at least 0) before it
    // sleeps in the backend.
    void reap(std::size_t min) {
        const clock::duration spin = job_->spin;
        min = std::min(min, completions_.size());
        if (spin.count() > 0 && backoff_.should_poll()) {
            const clock::time_point deadline = clock::now() + spin;
            bool ran_out = false;
            while (min > 0) {
                const int got = reap_once(0);
                if (got < 0) return lose(got);
                min -= std::min(min, static_cast<std::size_t>(got));
                if (min == 0) break;
                if (clock::now() >= deadline) {
                    backoff_.ran_out();
                    ran_out = true;
                    break;
                }
                cpu_relax();
            }
            if (!ran_out) backoff_.succeeded();
        }
        if (min == 0) return;
        const int got = reap_once(min);
        if (got < 0) lose(got);
    }

    // Reaping failed: requests may still be in flight and cannot be waited for. Every segment
    // not finished yet fails and nothing more is issued; finished ones keep their result.
    void lose(int rc, const char* operation = "io_getevents (requests may still be in flight)") {
        job& j = *job_;
        j.lost = true;
        (void)j.cursor.seek_unfinished();  // wholly issued, a segment is finished unless busy
        std::vector<bool> unfinished(j.count, false);
        for (std::size_t i = j.cursor.segment_index(); i < j.count; ++i)
            unfinished[i] = true;
        std::vector<bool> idle(j.slot_count, false);
        for (unsigned id : free_)
            idle[id] = true;
        for (unsigned id = 0; id < j.slot_count; ++id) {
            if (!idle[id]) unfinished[slots_[id].segment] = true;
        }
        for (std::size_t i = 0; i < j.count; ++i) {
            if (!unfinished[i]) continue;
            fail(i, {errno_code(-rc), operation, j.target.path(), j.segments[i].offset,
                     j.segments[i].length});
        }
    }

    void complete(const io_completion& c, clock::time_point now) {
        job& j = *job_;
        const auto id = static_cast<unsigned>(c.user_data);
        slot& s = slots_[id];
        segment& g = j.segments[s.segment];
        if (g.failure) {  // its segment failed: nothing more is issued for it
            release(id);
            return;
        }
        // Fails the request's segment from where the request stands, and frees its slot.
        const auto give_up = [&](int error, const char* why) {
            fail(s.segment, {errno_code(error), std::string(to_string(j.op)) + why, j.target.path(),
                             g.offset + s.position + s.done, s.length - s.done});
            release(id);
        };
        if (c.result == -EINTR || c.result == -EAGAIN || c.result == -ECANCELED) {
            // Transient (nvmeio never cancels, so ECANCELED comes from a signal storm): ask again
            // for the same range, within the retry budget.
            if (!j.transient.try_again())
                return give_up(static_cast<int>(-c.result), " (refused again and again)");
            pending_.push_back(request_for(id));
            ++j.resubmissions;
            return;
        }
        if (c.result < 0) return give_up(static_cast<int>(-c.result), "");
        ++j.requests;
        if (j.perf != nullptr) completion_samples_.push_back(microseconds(now - s.submitted));
        const auto moved = static_cast<std::size_t>(c.result);
        if (moved > s.length - s.done)
            return give_up(EIO, " (the kernel reported more bytes than asked)");
        if (moved != 0) j.transient.reset();
        s.done += moved;
        if (s.done == s.length) {
            retire(id);
            return;
        }
        const std::size_t at = s.position + s.done;
        if (moved == 0) {
            if (j.op == operation::read) {
                segment_state& st = state_[s.segment];
                st.end_of_data = std::min(st.end_of_data, at);  // end of file
            } else {
                fail(s.segment, {errno_code(ENOSPC), "write (the device accepted no bytes)",
                                 j.target.path(), g.offset + at, s.length - s.done});
            }
            retire(id);
            return;
        }
        if (!is_aligned(g.offset + at, j.unit)) {
            // O_DIRECT cannot continue from an unaligned offset: finish this range synchronously
            // (what is left of the request).
            remnants_.push_back({s.segment, at, s.length - s.done});
            retire(id);
            return;
        }
        pending_.push_back(request_for(id));
        ++j.resubmissions;
    }

    // The last step: what O_DIRECT could not take asynchronously (the rest of a request that came
    // back short at an unaligned offset, and a segment's unaligned tail) goes through the file's
    // synchronous path, which merges partial alignment units through a bounce buffer.
    void finish_synchronously() {
        job& j = *job_;
        std::sort(remnants_.begin(), remnants_.end());
        std::size_t r = 0;
        for (std::size_t i = 0; i < j.count; ++i) {
            segment& g = j.segments[i];
            segment_state& st = state_[i];
            const std::size_t first = r;
            while (r < remnants_.size() && remnants_[r].segment == i)
                ++r;
            if (g.failure) continue;
            auto move_through = [&](std::byte* memory, std::size_t position, std::size_t length) {
                if (j.op == operation::write) {
                    j.target.write_at(nvmeio::memory(memory, length), g.offset + position,
                                      g.failure);
                    return !g.failure;
                }
                if (position >= st.end_of_data) return false;
                const std::size_t got = j.target.read_at(nvmeio::memory(memory, length),
                                                         g.offset + position, g.failure);
                if (got < length) st.end_of_data = std::min(st.end_of_data, position + got);
                return !g.failure;
            };
            // A staged segment's bytes go through the synchronous path's own staging slot (the
            // others may still be the kernel's after a failed reap), a slot's length at a time.
            auto move = [&](std::size_t position, std::size_t length) {
                if (g.memory != nullptr) return move_through(g.memory + position, position, length);
                std::byte* through = staging_.data();
                for (std::size_t at = position; at < position + length;) {
                    const std::size_t n = std::min(staging_stride_, position + length - at);
                    if (j.op == operation::write)
                        j.stage->copy(j.stage->state, i, at, through, n, true);
                    if (!move_through(through, at, n)) return false;
                    if (j.op == operation::read)
                        j.stage->copy(j.stage->state, i, at, through,
                                      std::min(n, st.end_of_data - std::min(st.end_of_data, at)),
                                      false);
                    at += n;
                }
                return true;
            };
            bool going = true;
            for (std::size_t k = first; k < r && going; ++k)
                going = move(remnants_[k].position, remnants_[k].length);
            if (going && st.body < g.length) move(st.body, g.length - st.body);
        }
    }

    job* job_ = nullptr;  // the run in progress
    std::vector<segment_state> state_;
    std::vector<slot> slots_;
    std::vector<unsigned> free_;
    std::vector<io_request> pending_;
    std::vector<io_completion> completions_;
    std::vector<remnant> remnants_;
    std::vector<double> submit_samples_;
    std::vector<double> completion_samples_;
    spin_backoff backoff_;                  // outlives a transfer: which waits poll before sleeping
    aligned_buffer staging_;                // staged segments' slots, kept for the next run
    Backend* backend_ = nullptr;            // the context's, once a run used it (for strays)
    std::size_t staging_stride_ = 0;        // bytes of one, in the run in progress
    std::vector<std::byte*> staging_free_;  // of staging_ (past the synchronous path's first)
};

/// The engine of a context type.
template <class Context>
using engine_of = engine<typename Context::backend_type>;

}  // namespace detail
NVMEIO_END_NAMESPACE

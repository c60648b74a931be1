#pragma once
/// \file detail/segment_engine.hpp
/// The multi-range twin of transfer_engine: moves many (memory, file offset, length) segments of
/// one file through one backend, keeping the queue full across segment boundaries, with a
/// result per segment. Batches (batch.hpp) and stripes (stripe.hpp) run on it.
///
/// Each segment obeys strategy.hpp's O_DIRECT rules on its own (aligned memory and offset, any
/// length: the unaligned tail goes through the file's synchronous path). A failed request fails
/// its segment only; the other segments carry on.

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
#include "nvmeio/detail/transfer_engine.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"

namespace nvmeio {
namespace detail {

struct segment {
    std::byte* memory = nullptr;
    std::uint64_t offset = 0;
    std::size_t length = 0;
    // Filled by the engine.
    std::size_t bytes = 0;  // moved: length, or less for a read meeting the end of the file
    io_failure failure;
};

template <class Backend>
class segment_engine {
    using clock = std::chrono::steady_clock;

  public:
    segment_engine(Backend& backend, unsigned queue_depth, std::size_t block_size, file& target,
                   operation op, std::vector<segment>& segments)
        : backend_(backend),
          queue_depth_(queue_depth),
          block_size_(block_size),
          file_(target),
          op_(op),
          segments_(segments),
          unit_(target.required_alignment()),
          state_(segments.size()) {
        for (std::size_t i = 0; i < segments_.size(); ++i) {
            state_[i].body = static_cast<std::size_t>(align_down(segments_[i].length, unit_));
            state_[i].end_of_data = segments_[i].length;
        }
    }

    // Moves every segment; afterwards each has `bytes` and maybe `failure`.
    void run() {
        slots_.resize(queue_depth_);
        for (unsigned i = queue_depth_; i > 0; --i)
            free_.push_back(i - 1);
        completions_.resize(std::min<std::size_t>(queue_depth_, 256));
        // Every written segment first lies inside the file (see file::reserve_range).
        if (op_ == operation::write) {
            for (segment& s : segments_)
                file_.reserve_range(s.offset, s.length, s.failure);
        }
        while (!lost_) {
            fill();
            submit_pending();
            if (lost_) break;
            if (inflight_ == 0) {
                if (exhausted()) break;
                continue;
            }
            reap(1);
        }
        for (std::size_t i = 0; i < segments_.size(); ++i) {
            segment& s = segments_[i];
            if (!s.failure && !lost_) finish_synchronously(i);
            s.bytes = s.failure
                          ? 0
                          : (op_ == operation::read ? std::min(state_[i].end_of_data, s.length)
                                                    : s.length);
        }
    }

  private:
    struct segment_state {
        std::size_t body = 0;         // aligned prefix that goes through the backend
        std::size_t end_of_data = 0;  // where a read met the end of the file
        std::vector<std::pair<std::size_t, std::size_t>> remnants;  // (position, length)
    };
    struct slot {
        std::size_t segment = 0;
        std::size_t position = 0;
        std::size_t length = 0;
        std::size_t done = 0;
    };

    bool usable(std::size_t i) const {
        return !segments_[i].failure &&
               next_position_ < std::min(state_[i].body, state_[i].end_of_data);
    }

    bool exhausted() {
        while (next_segment_ < segments_.size() && !usable(next_segment_)) {
            ++next_segment_;
            next_position_ = 0;
        }
        return next_segment_ >= segments_.size();
    }

    io_request request_for(unsigned id) const {
        const slot& s = slots_[id];
        const segment& g = segments_[s.segment];
        return {file_.native_handle(),          op_,
                g.memory + s.position + s.done, s.length - s.done,
                g.offset + s.position + s.done, id};
    }

    void fill() {
        while (!free_.empty() && !exhausted()) {
            const std::size_t limit =
                std::min(state_[next_segment_].body, state_[next_segment_].end_of_data);
            const unsigned id = free_.back();
            free_.pop_back();
            slots_[id] = {next_segment_, next_position_,
                          std::min(block_size_, limit - next_position_), 0};
            pending_.push_back(request_for(id));
            next_position_ += slots_[id].length;
        }
    }

    void fail_segment(std::size_t i, io_failure failure) {
        if (!segments_[i].failure) segments_[i].failure = std::move(failure);
    }

    void submit_pending() {
        std::size_t sent = 0;
        submit_backoff backoff;
        while (sent < pending_.size() && !lost_) {
            const int rc = backend_.submit(&pending_[sent], pending_.size() - sent);
            if (rc > 0) {
                inflight_ += static_cast<unsigned>(rc);
                sent += static_cast<std::size_t>(rc);
                backoff.reset();
                continue;
            }
            if (backoff.retry(rc, inflight_ > 0, [this] { reap(1); })) continue;
            // Refused: the request's segment fails; the rest of the batch goes on.
            const io_request& refused = pending_[sent];
            const unsigned id = static_cast<unsigned>(refused.user_data);
            fail_segment(slots_[id].segment, {errno_code(rc < 0 ? -rc : EAGAIN),
                                              std::string("io_submit of a ") + to_string(op_),
                                              file_.path(), refused.offset, refused.length});
            free_.push_back(id);
            ++sent;
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
            // Requests may still be in flight and cannot be waited for: every unfinished
            // segment fails and nothing more is issued.
            for (std::size_t i = 0; i < segments_.size(); ++i) {
                fail_segment(i, {errno_code(-got), "io_getevents (requests may still be in flight)",
                                 file_.path(), segments_[i].offset, segments_[i].length});
            }
            lost_ = true;
            return;
        }
        for (int i = 0; i < got; ++i)
            complete(completions_[static_cast<std::size_t>(i)]);
    }

    void complete(const io_completion& c) {
        const auto id = static_cast<unsigned>(c.user_data);
        slot& s = slots_[id];
        segment& g = segments_[s.segment];
        segment_state& st = state_[s.segment];
        --inflight_;
        const std::uint64_t at_offset = g.offset + s.position + s.done;
        if (c.result == -EINTR || c.result == -EAGAIN) {
            pending_.push_back(request_for(id));
            return;
        }
        if (c.result < 0) {
            fail_segment(s.segment, {errno_code(static_cast<int>(-c.result)), to_string(op_),
                                     file_.path(), at_offset, s.length - s.done});
            free_.push_back(id);
            return;
        }
        const auto moved = static_cast<std::size_t>(c.result);
        if (moved > s.length - s.done) {
            fail_segment(s.segment,
                         {errno_code(EIO),
                          std::string(to_string(op_)) + " (the kernel reported more bytes than "
                                                        "asked)",
                          file_.path(), at_offset, s.length - s.done});
            free_.push_back(id);
            return;
        }
        s.done += moved;
        if (s.done == s.length || g.failure) {
            free_.push_back(id);
            return;
        }
        const std::size_t at = s.position + s.done;
        if (moved == 0) {
            if (op_ == operation::read) {
                st.end_of_data = std::min(st.end_of_data, at);
            } else {
                fail_segment(s.segment, {errno_code(ENOSPC), "write (the device accepted no bytes)",
                                         file_.path(), g.offset + at, s.length - s.done});
            }
            free_.push_back(id);
            return;
        }
        if (!is_aligned(g.offset + at, unit_)) {
            st.remnants.push_back({at, s.length - s.done});
            free_.push_back(id);
            return;
        }
        pending_.push_back(request_for(id));
    }

    void finish_synchronously(std::size_t i) {
        segment& g = segments_[i];
        segment_state& st = state_[i];
        std::sort(st.remnants.begin(), st.remnants.end());
        if (st.body < g.length) st.remnants.push_back({st.body, g.length - st.body});
        for (const auto& [position, length] : st.remnants) {
            if (op_ == operation::read) {
                if (position >= st.end_of_data) break;
                const std::size_t got =
                    file_.read_at(g.memory + position, length, g.offset + position, g.failure);
                if (g.failure) return;
                if (got < length) st.end_of_data = std::min(st.end_of_data, position + got);
            } else {
                file_.write_at(g.memory + position, length, g.offset + position, g.failure);
                if (g.failure) return;
            }
        }
    }

    Backend& backend_;
    const unsigned queue_depth_;
    const std::size_t block_size_;
    file& file_;
    const operation op_;
    std::vector<segment>& segments_;
    const std::size_t unit_;
    std::vector<segment_state> state_;

    std::size_t next_segment_ = 0;
    std::size_t next_position_ = 0;
    unsigned inflight_ = 0;
    std::vector<slot> slots_;
    std::vector<unsigned> free_;
    std::vector<io_request> pending_;
    std::vector<io_completion> completions_;
    bool lost_ = false;
};

}  // namespace detail
}  // namespace nvmeio

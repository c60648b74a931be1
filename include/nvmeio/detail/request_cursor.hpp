#pragma once
/// \file detail/request_cursor.hpp
/// Where the engine's next request starts and how long it is: the segment and the position in it
/// not handed out yet, walked block by block. A block goes out in requests of the plan's size
/// (request_plan.hpp) unless its memory stays whole, asked once for every block; on an uncached
/// file a request ends on a page boundary of the file.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/engine_scratch.hpp"
#include "nvmeio/detail/request_plan.hpp"
#include "nvmeio/detail/segment.hpp"
#include "nvmeio/file.hpp"

namespace nvmeio::detail {

// The page an uncached file's requests are cut at (see request_cursor::next).
inline constexpr std::size_t uncached_page = 4096;

template <class Backend>
class request_cursor {
  public:
    // The next request: its segment, where it starts in it, its length.
    struct request_range {
        std::size_t segment;
        std::size_t position;
        std::size_t length;
    };

    request_cursor(const Backend& backend, pagemap& pages, const file& target, segment* segments,
                   std::size_t count, const std::vector<engine_scratch::segment_state>& state,
                   std::size_t block_size)
        : backend_(backend),
          pages_(pages),
          file_(target),
          segments_(segments),
          count_(count),
          state_(state),
          block_size_(block_size),
          request_size_(block_size),
          block_request_(block_size) {}

    // Blocks are cut to `plan.request_size` unless they stay whole.
    void follow(const request_plan& plan) {
        request_size_ = block_request_ = plan.request_size;
        registered_whole_from_ = plan.registered_whole_from;
        asked_ = false;  // the block at the next position is asked again, under the new plan
    }

    // What a block that does not stay whole is cut to (the block size when blocks are not cut).
    [[nodiscard]] std::size_t request_size() const noexcept { return request_size_; }

    // Moves past segments with nothing left to hand out; true when none is left.
    bool exhausted() {
        while (next_segment_ < count_ &&
               (segments_[next_segment_].failure || next_position_ >= limit(next_segment_))) {
            ++next_segment_;
            next_position_ = 0;
            asked_ = false;
        }
        return next_segment_ >= count_;
    }

    // The first segment not wholly handed out (after exhausted()).
    [[nodiscard]] std::size_t segment_index() const noexcept { return next_segment_; }

    // The next request (call after exhausted() answered false); advance() hands it out. Asked
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

    // The request size of the block at the next position: request_size_ unless its memory stays
    // whole (request_plan.hpp); whether huge pages back the segment is asked at its first block.
    std::size_t block_request() {
        const std::byte* const memory = segments_[next_segment_].memory;
        const std::size_t body = state_[next_segment_].body;
        if (next_position_ == 0)
            huge_ = body > request_size_ && pages_.huge_pages_back(memory, body);
        const std::size_t length = std::min(block_size_, limit(next_segment_) - next_position_);
        if (length <= request_size_) return request_size_;
        const bool whole =
            stays_whole(backend_, memory + next_position_, length, registered_whole_from_, huge_);
        return whole ? block_size_ : request_size_;
    }

    const Backend& backend_;
    pagemap& pages_;  // the context's
    const file& file_;
    segment* const segments_;
    const std::size_t count_;
    const std::vector<engine_scratch::segment_state>& state_;
    const std::size_t block_size_;
    std::size_t request_size_;   // block_size_, or what the device takes whole (request_plan)
    std::size_t block_request_;  // request_size_, or block_size_ for a block that stays whole
    std::size_t registered_whole_from_ = 0;  // request_plan::registered_whole_from
    bool huge_ = false;                      // huge pages back the segment being handed out
    bool asked_ = false;  // block_request_ answers for the block at the next position
    std::size_t next_segment_ = 0;
    std::size_t next_position_ = 0;
};

}  // namespace nvmeio::detail

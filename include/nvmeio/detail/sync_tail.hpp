#pragma once
/// \file detail/sync_tail.hpp
/// The engine's last step (detail/engine.hpp): what O_DIRECT could not take asynchronously — the
/// rest of a request that came back short at an unaligned offset, and a segment's unaligned tail
/// — goes through the file's synchronous path, which merges partial alignment units through a
/// bounce buffer.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "nvmeio/detail/engine_scratch.hpp"
#include "nvmeio/detail/file_door.hpp"
#include "nvmeio/detail/segment.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"

namespace nvmeio::detail {

// Short-result remnants and unaligned tails go through the file's synchronous path, which
// merges partial alignment units through a bounce buffer.
inline void finish_synchronously(file& target, operation op, segment* segments, std::size_t count,
                                 std::vector<engine_scratch::segment_state>& state,
                                 std::vector<engine_scratch::remnant>& remnants) {
    std::sort(remnants.begin(), remnants.end());
    std::size_t r = 0;
    for (std::size_t i = 0; i < count; ++i) {
        segment& g = segments[i];
        engine_scratch::segment_state& st = state[i];
        const std::size_t first = r;
        while (r < remnants.size() && remnants[r].segment == i)
            ++r;
        if (g.failure) continue;
        auto move = [&](std::size_t position, std::size_t length) {
            if (op == operation::write) {
                file_door::write_at(target, g.memory + position, length, g.offset + position,
                                    g.failure);
                return !g.failure;
            }
            if (position >= st.end_of_data) return false;
            const std::size_t got = file_door::read_at(target, g.memory + position, length,
                                                       g.offset + position, g.failure);
            if (got < length) st.end_of_data = std::min(st.end_of_data, position + got);
            return !g.failure;
        };
        bool going = true;
        for (std::size_t k = first; k < r && going; ++k)
            going = move(remnants[k].position, remnants[k].length);
        if (going && st.body < g.length) move(st.body, g.length - st.body);
    }
}

}  // namespace nvmeio::detail

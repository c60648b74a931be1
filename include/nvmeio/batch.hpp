#pragma once
/// \file batch.hpp
/// Batched (vectored) transfers: many `(buffer, length, offset)` requests on one file, e.g. every
/// tensor of a model or every block of a KV cache, moved as one batch.
///
/// Requests are sorted by file offset and runs of adjacent ones form groups of at most
/// `batch_options::max_io_size` bytes. A group goes
///  - straight between the caller's memory and the file when its buffers are adjacent in memory
///    too (tensors in one flat arena): one large I/O, no copy;
///  - member by member, still without a copy, when every buffer and offset is aligned and the
///    members average at least `min_direct_size` bytes;
///  - otherwise through an aligned bounce arena (one memcpy per request): one large I/O, and the
///    caller's buffers need no alignment.
/// Every I/O of the batch, of every group, shares one queue, which stays full across group
/// boundaries (detail/segment_engine.hpp). Each request gets its own result.
///
/// O_DIRECT rules: a request that does not continue the previous one in the file (in offset
/// order) must start at a multiple of `file.alignment().offset` (std::invalid_argument otherwise,
/// naming the request). Lengths may be anything. Requests may come in any order; overlapping
/// write requests leave the overlap with unspecified bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <system_error>
#include <vector>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/segment_engine.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/parallel.hpp"
#include "nvmeio/strategy.hpp"

namespace nvmeio {

/// One request of a batch: `length` bytes between `buffer` and `offset` of the batch's file.
struct batch_request {
    void* buffer = nullptr;    ///< Memory side (any alignment).
    std::size_t length = 0;    ///< Bytes.
    std::uint64_t offset = 0;  ///< File offset.
};

/// What happened to one request.
struct batch_result {
    /// Bytes moved: the length, except for a read meeting the end of the file, or 0 on failure.
    std::size_t bytes = 0;
    /// The failure of the I/O that carried this request, if it failed.
    io_failure failure;
};

/// How a batch is coalesced and moved.
struct batch_options {
    /// Largest coalesced I/O in bytes (>= 1). A run of requests that cannot be cut at an aligned
    /// offset may exceed it.
    std::size_t max_io_size = std::size_t{8} << 20;
    /// Aligned requests averaging at least this many bytes go member by member without a copy;
    /// smaller ones are coalesced through the bounce arena.
    std::size_t min_direct_size = std::size_t{256} << 10;
    /// Bytes of bounce arena in flight at once (rounded up to hold the largest bounced group);
    /// more bounced bytes than this are moved in successive waves.
    std::size_t bounce_size = std::size_t{64} << 20;
    /// Strategy and submit mode of each coalesced I/O (`measure` is ignored).
    transfer_config config{};
};

/// What a batch did.
struct batch_outcome {
    std::vector<batch_result> results;  ///< One per request, in the caller's order.
    std::size_t ios = 0;            ///< I/Os issued after coalescing (each then split in blocks).
    std::size_t bounced_bytes = 0;  ///< Bytes that went through the bounce arena.

    /// Index of the first request (in the caller's order) that failed, or `results.size()`.
    [[nodiscard]] std::size_t first_failure() const noexcept {
        for (std::size_t i = 0; i < results.size(); ++i) {
            if (results[i].failure) return i;
        }
        return results.size();
    }
};

namespace detail {

struct batch_group {
    std::vector<std::size_t> members;  // request indices in file order
    std::uint64_t offset = 0;
    std::size_t length = 0;
    bool contiguous_memory = true;
};

// Sorts and coalesces; throws std::invalid_argument for a request that breaks a rule.
inline std::vector<batch_group> plan_batch(const file& f, operation op,
                                           const std::vector<batch_request>& requests,
                                           const batch_options& options) {
    if (options.max_io_size == 0) throw_invalid("batch max_io_size must be at least 1 (got 0)");
    if (options.bounce_size == 0) throw_invalid("batch bounce_size must be at least 1 (got 0)");
    if (!f.is_open()) throw_invalid("batch on '" + f.path() + "': the file is not open");
    if (op == operation::write && f.mode() == open_mode::read) {
        throw_invalid("write batch on '" + f.path() +
                      "': the file was opened with "
                      "open_mode::read");
    }
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const batch_request& r = requests[i];
        if (r.length == 0) continue;
        const std::string what = "batch request " + std::to_string(i) + " (" +
                                 std::to_string(r.length) + " bytes at offset " +
                                 std::to_string(r.offset) + " in '" + f.path() + "')";
        if (r.buffer == nullptr) throw_invalid(what + ": the buffer is null");
        if (r.offset > std::numeric_limits<std::uint64_t>::max() - r.length ||
            r.offset + r.length > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
            throw_invalid(what + ": the range passes the largest file offset");
        }
        order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return requests[a].offset < requests[b].offset;
    });
    const std::size_t unit = f.is_direct() ? f.alignment().offset : 1;
    std::vector<batch_group> groups;
    for (std::size_t index : order) {
        const batch_request& r = requests[index];
        if (!groups.empty()) {
            batch_group& g = groups.back();
            const bool adjacent = g.offset + g.length == r.offset;
            const bool must_join = !is_aligned(r.offset, unit);
            if (adjacent && (must_join || g.length + r.length <= options.max_io_size)) {
                const batch_request& last = requests[g.members.back()];
                g.contiguous_memory =
                    g.contiguous_memory &&
                    static_cast<std::byte*>(last.buffer) + last.length == r.buffer;
                g.members.push_back(index);
                g.length += r.length;
                continue;
            }
        }
        if (!is_aligned(r.offset, unit)) {
            throw_invalid("batch request " + std::to_string(index) + " (" +
                          std::to_string(r.length) + " bytes at offset " +
                          std::to_string(r.offset) + " in '" + f.path() +
                          "'): the offset is not a multiple of " + std::to_string(unit) +
                          " bytes, which O_DIRECT on this file requires, and the request does "
                          "not continue the one before it in the file");
        }
        groups.push_back({{index}, r.offset, r.length, true});
    }
    return groups;
}

enum class group_path { whole, members, bounce };

inline group_path choose_path(const file& f, const std::vector<batch_request>& requests,
                              const batch_group& g, const batch_options& options) {
    const std::size_t memory_unit = f.is_direct() ? f.alignment().memory : 1;
    const std::size_t unit = f.required_alignment();
    if (g.contiguous_memory && is_aligned(requests[g.members.front()].buffer, memory_unit)) {
        return group_path::whole;
    }
    if (g.length / g.members.size() < options.min_direct_size) return group_path::bounce;
    for (std::size_t index : g.members) {
        if (!is_aligned(requests[index].buffer, memory_unit) ||
            !is_aligned(requests[index].offset, unit)) {
            return group_path::bounce;
        }
    }
    return group_path::members;
}

// Moves the groups `which` (in that order) through `context`, in waves that each keep the
// queue full; results go to `outcome`.
template <class Backend>
void run_groups(basic_aio_context<Backend>& context, file& f, operation op,
                const std::vector<batch_request>& requests, const std::vector<batch_group>& groups,
                const std::vector<std::size_t>& which, const batch_options& options,
                batch_outcome& outcome) {
    struct owner {
        std::size_t group;
        std::size_t member;  // index of the request for group_path::members, else unused
        group_path path;
        std::size_t arena_at;
    };
    const std::size_t memory_unit = f.is_direct() ? f.alignment().memory : 1;
    aligned_buffer arena;
    std::size_t k = 0;
    while (k < which.size()) {
        std::vector<segment> segments;
        std::vector<owner> owners;
        std::size_t arena_used = 0;
        for (; k < which.size(); ++k) {
            const batch_group& g = groups[which[k]];
            const group_path path = choose_path(f, requests, g, options);
            if (path == group_path::bounce) {
                if (arena_used != 0 && arena_used + g.length > options.bounce_size) break;
                if (arena.capacity() < arena_used + g.length) {
                    if (arena_used != 0) break;  // the arena grows between waves only
                    arena = aligned_buffer(std::max(g.length, options.bounce_size),
                                           std::max<std::size_t>(memory_unit, 4096));
                }
                std::byte* data = arena.data() + arena_used;
                if (op == operation::write) {
                    std::size_t at = 0;
                    for (std::size_t index : g.members) {
                        std::memcpy(data + at, requests[index].buffer, requests[index].length);
                        at += requests[index].length;
                    }
                }
                segments.push_back({data, g.offset, g.length, 0, {}});
                owners.push_back({which[k], 0, path, arena_used});
                // Later bounced groups start aligned in the arena, as O_DIRECT needs.
                arena_used += static_cast<std::size_t>(
                    align_up(g.length, std::max<std::size_t>(memory_unit, 4096)));
                outcome.bounced_bytes += g.length;
            } else if (path == group_path::whole) {
                segments.push_back({static_cast<std::byte*>(requests[g.members.front()].buffer),
                                    g.offset,
                                    g.length,
                                    0,
                                    {}});
                owners.push_back({which[k], 0, path, 0});
            } else {
                for (std::size_t index : g.members) {
                    segments.push_back({static_cast<std::byte*>(requests[index].buffer),
                                        requests[index].offset,
                                        requests[index].length,
                                        0,
                                        {}});
                    owners.push_back({which[k], index, path, 0});
                }
            }
            ++outcome.ios;
        }
        segment_engine<Backend> engine(context.backend(), context.queue_depth(),
                                       context.block_size(), f, op, segments);
        engine.run();
        for (std::size_t i = 0; i < segments.size(); ++i) {
            const owner& o = owners[i];
            const segment& done = segments[i];
            if (o.path == group_path::members) {
                outcome.results[o.member].bytes = done.bytes;
                outcome.results[o.member].failure = done.failure;
                continue;
            }
            std::size_t at = 0;
            for (std::size_t index : groups[o.group].members) {
                batch_result& result = outcome.results[index];
                const std::size_t length = requests[index].length;
                if (done.failure) {
                    result.failure = done.failure;
                } else {
                    result.bytes = done.bytes > at ? std::min(length, done.bytes - at) : 0;
                    if (o.path == group_path::bounce && op == operation::read &&
                        result.bytes != 0) {
                        std::memcpy(requests[index].buffer, done.memory + at, result.bytes);
                    }
                }
                at += length;
            }
        }
    }
}

inline void throw_first_failure(const batch_outcome& outcome) {
    const std::size_t index = outcome.first_failure();
    if (index != outcome.results.size()) throw_if(outcome.results[index].failure);
}

}  // namespace detail

/// Moves every request of the batch; failures are recorded per request (never thrown).
/// Throws std::invalid_argument for a request that breaks a rule above, before any I/O.
template <class Backend>
batch_outcome transfer_batch(basic_aio_context<Backend>& context, file& f, operation op,
                             const std::vector<batch_request>& requests,
                             const batch_options& options = {}) {
    const std::vector<detail::batch_group> groups = detail::plan_batch(f, op, requests, options);
    const auto busy = context.begin_transfer();
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    std::vector<std::size_t> all(groups.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    detail::run_groups(context, f, op, requests, groups, all, options, outcome);
    return outcome;
}

/// As above, with the coalesced I/Os spread over the threads of a parallel context (each thread
/// takes a run of consecutive I/Os of about equal bytes and has its own bounce arena).
///
/// On an O_DIRECT file, written I/Os that end off the alignment merge their last unit with the
/// file and may trim the file back to their end; they run after the others, one at a time in
/// file order, so that no trim can cut bytes another thread has just written.
template <class Backend>
batch_outcome transfer_batch(basic_parallel_context<Backend>& context, file& f, operation op,
                             const std::vector<batch_request>& requests,
                             const batch_options& options = {}) {
    const std::vector<detail::batch_group> groups = detail::plan_batch(f, op, requests, options);
    const std::size_t unit = f.required_alignment();
    std::vector<std::size_t> spread;  // groups moved in parallel
    std::vector<std::size_t> ragged;  // written groups ending off the alignment
    std::size_t total = 0;
    for (std::size_t i = 0; i < groups.size(); ++i) {
        if (op == operation::write && !is_aligned(groups[i].offset + groups[i].length, unit)) {
            ragged.push_back(i);
        } else {
            spread.push_back(i);
            total += groups[i].length;
        }
    }
    const std::size_t workers = std::min<std::size_t>(context.threads(), spread.size());
    // Cut `spread` into `workers` runs of about total / workers bytes each.
    std::vector<std::size_t> cuts{0};
    std::size_t running = 0;
    for (std::size_t i = 0; i < spread.size() && cuts.size() < workers; ++i) {
        running += groups[spread[i]].length;
        if (running * workers >= total * cuts.size()) cuts.push_back(i + 1);
    }
    cuts.push_back(spread.size());
    std::vector<batch_outcome> partial(cuts.size());  // the last one is for `ragged`
    for (batch_outcome& p : partial)
        p.results.resize(requests.size());
    context.run(cuts.size() - 1, [&](std::size_t part, basic_aio_context<Backend>& worker) {
        const std::vector<std::size_t> mine(
            spread.begin() + static_cast<std::ptrdiff_t>(cuts[part]),
            spread.begin() + static_cast<std::ptrdiff_t>(cuts[part + 1]));
        detail::run_groups(worker, f, op, requests, groups, mine, options, partial[part]);
    });
    if (!ragged.empty()) {
        context.run(1, [&](std::size_t, basic_aio_context<Backend>& worker) {
            detail::run_groups(worker, f, op, requests, groups, ragged, options, partial.back());
        });
    }
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    for (batch_outcome& p : partial) {
        outcome.ios += p.ios;
        outcome.bounced_bytes += p.bounced_bytes;
    }
    for (std::size_t part = 0; part + 1 < cuts.size(); ++part) {
        for (std::size_t i = cuts[part]; i < cuts[part + 1]; ++i) {
            for (std::size_t index : groups[spread[i]].members)
                outcome.results[index] = std::move(partial[part].results[index]);
        }
    }
    for (std::size_t i : ragged) {
        for (std::size_t index : groups[i].members)
            outcome.results[index] = std::move(partial.back().results[index]);
    }
    return outcome;
}

/// Reads every request of the batch; throws io_error for the first failed request (in the
/// caller's order) after every request has been tried.
template <class Context>
batch_outcome read_batch(Context& context, file& f, const std::vector<batch_request>& requests,
                         const batch_options& options = {}) {
    batch_outcome outcome = transfer_batch(context, f, operation::read, requests, options);
    detail::throw_first_failure(outcome);
    return outcome;
}

/// Writes every request of the batch; throws io_error for the first failed request (in the
/// caller's order) after every request has been tried.
template <class Context>
batch_outcome write_batch(Context& context, file& f, const std::vector<batch_request>& requests,
                          const batch_options& options = {}) {
    batch_outcome outcome = transfer_batch(context, f, operation::write, requests, options);
    detail::throw_first_failure(outcome);
    return outcome;
}

}  // namespace nvmeio

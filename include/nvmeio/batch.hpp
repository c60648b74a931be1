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
/// A group, or a member, whose end is not O_DIRECT-aligned moves its aligned part as above and
/// its last partial unit through the bounce arena as one whole unit (a write first reads that
/// unit from the file and merges it, and the file is cut back to its right size afterwards), so
/// small and ragged requests cost one queued I/O each, never a synchronous call.
/// Every I/O of the batch, of every group, shares one queue, which stays full across group
/// boundaries, on the engine every transfer runs on (detail/engine.hpp). Each request gets its
/// own result.
///
/// O_DIRECT rules: a request that does not continue the previous one in the file (in offset
/// order) must start at a multiple of `file.alignment().offset` (std::invalid_argument otherwise,
/// naming the request). Lengths may be anything. Requests may come in any order; overlapping
/// write requests leave the overlap with unspecified bytes.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/engine.hpp"
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
    /// Bytes of bounce arena in flight at once (rounded up to hold the largest bounced group,
    /// never more than the batch bounces); more bounced bytes than this move in successive waves.
    std::size_t bounce_size = std::size_t{64} << 20;
    /// Strategy and submit mode of the batch's I/Os; `measure` fills `batch_outcome::perf`.
    transfer_config config{};
};

/// What a batch did.
struct batch_outcome {
    std::vector<batch_result> results;  ///< One per request, in the caller's order.
    std::size_t ios = 0;            ///< I/Os issued after coalescing (each then split in blocks).
    std::size_t bounced_bytes = 0;  ///< Bytes that went through the bounce arena.
    /// With `batch_options::config.measure`: the batch's latencies, requests, time and bytes.
    transfer_perf perf;

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

[[noreturn]] inline void throw_bad_request(const file& f, std::size_t index, const batch_request& r,
                                           const std::string& why) {
    throw_invalid("batch request " + std::to_string(index) + " (" + std::to_string(r.length) +
                  " bytes at offset " + std::to_string(r.offset) + " in '" + f.path() +
                  "'): " + why);
}

// The one check of a batch's settings and requests (messages are built only on failure).
inline void check_batch(const file& f, operation op, const std::vector<batch_request>& requests,
                        const batch_options& options) {
    if (options.max_io_size == 0) throw_invalid("batch max_io_size must be at least 1 (got 0)");
    if (options.bounce_size == 0) throw_invalid("batch bounce_size must be at least 1 (got 0)");
    if (!f.is_open()) throw_invalid("batch on '" + f.path() + "': the file is not open");
    if (op == operation::write && f.mode() == open_mode::read) {
        throw_invalid("write batch on '" + f.path() +
                      "': the file was opened with open_mode::read");
    }
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const batch_request& r = requests[i];
        if (r.length == 0) continue;
        if (r.buffer == nullptr) throw_bad_request(f, i, r, "the buffer is null");
        if (r.offset > std::numeric_limits<std::uint64_t>::max() - r.length ||
            r.offset + r.length > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
            throw_bad_request(f, i, r, "the range passes the largest file offset");
        }
    }
}

// Sorts and coalesces checked requests; throws std::invalid_argument for an unaligned request
// that does not continue the one before it.
inline std::vector<batch_group> plan_batch(const file& f,
                                           const std::vector<batch_request>& requests,
                                           const batch_options& options) {
    std::vector<std::size_t> order;
    order.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i].length != 0) order.push_back(i);
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
            // Both lengths are below 2^63 (check_batch), so the sum cannot wrap.
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
            throw_bad_request(f, index, r,
                              "the offset is not a multiple of " + std::to_string(unit) +
                                  " bytes, which O_DIRECT on this file requires, and the request "
                                  "does not continue the one before it in the file");
        }
        groups.push_back({{index}, r.offset, r.length, true});
    }
    return groups;
}

// True when a group goes without a copy: its buffers are adjacent in memory and start aligned,
// or each is aligned and they average at least `min_direct_size` bytes.
inline bool zero_copy(const file& f, const std::vector<batch_request>& requests,
                      const batch_group& g, const batch_options& options) {
    const std::size_t memory_unit = f.is_direct() ? f.alignment().memory : 1;
    if (g.contiguous_memory) return is_aligned(requests[g.members.front()].buffer, memory_unit);
    if (g.length / g.members.size() < options.min_direct_size) return false;
    for (std::size_t index : g.members) {
        if (!is_aligned(requests[index].buffer, memory_unit) ||
            !is_aligned(requests[index].offset, f.required_alignment())) {
            return false;
        }
    }
    return true;
}

// A wave of a batch as engine segments. A segment whose `span` is not 0 lives in the bounce
// arena. A piece is the part of a request that one segment carries: `length` bytes at
// `position` in the segment and at `from` in the request.
struct batch_wave {
    struct piece {
        std::size_t request, position, from, length;
    };
    std::vector<segment> segments;
    std::vector<std::size_t> first_piece{0};  // per segment, and one past the last
    std::vector<piece> pieces;
};

// Before a wave of writes: bounced segments get the caller's bytes; those ending inside an
// alignment unit first get the rest of that unit from the file, read through the queue. Returns
// where the furthest padded write ends and where the file must end if that is past its end.
template <class Backend>
std::pair<std::uint64_t, std::uint64_t> fill_bounced_writes(
    basic_aio_context<Backend>& context, file& f, batch_wave& w, const engine_settings& settings,
    const std::vector<batch_request>& requests) {
    const std::size_t unit = f.required_alignment();
    std::vector<segment> units;
    std::vector<std::size_t> owners;
    for (std::size_t i = 0; i < w.segments.size(); ++i) {
        const segment& s = w.segments[i];
        if (s.span <= s.length) continue;
        const auto start = static_cast<std::size_t>(align_down(s.length, unit));
        units.push_back({s.memory + start, s.offset + start, unit, 0, 0, {}});
        owners.push_back(i);
    }
    move_segments(context, f, operation::read, units.data(), units.size(), settings);
    std::pair<std::uint64_t, std::uint64_t> furthest{0, 0};
    for (std::size_t u = 0; u < units.size(); ++u) {
        if (units[u].failure) {
            w.segments[owners[u]].failure = units[u].failure;
            w.segments[owners[u]].failure.operation = "read (merging an unaligned write)";
        }
        // Past the file's end the unit is zeros, as the file reads there.
        std::memset(units[u].memory + units[u].bytes, 0, unit - units[u].bytes);
        const segment& s = w.segments[owners[u]];
        if (s.offset + s.span > furthest.first) {
            furthest = {s.offset + s.span,
                        std::max(s.offset + s.length, units[u].offset + units[u].bytes)};
        }
    }
    for (std::size_t i = 0; i < w.segments.size(); ++i) {
        for (std::size_t p = w.first_piece[i]; w.segments[i].span != 0 && p < w.first_piece[i + 1];
             ++p) {
            const batch_wave::piece& piece = w.pieces[p];
            std::memcpy(w.segments[i].memory + piece.position,
                        static_cast<const std::byte*>(requests[piece.request].buffer) + piece.from,
                        piece.length);
        }
    }
    return furthest;
}

// Moves the groups `which` (in that order) through `context`, in waves that each keep the
// queue full. Results go to `results` (each request's own element, so workers running other
// groups may share it), counts to `tally`, measurements (when asked) to `perf`.
template <class Backend>
void run_groups(basic_aio_context<Backend>& context, file& f, operation op,
                const std::vector<batch_request>& requests, const std::vector<batch_group>& groups,
                const std::vector<std::size_t>& which, const batch_options& options,
                std::vector<batch_result>& results, batch_outcome& tally,
                std::vector<transfer_perf>& perf) {
    const std::size_t unit = f.required_alignment();
    const std::size_t arena_alignment =
        std::max<std::size_t>(f.is_direct() ? f.alignment().memory : 1, 4096);
    // Whole units may be moved past a request's end only where the file is made of units.
    const bool pad =
        unit > 1 && (f.kind() == file_kind::regular || f.kind() == file_kind::block_device);
    const std::size_t padding_unit = pad ? unit : 1;
    auto slot_of = [&](std::size_t length) {
        return static_cast<std::size_t>(align_up(length, std::max(unit, arena_alignment)));
    };
    // Arena bytes each group needs: all of it bounced, or the last partial unit of a zero-copy
    // group (the only unaligned end such a group can have).
    std::vector<bool> direct(which.size());
    std::vector<std::size_t> needs(which.size());
    std::size_t remaining = 0;
    for (std::size_t k = 0; k < which.size(); ++k) {
        const batch_group& g = groups[which[k]];
        direct[k] = zero_copy(f, requests, g, options);
        needs[k] = slot_of(direct[k] ? g.length % padding_unit : g.length);
        // Overlapping requests may add up past SIZE_MAX: saturate (it only caps the arena).
        remaining = needs[k] > SIZE_MAX - remaining ? SIZE_MAX : remaining + needs[k];
    }

    aligned_buffer arena;
    for (std::size_t k = 0; k < which.size();) {
        batch_wave w;
        std::size_t arena_used = 0;
        // A segment for bytes [from, to) of group g: from `memory`, or bounced when null.
        auto add = [&](const batch_group& g, std::size_t from, std::size_t to, std::byte* memory) {
            std::size_t span = 0;
            if (memory == nullptr) {
                memory = arena.data() + arena_used;
                span = static_cast<std::size_t>(align_up(to - from, padding_unit));
                arena_used += slot_of(to - from);
                tally.bounced_bytes += to - from;
            }
            w.segments.push_back({memory, g.offset + from, to - from, span, 0, {}});
            std::size_t at = 0;
            for (std::size_t index : g.members) {
                const std::size_t begin = std::max(at, from);
                const std::size_t end = std::min(at + requests[index].length, to);
                if (begin < end) w.pieces.push_back({index, begin - from, begin - at, end - begin});
                at += requests[index].length;
            }
            w.first_piece.push_back(w.pieces.size());
        };
        for (; k < which.size(); ++k) {
            const batch_group& g = groups[which[k]];
            if (needs[k] != 0) {
                if (arena_used != 0 && arena_used + needs[k] > options.bounce_size) break;
                if (arena.capacity() < arena_used + needs[k]) {
                    if (arena_used != 0) break;  // the arena grows between waves only
                    arena =
                        aligned_buffer(std::max(needs[k], std::min(options.bounce_size, remaining)),
                                       arena_alignment);
                }
                remaining = remaining > needs[k] ? remaining - needs[k] : 0;
            }
            ++tally.ios;
            if (!direct[k]) {
                add(g, 0, g.length, nullptr);
                continue;
            }
            // Runs of members adjacent in memory go as one segment each.
            const std::size_t body = g.length - g.length % padding_unit;
            std::size_t at = 0;
            for (std::size_t m = 0; m < g.members.size() && at < body;) {
                auto* memory = static_cast<std::byte*>(requests[g.members[m]].buffer);
                std::size_t end = at + requests[g.members[m]].length;
                for (++m; m < g.members.size() && g.contiguous_memory; ++m)
                    end += requests[g.members[m]].length;
                add(g, at, std::min(end, body), memory);
                at = end;
            }
            if (body != g.length) add(g, body, g.length, nullptr);
        }
        engine_settings settings = settings_for(options.config, nullptr);
        std::pair<std::uint64_t, std::uint64_t> padding{0, 0};  // see fill_bounced_writes
        if (op == operation::write) {
            engine_settings merge = settings;
            if (options.config.measure) merge.perf = &perf.emplace_back();
            padding = fill_bounced_writes(context, f, w, merge, requests);
        }
        if (options.config.measure) settings.perf = &perf.emplace_back();
        move_segments(context, f, op, w.segments.data(), w.segments.size(), settings);
        const io_failure trim = padding.first != 0
                                    ? trim_write_padding(f, padding.first, padding.second)
                                    : io_failure{};
        for (std::size_t i = 0; i < w.segments.size(); ++i) {
            const segment& done = w.segments[i];
            const io_failure& failure = done.failure ? done.failure : trim;
            for (std::size_t p = w.first_piece[i]; p < w.first_piece[i + 1]; ++p) {
                const batch_wave::piece& piece = w.pieces[p];
                batch_result& result = results[piece.request];
                if (done.failure || (trim && done.span > done.length)) {
                    if (!result.failure) result.failure = failure;
                    result.bytes = 0;
                }
                if (result.failure) continue;
                const std::size_t got = done.bytes > piece.position
                                            ? std::min(piece.length, done.bytes - piece.position)
                                            : 0;
                if (done.span != 0 && op == operation::read && got != 0) {
                    std::memcpy(
                        static_cast<std::byte*>(requests[piece.request].buffer) + piece.from,
                        done.memory + piece.position, got);
                }
                result.bytes += got;
            }
        }
    }
}

// Measurements of the pieces as one, over `elapsed`.
inline void settle_perf(batch_outcome& outcome, const std::vector<transfer_perf>& pieces,
                        std::chrono::steady_clock::time_point start) {
    std::vector<const transfer_perf*> parts;
    for (const transfer_perf& p : pieces)
        parts.push_back(&p);
    std::uint64_t bytes = 0;
    for (const batch_result& r : outcome.results)
        bytes += r.bytes;
    outcome.perf = merge_perf(parts, bytes, start);
}

// A checked batch on one context.
template <class Backend>
batch_outcome run_batch(basic_aio_context<Backend>& context, file& f, operation op,
                        const std::vector<batch_request>& requests, const batch_options& options) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<batch_group> groups = plan_batch(f, requests, options);
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    std::vector<std::size_t> all(groups.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    std::vector<transfer_perf> perf;
    run_groups(context, f, op, requests, groups, all, options, outcome.results, outcome, perf);
    if (options.config.measure) settle_perf(outcome, perf, start);
    return outcome;
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
    detail::check_batch(f, op, requests, options);
    return detail::run_batch(context, f, op, requests, options);
}

/// As above, with the coalesced I/Os spread over the threads of a parallel context (each thread
/// takes a run of consecutive I/Os of about equal bytes and has its own bounce arena).
///
/// On an O_DIRECT file, written I/Os that end off the alignment merge their last unit with the
/// file; they run after the others, on one thread in file order, so that cutting the file back
/// to its size never races with another thread growing it.
template <class Backend>
batch_outcome transfer_batch(basic_parallel_context<Backend>& context, file& f, operation op,
                             const std::vector<batch_request>& requests,
                             const batch_options& options = {}) {
    const auto start = std::chrono::steady_clock::now();
    detail::check_batch(f, op, requests, options);
    const std::vector<detail::batch_group> groups = detail::plan_batch(f, requests, options);
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
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    std::vector<batch_outcome> partial(cuts.size());  // the last one is for `ragged`
    std::vector<std::vector<transfer_perf>> perf(cuts.size());
    context.run(cuts.size() - 1, [&](std::size_t part, basic_aio_context<Backend>& worker) {
        const std::vector<std::size_t> mine(
            spread.begin() + static_cast<std::ptrdiff_t>(cuts[part]),
            spread.begin() + static_cast<std::ptrdiff_t>(cuts[part + 1]));
        detail::run_groups(worker, f, op, requests, groups, mine, options, outcome.results,
                           partial[part], perf[part]);
    });
    if (!ragged.empty()) {
        context.run(1, [&](std::size_t, basic_aio_context<Backend>& worker) {
            detail::run_groups(worker, f, op, requests, groups, ragged, options, outcome.results,
                               partial.back(), perf.back());
        });
    }
    for (const batch_outcome& p : partial) {
        outcome.ios += p.ios;
        outcome.bounced_bytes += p.bounced_bytes;
    }
    if (options.config.measure) {
        std::vector<transfer_perf> all;
        for (const std::vector<transfer_perf>& p : perf)
            all.insert(all.end(), p.begin(), p.end());
        detail::settle_perf(outcome, all, start);
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

#pragma once
/// \file detail/batch_engine.hpp
/// How a batch moves (batch.hpp has the rules a caller sees): requests sorted
/// by file offset and coalesced into groups, groups moved in waves of engine
/// segments that keep one queue full, staged through the engine's slots where
/// they cannot go straight between the caller's memory and the file, padded to
/// whole units where they end off the alignment (a written one merged with the
/// file's bytes of its last unit, and the file cut back after).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/engine.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/detail/populate.hpp"
#include "nvmeio/detail/unit_edge.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

struct batch_group {
    std::vector<std::size_t> members;  // request indices in file order
    std::uint64_t offset = 0;
    std::size_t length = 0;
    bool contiguous_memory = true;
};

// The indices of the requests that move bytes, in file order (stable: equal
// offsets keep the caller's order).
inline std::vector<std::size_t> file_order(const std::vector<batch_request>& requests) {
    std::vector<std::size_t> order;
    order.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i].memory.size() != 0) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return requests[a].offset < requests[b].offset;
    });
    return order;
}

// The batch's one offset rule: the first request, in `order`, that starts off
// `unit` and does not continue the request before it (which then carries it as
// its tail); npos when none does.
inline std::size_t first_unaligned_start(const std::vector<batch_request>& requests,
                                         const std::vector<std::size_t>& order, std::size_t unit) {
    std::uint64_t end = 0;  // of the request before, in file order
    for (std::size_t k = 0; k < order.size(); ++k) {
        const batch_request& r = requests[order[k]];
        if (!is_aligned(r.offset, unit) && (k == 0 || r.offset != end)) return order[k];
        end = r.offset + r.memory.size();  // below 2^64: offsets and lengths are below 2^63
    }
    return static_cast<std::size_t>(-1);
}

// A write's rule: the first two requests, in `order`, that share bytes (the
// caller's lower index first); npos twice when none do. Each request starts
// where the one before it starts or later, so two that share bytes make a pair
// of neighbours that do, and neighbours are all it looks at.
inline std::pair<std::size_t, std::size_t> first_overlap(const std::vector<batch_request>& requests,
                                                         const std::vector<std::size_t>& order) {
    for (std::size_t k = 1; k < order.size(); ++k) {
        const batch_request& before = requests[order[k - 1]];
        if (requests[order[k]].offset < before.offset + before.memory.size())
            return std::minmax(order[k - 1], order[k]);
    }
    return {static_cast<std::size_t>(-1), static_cast<std::size_t>(-1)};
}

[[noreturn]] inline void throw_overlap(const file& f, const std::vector<batch_request>& requests,
                                       std::pair<std::size_t, std::size_t> pair) {
    const auto request = [&](std::size_t index) {
        const batch_request& r = requests[index];
        return std::to_string(index) + " (" + std::to_string(r.memory.size()) +
               " bytes at offset " + std::to_string(r.offset) + ")";
    };
    const batch_request& a = requests[pair.first];
    const batch_request& b = requests[pair.second];
    const std::uint64_t from = std::max(a.offset, b.offset);
    const std::uint64_t to = std::min(a.offset + a.memory.size(), b.offset + b.memory.size());
    throw_invalid("batch requests " + request(pair.first) + " and " + request(pair.second) +
                  " in '" + f.path() + "': they share bytes [" + std::to_string(from) + ", " +
                  std::to_string(to) +
                  "), and the requests of a write batch may not overlap (write them in "
                  "batches of their own)");
}

// Sorts and coalesces checked requests; throws std::invalid_argument, before
// any I/O, for write requests that share bytes and for an unaligned request
// that does not continue the one before it.
inline std::vector<batch_group> plan_batch(const file& f, operation op,
                                           const std::vector<batch_request>& requests,
                                           const batch_options& options) {
    const std::vector<std::size_t> order = file_order(requests);
    if (op == operation::write) {
        const std::pair<std::size_t, std::size_t> overlap = first_overlap(requests, order);
        if (overlap.first != static_cast<std::size_t>(-1)) throw_overlap(f, requests, overlap);
    }
    const std::size_t unit = f.is_direct() ? f.alignment().offset : 1;
    const std::size_t unaligned = first_unaligned_start(requests, order, unit);
    if (unaligned != static_cast<std::size_t>(-1)) {
        throw_bad_request(f, unaligned, requests[unaligned],
                          "the offset is not a multiple of " + std::to_string(unit) +
                              " bytes, which O_DIRECT on this file requires, and the request "
                              "does not continue the one before it in the file");
    }
    std::vector<batch_group> groups;
    for (std::size_t index : order) {
        const batch_request& r = requests[index];
        if (!groups.empty()) {
            batch_group& g = groups.back();
            const bool adjacent = g.offset + g.length == r.offset;
            const bool must_join = !is_aligned(r.offset, unit);
            // Both lengths are below 2^63 (check_batch), so the sum cannot wrap.
            if (adjacent && (must_join || g.length + r.memory.size() <= options.max_io_size)) {
                const batch_request& last = requests[g.members.back()];
                // One segment carries one pin record: memory of two buffers (or of a buffer and
                // a bare pointer) that happen to meet stays two segments.
                g.contiguous_memory = g.contiguous_memory &&
                                      last.memory.bytes() + last.memory.size() == r.memory.data() &&
                                      last.memory.pins() == r.memory.pins();
                g.members.push_back(index);
                g.length += r.memory.size();
                continue;
            }
        }
        groups.push_back({{index}, r.offset, r.memory.size(), true});
    }
    return groups;
}

// What a batch's plan depends on, of its file and context.
struct wave_rules {
    std::size_t unit = 1;          // the file's O_DIRECT unit of offsets and lengths (1: none)
    std::size_t memory_unit = 1;   // of memory addresses (1: none)
    std::size_t padding_unit = 1;  // whole units moved past a request's end (1: none)
    std::size_t block_size = 0;    // the context's
    // Padded segments one wave may hold: each written one takes a unit of merged file bytes.
    std::size_t padded_per_wave = static_cast<std::size_t>(-1);

    static wave_rules of(const file& f, std::size_t block_size, operation op,
                         std::size_t bounce_size) {
        wave_rules r;
        r.unit = f.required_alignment();
        r.memory_unit = f.is_direct() ? f.alignment().memory : 1;
        // Whole units may be moved past a request's end only where the file is made
        // of units.
        const bool pad =
            r.unit > 1 && (f.kind() == file_kind::regular || f.kind() == file_kind::block_device);
        r.padding_unit = pad ? r.unit : 1;
        r.block_size = block_size;
        if (op == operation::write)
            r.padded_per_wave = std::max<std::size_t>(1, bounce_size / r.unit);
        return r;
    }
};

// True when a group goes without a copy: its buffers are adjacent in memory and
// start aligned, or each is aligned and they average at least `min_direct_size`
// bytes.
inline bool zero_copy(const wave_rules& rules, const std::vector<batch_request>& requests,
                      const batch_group& g, const batch_options& options) {
    if (g.contiguous_memory) {
        return is_aligned(requests[g.members.front()].memory.data(), rules.memory_unit);
    }
    if (g.length / g.members.size() < options.min_direct_size) return false;
    for (std::size_t index : g.members) {
        if (!is_aligned(requests[index].memory.data(), rules.memory_unit) ||
            !is_aligned(requests[index].offset, rules.unit)) {
            return false;
        }
    }
    return true;
}

// A wave of a batch as engine segments. A staged segment (memory null) may be
// padded: its `length` is whole units, of which the caller's bytes are the
// first `wanted`. A piece is the part of a request that one segment carries:
// `length` bytes at `position` in the segment and at `from` in the request.
struct batch_wave {
    struct piece {
        std::size_t request, position, from, length;
    };
    std::vector<segment> segments;
    std::vector<std::size_t> wanted;          // per segment: the caller's bytes of it
    std::vector<std::size_t> first_piece{0};  // per segment, and one past the last
    std::vector<piece> pieces;
    std::size_t padded = 0;  // segments with wanted < length

    [[nodiscard]] bool is_padded(std::size_t i) const noexcept {
        return wanted[i] < segments[i].length;
    }
};

// A written wave's merged units: the file's bytes of each padded segment's
// last unit (zeros past the file's end), which go out with the caller's.
struct merged_units {
    std::size_t unit = 1;
    std::vector<std::size_t> of;  // per segment: its unit's index, or npos
    std::vector<std::byte> bytes;
};

// Before a wave of writes: reads each padded segment's partial unit (a segment
// starts on a unit, so its last one only) through the queue, staged
// (detail/unit_edge.hpp: the same units and zeros as file::write_at merges).
// Returns where the furthest padded write ends and where the file must end if
// that is past its end (the furthest caller's end of the writes that end there).
template <class Context>
std::pair<std::uint64_t, std::uint64_t> read_merged_units(Context& context, const file& f,
                                                          batch_wave& w, merged_units& merged,
                                                          const transfer_config& config,
                                                          transfer_perf* perf, std::size_t budget) {
    const std::size_t unit = merged.unit = f.required_alignment();
    merged.of.assign(w.segments.size(), static_cast<std::size_t>(-1));
    std::vector<segment> units;
    std::vector<std::size_t> owners;
    for (std::size_t i = 0; i < w.segments.size(); ++i) {
        if (!w.is_padded(i)) continue;
        const segment& s = w.segments[i];
        (void)unit_cover::of(s.offset, w.wanted[i], unit)
            .for_each_partial_unit([&](std::size_t at) {
                merged.of[i] = units.size();
                units.push_back({nullptr, s.offset + at, unit, nullptr, 0, {}});
                owners.push_back(i);
                return true;
            });
    }
    merged.bytes.assign(units.size() * unit, std::byte{0});
    struct into_units {
        std::byte* bytes;
        std::size_t unit;
    } const into{merged.bytes.data(), unit};
    const auto copy_out = [](const void* state, std::size_t index, std::size_t position,
                             std::byte* slot, std::size_t length, bool) {
        const auto& m = *static_cast<const into_units*>(state);
        std::memcpy(m.bytes + index * m.unit + position, slot, length);
    };
    const stager stage{copy_out, &into, budget};
    engine_of<Context>::move(context, f, operation::read, units.data(), units.size(), config, perf,
                             &stage);
    std::pair<std::uint64_t, std::uint64_t> furthest{0, 0};
    for (std::size_t u = 0; u < units.size(); ++u) {
        segment& s = w.segments[owners[u]];
        if (units[u].failure) {
            s.failure = units[u].failure;
            s.failure.operation = "read (merging an unaligned write)";
        }
        zero_past_end(merged.bytes.data() + u * unit, units[u].bytes, unit);
        // A segment whose unit could not be read is not written, so nothing is cut back for it.
        // Of equal padded ends, the one whose caller's bytes reach furthest is kept.
        const std::pair<std::uint64_t, std::uint64_t> end{
            s.offset + s.length,
            padded_write_keep(s.offset + w.wanted[owners[u]], units[u].offset + units[u].bytes)};
        if (!s.failure) furthest = std::max(furthest, end);
    }
    return furthest;
}

// The stager of a wave's staged segments: their bytes are the pieces of the
// caller's requests, and past those, in a written padded segment, its merged
// unit.
struct wave_stager_state {
    const batch_wave* wave;
    const std::vector<batch_request>* requests;
    const merged_units* merged;
};

inline void copy_wave_pieces(const void* state, std::size_t index, std::size_t position,
                             std::byte* slot, std::size_t length, bool into_slot) {
    const auto& [w, requests, merged] = *static_cast<const wave_stager_state*>(state);
    using piece = batch_wave::piece;
    const std::size_t end = position + length;
    if (into_slot && !merged->of.empty() && merged->of[index] != static_cast<std::size_t>(-1)) {
        // The merged unit first; the caller's bytes in it go over it below.
        const std::size_t unit_at = w->segments[index].length - merged->unit;
        const std::size_t from = std::max(position, unit_at);
        if (from < end) {
            std::memcpy(slot + (from - position),
                        merged->bytes.data() + merged->of[index] * merged->unit + (from - unit_at),
                        end - from);
        }
    }
    const auto first = w->pieces.begin() + static_cast<std::ptrdiff_t>(w->first_piece[index]);
    const auto last = w->pieces.begin() + static_cast<std::ptrdiff_t>(w->first_piece[index + 1]);
    // A segment's pieces tile it in order: start at the one holding `position`.
    auto p = std::upper_bound(first, last, position,
                              [](std::size_t at, const piece& q) { return at < q.position; });
    if (p != first) --p;
    for (; p != last && p->position < end; ++p) {
        const std::size_t from = std::max(position, p->position);
        const std::size_t to = std::min(end, p->position + p->length);
        if (from >= to) continue;
        std::byte* caller = (*requests)[p->request].memory.bytes() + p->from + (from - p->position);
        std::byte* staged = slot + (from - position);
        if (into_slot) {
            std::memcpy(staged, caller, to - from);
        } else {
            std::memcpy(caller, staged, to - from);
        }
    }
}

// The caller's memory a read wave copies into out of staging slots, piece by piece in file
// order: what its populate step faults in ahead of the copies (detail/populate.hpp). Segments
// read straight into the caller's memory are left alone: O_DIRECT needs no fault to fill them.
inline page_runs bounced_destinations(const batch_wave& w,
                                      const std::vector<batch_request>& requests) {
    page_runs destinations;
    for (std::size_t i = 0; i < w.segments.size(); ++i) {
        if (w.segments[i].memory != nullptr) continue;
        for (std::size_t p = w.first_piece[i]; p < w.first_piece[i + 1]; ++p) {
            const batch_wave::piece& piece = w.pieces[p];
            destinations.add(requests[piece.request].memory.bytes() + piece.from, piece.length);
        }
    }
    return destinations;
}

// Plans the groups `which` (in that order) of a batch as waves, without
// touching memory or files. A group goes straight between the caller's memory
// and the file where zero_copy says so, else staged: the engine copies its
// bytes through staging slots request by request, overlapped with the device's
// work. A group's last partial unit goes as a staged segment padded to a whole
// unit (a staged group no longer than a block goes so whole).
// A wave holds at most `padded_per_wave` padded segments (a written one takes a
// unit of merged bytes); otherwise the batch is one wave.
class wave_planner {
  public:
    wave_planner(const wave_rules& rules, const std::vector<batch_request>& requests,
                 const std::vector<batch_group>& groups, const std::vector<std::size_t>& which,
                 const batch_options& options)
        : rules_(rules),
          requests_(requests),
          groups_(groups),
          which_(which),
          direct_(which.size()) {
        for (std::size_t k = 0; k < which.size(); ++k)
            direct_[k] = zero_copy(rules, requests, groups[which[k]], options);
    }

    // The planner reads the requests, groups and order as it goes: temporaries would be gone.
    wave_planner(const wave_rules&, std::vector<batch_request>&&, const std::vector<batch_group>&,
                 const std::vector<std::size_t>&, const batch_options&) = delete;
    wave_planner(const wave_rules&, const std::vector<batch_request>&, std::vector<batch_group>&&,
                 const std::vector<std::size_t>&, const batch_options&) = delete;
    wave_planner(const wave_rules&, const std::vector<batch_request>&,
                 const std::vector<batch_group>&, std::vector<std::size_t>&&,
                 const batch_options&) = delete;

    // The next wave into `w`; false when every group has been planned.
    bool next(batch_wave& w) {
        w = batch_wave{};
        if (k_ == which_.size()) return false;
        for (; k_ < which_.size(); ++k_) {
            const batch_group& g = groups_[which_[k_]];
            // Where the group's padded part starts: its last partial unit, or all of a staged
            // group no longer than a block (one request rather than two). A longer one keeps its
            // tail apart, so that a failure there fails only the requests it carries.
            const bool padded = g.length % rules_.padding_unit != 0;
            const bool whole = !direct_[k_] && g.length <= rules_.block_size;
            const std::size_t body = whole ? 0 : g.length - g.length % rules_.padding_unit;
            if (padded && w.padded == rules_.padded_per_wave) break;
            ++ios_;
            member_ = member_at_ = 0;
            if (!direct_[k_] && body != 0) add(w, g, 0, body, {});
            std::size_t at = 0;  // runs of members adjacent in memory go as one segment each
            for (std::size_t m = 0; direct_[k_] && m < g.members.size() && at < body;) {
                const mutable_memory& first = requests_[g.members[m]].memory;
                std::size_t end = at + first.size();
                for (++m; m < g.members.size() && g.contiguous_memory; ++m)
                    end += requests_[g.members[m]].memory.size();
                add(w, g, at, std::min(end, body), first);
                at = end;
            }
            if (body != g.length) add(w, g, body, g.length, {});
        }
        return true;
    }

    [[nodiscard]] std::size_t ios() const noexcept { return ios_; }  // planned so far
    [[nodiscard]] std::size_t bounced_bytes() const noexcept { return bounced_bytes_; }

  private:
    // A segment for bytes [from, to) of group g: from the caller's memory at
    // `memory` (with its pin record), or staged (no memory) and padded to whole
    // padding units; with the pieces of the members it carries.
    void add(batch_wave& w, const batch_group& g, std::size_t from, std::size_t to,
             const mutable_memory& memory) {
        std::size_t length = to - from;
        if (memory.data() == nullptr) {
            bounced_bytes_ += to - from;
            length = unit_cover::of(g.offset + from, to - from, rules_.padding_unit).span;
            if (length != to - from) ++w.padded;
        }
        w.segments.push_back({memory.bytes(), g.offset + from, length, memory.pins(), 0, {}});
        w.wanted.push_back(to - from);
        // Segments of a group come in file order: the member scan goes on where it
        // stopped.
        for (; member_ < g.members.size() && member_at_ < to; ++member_) {
            const std::size_t index = g.members[member_];
            const std::size_t size = requests_[index].memory.size();
            const std::size_t begin = std::max(member_at_, from);
            const std::size_t end = std::min(member_at_ + size, to);
            if (begin < end)
                w.pieces.push_back({index, begin - from, begin - member_at_, end - begin});
            if (member_at_ + size > to) break;  // it goes on in the next segment
            member_at_ += size;
        }
        w.first_piece.push_back(w.pieces.size());
    }

    const wave_rules rules_;
    const std::vector<batch_request>& requests_;
    const std::vector<batch_group>& groups_;
    const std::vector<std::size_t>& which_;
    std::vector<bool> direct_;   // per group of `which`
    std::size_t k_ = 0;          // the next group of `which`
    std::size_t member_ = 0;     // the group's first member not wholly placed yet
    std::size_t member_at_ = 0;  // where it starts in the group
    std::size_t ios_ = 0;
    std::size_t bounced_bytes_ = 0;
};

// Moves one planned wave, and records what each of its requests got in
// `results`. A written wave's padded segments first get their merged units, and
// the file is cut back to its size after.
template <class Context>
void run_wave(Context& context, const file& f, operation op,
              const std::vector<batch_request>& requests, batch_wave& w,
              const batch_options& options, merged_units& merged,
              std::vector<batch_result>& results, std::vector<transfer_perf>& perf) {
    const auto measured = [&] { return options.config.measure ? &perf.emplace_back() : nullptr; };
    merged.of.clear();
    std::pair<std::uint64_t, std::uint64_t> padding{0, 0};  // see read_merged_units
    if (op == operation::write && w.padded != 0) {
        padding = read_merged_units(context, f, w, merged, options.config, measured(),
                                    options.bounce_size);
    }
    const wave_stager_state callers{&w, &requests, &merged};
    const stager stage{copy_wave_pieces, &callers, options.bounce_size};
    {
        page_runs destinations =
            op == operation::read ? bounced_destinations(w, requests) : page_runs{};
        background_populate populate(destinations);  // while the requests are in flight
        engine_of<Context>::move(context, f, op, w.segments.data(), w.segments.size(),
                                 options.config, measured(), &stage);
    }
    const io_failure trim =
        padding.first != 0 ? trim_write_padding(f, padding.first, padding.second) : io_failure{};
    for (std::size_t i = 0; i < w.segments.size(); ++i) {
        const segment& done = w.segments[i];
        const io_failure& failure = done.failure ? done.failure : trim;
        for (std::size_t p = w.first_piece[i]; p < w.first_piece[i + 1]; ++p) {
            const batch_wave::piece& piece = w.pieces[p];
            batch_result& result = results[piece.request];
            if (done.failure || (trim && w.is_padded(i))) {
                if (!result.failure) result.failure = failure;
                result.bytes = 0;
            }
            if (result.failure) continue;
            result.bytes += bytes_found(piece.position, piece.length, done.bytes);
        }
    }
}

// Moves the groups `which` (in that order) through `context`, wave by wave as
// wave_planner plans them. Results go to `results` (each request's own element,
// so workers running other groups may share it), counts to `tally`,
// measurements (when asked) to `perf`.
template <class Context>
void run_groups(Context& context, const file& f, operation op,
                const std::vector<batch_request>& requests, const std::vector<batch_group>& groups,
                const std::vector<std::size_t>& which, const batch_options& options,
                std::vector<batch_result>& results, batch_outcome& tally,
                std::vector<transfer_perf>& perf) {
    const wave_rules rules = wave_rules::of(f, context.block_size(), op, options.bounce_size);
    wave_planner planner(rules, requests, groups, which, options);
    batch_wave w;
    merged_units merged;
    while (planner.next(w))
        run_wave(context, f, op, requests, w, options, merged, results, perf);
    tally.ios += planner.ios();
    tally.bounced_bytes += planner.bounced_bytes();
}

inline std::uint64_t bytes_moved(const batch_outcome& outcome) {
    std::uint64_t bytes = 0;
    for (const batch_result& r : outcome.results)
        bytes += r.bytes;
    return bytes;
}

// A checked batch on one context.
template <class Context>
batch_outcome run_batch(Context& context, const file& f, operation op,
                        const std::vector<batch_request>& requests, const batch_options& options) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<batch_group> groups = plan_batch(f, op, requests, options);
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    std::vector<std::size_t> all(groups.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    std::vector<share> shares(1);
    run_groups(context, f, op, requests, groups, all, options, outcome.results, outcome,
               shares[0].perf);
    if (options.config.measure) outcome.perf = merged_perf(shares, bytes_moved(outcome), start);
    return outcome;
}

// A checked batch with its coalesced I/Os spread over the workers of a parallel
// context: each worker takes a run of consecutive I/Os of about equal bytes.
// Written I/Os that end off the alignment merge their last unit with the file;
// they run after the others, on one worker in file order, so that cutting the
// file back to its size never races with another worker growing it.
template <class Parallel>
batch_outcome spread_batch(Parallel& context, const file& f, operation op,
                           const std::vector<batch_request>& requests,
                           const batch_options& options) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<batch_group> groups = plan_batch(f, op, requests, options);
    const std::size_t unit = f.required_alignment();
    std::vector<std::size_t> spread_groups;  // groups moved in parallel
    std::vector<std::size_t> ragged;         // written groups ending off the alignment
    std::size_t total = 0;
    for (std::size_t i = 0; i < groups.size(); ++i) {
        if (op == operation::write && !is_aligned(groups[i].offset + groups[i].length, unit)) {
            ragged.push_back(i);
        } else {
            spread_groups.push_back(i);
            total += groups[i].length;
        }
    }
    const std::size_t workers = std::min<std::size_t>(context.threads(), spread_groups.size());
    // Cut `spread_groups` into `workers` runs of about total / workers bytes
    // each.
    std::vector<std::size_t> cuts{0};
    std::size_t running = 0;
    for (std::size_t i = 0; i < spread_groups.size() && cuts.size() < workers; ++i) {
        running += groups[spread_groups[i]].length;
        if (running * workers >= total * cuts.size()) cuts.push_back(i + 1);
    }
    cuts.push_back(spread_groups.size());
    batch_outcome outcome;
    outcome.results.resize(requests.size());
    std::vector<batch_outcome> tallies(cuts.size());  // the last one is for `ragged`
    std::vector<share> shares;
    spread(context, cuts.size() - 1, shares, [&](std::size_t part, auto& worker, share& mine) {
        const std::vector<std::size_t> runs(
            spread_groups.begin() + static_cast<std::ptrdiff_t>(cuts[part]),
            spread_groups.begin() + static_cast<std::ptrdiff_t>(cuts[part + 1]));
        run_groups(worker, f, op, requests, groups, runs, options, outcome.results, tallies[part],
                   mine.perf);
    });
    if (!ragged.empty()) {
        spread(context, 1, shares, [&](std::size_t, auto& worker, share& mine) {
            run_groups(worker, f, op, requests, groups, ragged, options, outcome.results,
                       tallies.back(), mine.perf);
        });
    }
    for (const batch_outcome& t : tallies) {
        outcome.ios += t.ios;
        outcome.bounced_bytes += t.bounced_bytes;
    }
    if (options.config.measure) outcome.perf = merged_perf(shares, bytes_moved(outcome), start);
    return outcome;
}

}  // namespace detail
NVMEIO_END_NAMESPACE

#pragma once
/// \file detail/front_end.hpp
/// What every front end shares: the one precondition check of a transfer and of a batch, the run
/// of one checked transfer, and the one splitter over a parallel context's workers, with the
/// settling of what the pieces did. It knows the contexts only as template parameters.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/engine.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/perf.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

// Whether `length` bytes at `offset` pass the largest offset a file has (off_t's), or the
// largest 64-bit number.
inline bool passes_largest_offset(std::uint64_t offset, std::size_t length) noexcept {
    return offset > std::numeric_limits<std::uint64_t>::max() - length ||
           offset + length > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
}

// The one precondition check of every transfer front end (the O_DIRECT rules of strategy.hpp).
inline void check_transfer(const file& f, operation op, const_memory memory, std::uint64_t offset,
                           std::size_t block_size) {
    const void* buffer = memory.data();
    const std::size_t length = memory.size();
    const auto what = [&] {  // built only for a message
        return std::string(to_string(op)) + " of " + std::to_string(length) + " bytes at offset " +
               std::to_string(offset) + " in '" + f.path() + "': ";
    };
    if (!f.is_open()) throw_invalid(what() + "the file is not open");
    if (op == operation::write && f.mode() == open_mode::read) {
        throw_invalid(what() + "the file was opened with open_mode::read");
    }
    if (length == 0) return;
    if (buffer == nullptr) throw_invalid(what() + "the buffer is null");
    if (passes_largest_offset(offset, length)) {
        throw_invalid(what() + "the range passes the largest file offset");
    }
    if (!f.is_direct()) return;
    const dio_alignment& a = f.alignment();
    if (!is_aligned(buffer, a.memory)) {
        char address[32];
        std::snprintf(address, sizeof address, "%p", buffer);
        throw_invalid(what() + "buffer address " + address + " is not a multiple of " +
                      std::to_string(a.memory) +
                      " bytes, which O_DIRECT on this file requires (use aligned_buffer or "
                      "aligned_allocator, or open the file with direct_io::off)");
    }
    if (!is_aligned(offset, a.offset)) {
        throw_invalid(
            what() + "the offset is not a multiple of " + std::to_string(a.offset) +
            " bytes, which O_DIRECT on this file requires (use file::read_at/write_at for "
            "unaligned ranges)");
    }
    if (!is_aligned(block_size, a.strictest())) {
        throw_invalid(what() + "block_size " + std::to_string(block_size) +
                      " is not a multiple of " + std::to_string(a.strictest()) +
                      " bytes, the O_DIRECT alignment of this file");
    }
}

[[noreturn]] inline void throw_bad_request(const file& f, std::size_t index, const batch_request& r,
                                           const std::string& why) {
    throw_invalid("batch request " + std::to_string(index) + " (" +
                  std::to_string(r.memory.size()) + " bytes at offset " + std::to_string(r.offset) +
                  " in '" + f.path() + "'): " + why);
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
        const std::size_t length = r.memory.size();
        if (length == 0) continue;
        if (r.memory.data() == nullptr) throw_bad_request(f, i, r, "the buffer is null");
        if (passes_largest_offset(r.offset, length)) {
            throw_bad_request(f, i, r, "the range passes the largest file offset");
        }
    }
}

// A checked transfer on one aio context: one segment through the engine.
template <class Context, class Config>
transfer_result run_transfer(Context& context, const file& f, operation op, mutable_memory memory,
                             std::uint64_t offset, const Config& config, io_failure& failure) {
    transfer_result result;
    failure = {};
    if (memory.empty()) return result;
    segment one{memory.bytes(), offset, memory.size(), memory.pins(), 0, {}};
    engine_of<Context>::move(context, f, op, &one, 1, config,
                             config.measure ? &result.perf : nullptr);
    result.bytes = one.bytes;
    failure = std::move(one.failure);
    return result;
}

// What one worker's share of a front end's work did: the parts of a logical range it moved
// (front ends that move one range), and its measurements (when measuring).
struct share {
    struct piece {
        std::size_t at = 0;      // where the piece starts in the range
        std::size_t length = 0;  // bytes asked
        std::size_t bytes = 0;   // bytes moved
        io_failure failure;
    };
    std::vector<piece> pieces;
    std::vector<transfer_perf> perf;
};

// The one splitter: runs share i of `count` as `job(i, worker, share)` on the workers of a
// parallel context (each job on one worker's aio context) and returns the shares when all have
// finished, appended to `shares`.
template <class Parallel, class Job>
void spread(Parallel& context, std::size_t count, std::vector<share>& shares, Job&& job) {
    const std::size_t first = shares.size();
    shares.resize(first + count);
    context.run(count, [&](std::size_t i, typename Parallel::worker_context& worker) {
        job(i, worker, shares[first + i]);
    });
}

// What the pieces of one range did, as one: the first failed piece in range order is the
// failure, unless a read's data ended before it; otherwise the range ends at the first piece that
// came up short. Returns the bytes moved (0 on failure).
inline std::size_t settle(operation op, std::size_t length, const std::vector<share>& shares,
                          io_failure& failure) {
    failure = {};
    std::size_t end = length;
    std::size_t failure_at = length;
    for (const share& s : shares) {
        for (const share::piece& p : s.pieces) {
            if (p.failure) {
                if (p.at < failure_at) {
                    failure_at = p.at;
                    failure = p.failure;
                }
            } else if (p.bytes < p.length) {
                end = std::min(end, p.at + p.bytes);
            }
        }
    }
    if (failure && op == operation::read && failure_at >= end) failure = {};
    return failure ? 0 : end;
}

// The shares' measurements as one: latencies merged, counts summed, `bytes`, and the time since
// `start` (shares overlap in time).
inline transfer_perf merged_perf(const std::vector<share>& shares, std::uint64_t bytes,
                                 std::chrono::steady_clock::time_point start) {
    transfer_perf out;
    out.bytes = bytes;
    out.elapsed_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    std::vector<const latency_stats*> submits;
    std::vector<const latency_stats*> completions;
    for (const share& s : shares) {
        for (const transfer_perf& p : s.perf) {
            submits.push_back(&p.submit);
            completions.push_back(&p.completion);
            out.requests += p.requests;
            out.resubmissions += p.resubmissions;
        }
    }
    out.submit = merge_latency(submits);
    out.completion = merge_latency(completions);
    return out;
}

}  // namespace detail
NVMEIO_END_NAMESPACE

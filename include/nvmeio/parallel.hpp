#pragma once
/// \file parallel.hpp
/// Intra-op parallelism: `transfer`, `read` and `write` (strategy.hpp) of a file on a parallel
/// context, one range cut into at most `threads()` pieces at multiples of the file's O_DIRECT
/// alignment, each on one worker's aio context (docs/PARALLEL.md, "Intra-op parallelism").
///
/// Settings and O_DIRECT rules are those of strategy.hpp. A failure is the one at the lowest
/// offset; a read meeting the end of the file returns the bytes up to it. Measured percentiles
/// are the largest of the pieces'.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/parallel_context.hpp"
#include "nvmeio/strategy.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// The route of a parallel context to a file (declared in strategy.hpp).
template <class Backend, class Config, if_file_settings<Config>>
transfer_result route(basic_parallel_context<Backend>& context, const file& f, operation op,
                      mutable_memory memory, std::uint64_t offset, const Config& config,
                      io_failure& failure) {
    failure = {};
    check_transfer(f, op, memory, offset, context.block_size());
    const std::size_t length = memory.size();
    const auto start = std::chrono::steady_clock::now();
    // Pieces start at multiples of `cut` in the file: the O_DIRECT unit, or on an uncached file
    // a page (a page two pieces shared would stay cached).
    const std::size_t cut = f.is_uncached() ? uncached_page : f.required_alignment();
    std::size_t count = 0;
    std::size_t piece = 1;
    if (length != 0) {
        const std::size_t min_piece = context.options().min_piece_size;
        const std::size_t smallest =
            std::max<std::size_t>(min_piece != 0 ? min_piece : context.block_size(), cut);
        // Divisions only: `smallest` comes from the caller and may be near SIZE_MAX.
        count = std::min<std::size_t>(context.threads(),
                                      length / smallest + (length % smallest != 0 ? 1 : 0));
        piece = static_cast<std::size_t>(align_up((length + count - 1) / count, cut));
        count = length / piece + (length % piece != 0 ? 1 : 0);  // rounding may idle a thread
    }
    // Where piece i begins in the range: a multiple of the piece (so that, O_DIRECT, each
    // piece's memory stays aligned), or on an uncached file the page boundary after it (the
    // first piece absorbs an offset off the page).
    const auto begin = [&](std::size_t i) -> std::size_t {
        const std::uint64_t at = i == 0 || !f.is_uncached()
                                     ? std::uint64_t{i} * piece
                                     : align_up(offset + std::uint64_t{i} * piece, cut) - offset;
        return static_cast<std::size_t>(std::min<std::uint64_t>(at, length));
    };
    while (count > 1 && begin(count - 1) >= length)
        --count;
    std::vector<share> shares;
    spread(context, count, shares, [&](std::size_t i, auto& worker, share& mine) {
        share::piece& p = mine.pieces.emplace_back();
        p.at = begin(i);
        p.length = (i + 1 < count ? begin(i + 1) : length) - p.at;
        transfer_perf& perf = mine.perf.emplace_back();
        const transfer_result r = run_transfer(worker, f, op, memory.slice(p.at, p.length),
                                               offset + p.at, config, p.failure);
        p.bytes = r.bytes;
        perf = r.perf;
    });
    transfer_result result;
    result.bytes = settle(op, length, shares, failure);
    if (config.measure && length != 0) result.perf = merged_perf(shares, result.bytes, start);
    return result;
}

}  // namespace detail
NVMEIO_END_NAMESPACE

#pragma once
/// \file stripe.hpp
/// Striping: one logical byte range spread over D files, one per device, in stripe units, moved
/// by `transfer`, `read` and `write` (strategy.hpp) on a parallel context, with batch_options as
/// their settings. Each file's share is one batch run by its own worker (the layout and how the
/// units are coalesced: docs/PARALLEL.md, "Striping").
///
/// A failure is the one at the lowest logical offset (its io_error names the file and the file
/// offset); a read returns the bytes up to the first logical byte that does not exist.
///
/// O_DIRECT rules: the stripe unit must be a multiple of every file's alignment (checked when
/// the set is made) and the logical offset a multiple of the strictest one (else
/// std::invalid_argument); the buffer and the length may be anything (an aligned_buffer bounds
/// the length).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/batch_engine.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/parallel_context.hpp"
#include "nvmeio/strategy.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Where a logical byte of a stripe set lives.
struct stripe_location {
    std::size_t file_index = 0;  ///< Which file of the set.
    std::uint64_t offset = 0;    ///< Offset in that file.
};

/// D open files and the stripe unit that spreads a logical range over them. Move-only; a
/// moved-from set holds no files, and a transfer on it is an std::invalid_argument.
class stripe_set {
  public:
    /// Takes the files (at least one). Throws std::invalid_argument for no files, a closed file,
    /// two members that are one file (`file::identity()`: their stripes would share file
    /// offsets), or a stripe unit of 0 or not a multiple of some file's O_DIRECT alignment.
    stripe_set(std::vector<file> files, std::size_t stripe_unit)
        : files_(std::move(files)), stripe_unit_(stripe_unit) {
        if (files_.empty()) detail::throw_invalid("a stripe set needs at least one file (got 0)");
        if (stripe_unit_ == 0) detail::throw_invalid("stripe_unit must be at least 1 (got 0)");
        std::vector<file_identity> identities;
        for (const file& f : files_) {
            if (!f.is_open()) detail::throw_invalid("stripe set: a file is not open");
            if (!is_aligned(stripe_unit_, f.required_alignment())) {
                detail::throw_invalid("stripe_unit " + std::to_string(stripe_unit_) +
                                      " is not a multiple of " +
                                      std::to_string(f.required_alignment()) +
                                      " bytes, the O_DIRECT alignment of '" + f.path() + "'");
            }
            identities.push_back(f.identity());
        }
        for (std::size_t j = 1; j < files_.size(); ++j) {
            const auto i = static_cast<std::size_t>(
                std::find(identities.begin(), identities.end(), identities[j]) -
                identities.begin());
            if (i == j) continue;
            detail::throw_invalid("stripe set: members " + std::to_string(i) + " ('" +
                                  files_[i].path() + "') and " + std::to_string(j) + " ('" +
                                  files_[j].path() +
                                  "') are one file, whose stripes would share its offsets");
        }
    }

    /// Opens every path with `mode` and `direct`, then checks as above; throws io_error naming
    /// the path that failed to open.
    stripe_set(const std::vector<std::string>& paths, open_mode mode, std::size_t stripe_unit,
               direct_io direct = direct_io::on)
        : stripe_set(open_all(paths, mode, direct), stripe_unit) {}

    /// Bytes per stripe unit.
    [[nodiscard]] std::size_t stripe_unit() const noexcept { return stripe_unit_; }
    /// Number of files D.
    [[nodiscard]] std::size_t width() const noexcept { return files_.size(); }
    /// The files, in stripe order.
    [[nodiscard]] std::vector<file>& files() noexcept { return files_; }
    /// The files, in stripe order.
    [[nodiscard]] const std::vector<file>& files() const noexcept { return files_; }
    /// The alignment a logical offset needs: the strictest of the files'.
    [[nodiscard]] std::size_t required_alignment() const noexcept {
        std::size_t unit = 1;
        for (const file& f : files_)
            unit = std::max(unit, f.required_alignment());
        return unit;
    }

    /// Where logical byte `logical` lives (file 0, offset `logical` in a set with no files).
    [[nodiscard]] stripe_location locate(std::uint64_t logical) const noexcept {
        if (files_.empty()) return {0, logical};
        const std::uint64_t stripe = logical / stripe_unit_;
        return {static_cast<std::size_t>(stripe % files_.size()),
                stripe / files_.size() * stripe_unit_ + logical % stripe_unit_};
    }

  private:
    static std::vector<file> open_all(const std::vector<std::string>& paths, open_mode mode,
                                      direct_io direct) {
        std::vector<file> out;
        out.reserve(paths.size());
        for (const std::string& p : paths)
            out.emplace_back(p, mode, direct);
        return out;
    }

    std::vector<file> files_;
    std::size_t stripe_unit_;
};

namespace detail {

// The route of a parallel context to a stripe set (declared in strategy.hpp).
template <class Backend>
transfer_result route(basic_parallel_context<Backend>& context, const stripe_set& set, operation op,
                      mutable_memory memory, std::uint64_t offset, const batch_options& options,
                      io_failure& failure) {
    const std::size_t length = memory.size();
    const auto start = std::chrono::steady_clock::now();
    failure = {};
    transfer_result result;
    if (set.width() == 0) {
        throw_invalid("striped " + std::string(to_string(op)) +
                      ": the stripe set holds no files (it was moved from)");
    }
    if (length == 0) return result;
    if (memory.data() == nullptr) throw_invalid("striped transfer: the buffer is null");
    // Before the range is cut into stripe units: a view near SIZE_MAX would be cut without end.
    if (passes_largest_offset(offset, length)) {
        throw_invalid("striped " + std::string(to_string(op)) + " of " + std::to_string(length) +
                      " bytes at offset " + std::to_string(offset) +
                      ": the range passes the largest file offset");
    }
    if (!is_aligned(offset, set.required_alignment())) {
        throw_invalid("striped " + std::string(to_string(op)) + " at offset " +
                      std::to_string(offset) + ": the offset is not a multiple of " +
                      std::to_string(set.required_alignment()) +
                      " bytes, which O_DIRECT on the set's files requires");
    }
    // Cut the range at stripe unit boundaries; piece i of file d keeps its logical position.
    const std::size_t width = set.width();
    std::vector<std::vector<batch_request>> requests(width);
    std::vector<std::vector<std::size_t>> positions(width);
    for (std::size_t at = 0; at < length;) {
        const std::uint64_t logical = offset + at;
        const std::size_t room =
            set.stripe_unit() - static_cast<std::size_t>(logical % set.stripe_unit());
        const std::size_t piece = std::min(room, length - at);
        const stripe_location where = set.locate(logical);
        requests[where.file_index].push_back({memory.slice(at, piece), where.offset});
        positions[where.file_index].push_back(at);
        at += piece;
    }
    // Every share is checked before any moves, so that a bad one moves nothing.
    for (std::size_t d = 0; d < width; ++d)
        check_batch(set.files()[d], op, requests[d], options);
    std::vector<share> shares;
    spread(context, width, shares, [&](std::size_t d, auto& worker, share& mine) {
        batch_outcome done = run_batch(worker, set.files()[d], op, requests[d], options);
        for (std::size_t i = 0; i < requests[d].size(); ++i) {
            batch_result& r = done.results[i];
            mine.pieces.push_back(
                {positions[d][i], requests[d][i].memory.size(), r.bytes, std::move(r.failure)});
        }
        mine.perf.push_back(done.perf);
    });
    result.bytes = settle(op, length, shares, failure);
    if (options.config.measure) result.perf = merged_perf(shares, result.bytes, start);
    return result;
}

}  // namespace detail
NVMEIO_END_NAMESPACE

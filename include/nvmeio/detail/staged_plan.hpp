#pragma once
/// \file detail/staged_plan.hpp
/// The plan of a staged transfer (staged.hpp): the one check of its ranges, and the windows (one
/// slot's bytes of one file, moved as one transfer) with the pieces of ranges each holds. Pure:
/// no I/O, tested on its own; what it knows of the files comes from a callback.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// What a plan knows of the handle at one index of the caller's list of files.
struct staged_file {
    file_identity identity;  // the file it reaches (equal for one file under two indices)
    std::string path;        // for messages
    std::size_t unit = 1;    // its O_DIRECT unit, 1 where none applies
    bool direct = false;     // it moves bytes with O_DIRECT
    int rw_flags = 0;        // the RWF_* flags of each of its I/Os
    bool writable = true;    // not opened with open_mode::read
    std::uint64_t size = 0;  // the file's size (a read's; a write's plan does not ask)
};

// A staged transfer's windows and the pieces of ranges each holds.
struct staged_plan {
    struct piece {
        std::size_t range;  // index in the caller's plan
        std::size_t at;     // byte of the window (and so of the slot)
        std::size_t from;   // byte of the range
        std::size_t length;
    };
    struct window {
        std::size_t file;      // the lowest index a range names the file by
        std::uint64_t offset;  // aligned to the file's O_DIRECT unit
        std::size_t length;    // the last window of a run may end unaligned
        std::size_t first_piece, end_piece;
        bool covered;  // its pieces cover every byte (a write then reads nothing first)
    };
    std::vector<window> windows;
    std::vector<piece> pieces;
    std::vector<std::size_t> pieces_of_range;  // left to complete, per range
    std::vector<std::size_t> empty_ranges;     // complete at once
};

inline std::string describe_range(std::size_t index, const staged_range& r) {
    return "range " + std::to_string(index) + " (" + std::to_string(r.length) +
           " bytes at offset " + std::to_string(r.offset) + " of file " + std::to_string(r.file) +
           ")";
}

// How a handle moves bytes, for a message.
inline std::string describe_handle(std::size_t index, const staged_file& f) {
    const std::string how = f.direct          ? "O_DIRECT (unit " + std::to_string(f.unit) + ")"
                            : f.rw_flags != 0 ? "uncached"
                                              : "buffered";
    return "file " + std::to_string(index) + " " + how;
}

// Per file index a non-empty range uses, the lowest such index naming the same file (the one
// the file's runs move through); none for the others. Handles of one file must move bytes
// alike, or a range would go through another's handle (buffered where O_DIRECT was asked):
// std::invalid_argument naming both indices.
inline std::vector<std::size_t> first_index_of_file(operation op,
                                                    const std::vector<staged_file>& files,
                                                    const std::vector<bool>& used) {
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::vector<std::size_t> by_identity;
    for (std::size_t i = 0; i < files.size(); ++i) {
        if (used[i]) by_identity.push_back(i);
    }
    const auto key = [&](std::size_t i) {
        const file_identity& id = files[i].identity;
        return std::make_tuple(static_cast<int>(id.kind), id.device, id.inode);
    };
    std::stable_sort(by_identity.begin(), by_identity.end(),
                     [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
    std::vector<std::size_t> first(files.size(), none);
    for (std::size_t k = 0; k < by_identity.size(); ++k) {
        const std::size_t i = by_identity[k];
        const bool same = k > 0 && files[by_identity[k - 1]].identity == files[i].identity;
        first[i] = same ? first[by_identity[k - 1]] : i;
        const staged_file& a = files[first[i]];
        const staged_file& b = files[i];
        if (a.direct != b.direct || a.rw_flags != b.rw_flags || a.unit != b.unit) {
            throw_invalid("staged " + std::string(to_string(op)) + ": files " +
                          std::to_string(first[i]) + " and " + std::to_string(i) +
                          " are one file ('" + b.path + "') opened differently (" +
                          describe_handle(first[i], a) + ", " + describe_handle(i, b) +
                          "): list one handle for it");
        }
    }
    return first;
}

// The one check of a staged transfer (std::invalid_argument naming the range, or the two
// indices of one file opened differently), and its plan. `describe(i)` is what the plan knows
// of file i, asked once for each index a non-empty range uses.
template <class Describe>
staged_plan plan_staged(operation op, std::size_t file_count,
                        const std::vector<staged_range>& ranges, std::size_t slot_size,
                        Describe&& describe) {
    std::vector<staged_file> files(file_count);
    std::vector<bool> used(file_count, false);
    staged_plan plan;
    plan.pieces_of_range.assign(ranges.size(), 0);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        const staged_range& r = ranges[i];
        if (r.file >= file_count) {
            throw_invalid("staged " + std::string(to_string(op)) + ": " + describe_range(i, r) +
                          " names a file past the " + std::to_string(file_count) + " given");
        }
        if (r.length == 0) {
            plan.empty_ranges.push_back(i);
            continue;
        }
        if (r.address == 0) {
            throw_invalid("staged " + std::string(to_string(op)) + ": " + describe_range(i, r) +
                          " has a null address");
        }
        // A file offset is an off_t: no range may end past its largest value.
        constexpr std::uint64_t largest = std::numeric_limits<std::int64_t>::max();
        if (r.offset > largest || r.length > largest - r.offset) {
            throw_invalid("staged " + std::string(to_string(op)) + ": " + describe_range(i, r) +
                          " ends past the largest file offset");
        }
        if (!used[r.file]) {
            files[r.file] = describe(r.file);
            used[r.file] = true;
        }
        const staged_file& f = files[r.file];
        if (op == operation::write && !f.writable) {
            throw_invalid("staged write: " + describe_range(i, r) + " goes to '" + f.path +
                          "', which file " + std::to_string(r.file) +
                          " opened with open_mode::read");
        }
        if (op == operation::read && r.offset + r.length > f.size) {
            throw_invalid("staged read: " + describe_range(i, r) + " ends past the file's " +
                          std::to_string(f.size) + " bytes");
        }
        if (slot_size % f.unit != 0) {
            throw_invalid("staged " + std::string(to_string(op)) + ": " + describe_range(i, r) +
                          ": slot size " + std::to_string(slot_size) +
                          " is not a multiple of file " + std::to_string(r.file) +
                          "'s O_DIRECT unit " + std::to_string(f.unit));
        }
        order.push_back(i);
    }
    const std::vector<std::size_t> file_of = first_index_of_file(op, files, used);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const std::size_t x = file_of[ranges[a].file];
        const std::size_t y = file_of[ranges[b].file];
        if (x != y) return x < y;
        return ranges[a].offset != ranges[b].offset ? ranges[a].offset < ranges[b].offset : a < b;
    });
    // Runs: ranges of one file whose aligned units touch or overlap, so no unit is moved twice.
    for (std::size_t first = 0; first < order.size();) {
        const staged_range& head = ranges[order[first]];
        const std::size_t file = file_of[head.file];
        const std::uint64_t u = files[file].unit;
        const std::uint64_t begin = align_down(head.offset, u);
        std::uint64_t end = head.offset + head.length;
        std::size_t last = first + 1;
        for (; last < order.size(); ++last) {
            const staged_range& next = ranges[order[last]];
            if (file_of[next.file] != file || align_down(next.offset, u) > align_up(end, u)) break;
            if (op == operation::write && next.offset < end) {  // the ranges before are apart
                const std::size_t before = order[last - 1];
                throw_invalid("staged write: " + describe_range(order[last], next) + " overlaps " +
                              describe_range(before, ranges[before]) + ", in the same file");
            }
            end = std::max<std::uint64_t>(end, next.offset + next.length);
        }
        const std::size_t first_window = plan.windows.size();
        const std::uint64_t count = (end - begin) / slot_size + ((end - begin) % slot_size != 0);
        for (std::uint64_t k = 0; k < count; ++k) {
            const std::uint64_t at = begin + k * slot_size;
            plan.windows.push_back(
                {file, at, static_cast<std::size_t>(std::min<std::uint64_t>(slot_size, end - at)),
                 0, 0, false});
        }
        // Each range's pieces, window by window; a window's pieces are in file order.
        std::vector<std::vector<staged_plan::piece>> by_window(plan.windows.size() - first_window);
        for (std::size_t k = first; k < last; ++k) {
            const std::size_t i = order[k];
            const staged_range& r = ranges[i];
            for (std::uint64_t at = r.offset; at < r.offset + r.length;) {
                const std::size_t w = static_cast<std::size_t>((at - begin) / slot_size);
                const std::uint64_t window_end =
                    plan.windows[first_window + w].offset + plan.windows[first_window + w].length;
                const std::uint64_t stop = std::min<std::uint64_t>(window_end, r.offset + r.length);
                by_window[w].push_back(
                    {i, static_cast<std::size_t>(at - plan.windows[first_window + w].offset),
                     static_cast<std::size_t>(at - r.offset), static_cast<std::size_t>(stop - at)});
                ++plan.pieces_of_range[i];
                at = stop;
            }
        }
        for (std::size_t w = 0; w < by_window.size(); ++w) {
            staged_plan::window& window = plan.windows[first_window + w];
            window.first_piece = plan.pieces.size();
            std::size_t covered_to = 0;
            for (const staged_plan::piece& p : by_window[w]) {
                if (p.at <= covered_to) covered_to = std::max(covered_to, p.at + p.length);
                plan.pieces.push_back(p);
            }
            window.end_piece = plan.pieces.size();
            window.covered = covered_to == window.length;
        }
        first = last;
    }
    return plan;
}

}  // namespace detail

NVMEIO_END_NAMESPACE

#pragma once
/// \file backend/io_uring_requests.hpp
/// How long io_uring's requests may be, for one file (io_uring_backend::request_limits and
/// request_length answer the engine with these).
///
/// io_uring tries each request without blocking first. On a block device under O_DIRECT, a
/// request the block layer would have to split fails that try and is issued again from a kernel
/// worker thread, its pages pinned twice (see queue_limits). So requests are cut to the largest
/// size the device takes whole, and a cut block keeps its bytes in flight: queue depth x pieces
/// requests, within the completion ring and, past the queue depth, the device's queue. Memory
/// whose failed try is cheap stays whole (request_plan::registered_whole_from, huge pages):
/// docs/perf/ram_device.md and docs/perf/whole_registered.md have the measurements.

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "nvmeio/alignment.hpp"

namespace nvmeio::detail {

/// Pieces a block of registered memory must make, at least, to go out whole at depth 1.
inline constexpr std::size_t whole_registered_pieces = 4;

/// Request size and requests in flight at most; when blocks are cut, the length from which a
/// block of registered memory stays whole.
struct request_plan {
    std::size_t request_size = 0;
    unsigned slots = 0;
    std::size_t registered_whole_from = 0;
};

/// The plan for a context of `queue_depth` x `block_size` on a file with `limits`, O_DIRECT
/// alignment `unit` (when `direct`), through a backend that keeps to the limits and holds
/// `completion_capacity` (>= queue_depth) completions: what a block is cut to unless it stays
/// whole, and how many requests are in flight at most. At depth 1 a block of registered memory
/// stays whole from whole_registered_pieces pieces (nothing overlaps the worker's hand-off
/// there), deeper from two.
[[nodiscard]] inline request_plan plan_requests(const queue_limits& limits, bool direct,
                                                std::size_t unit, std::size_t block_size,
                                                unsigned queue_depth,
                                                std::size_t completion_capacity) {
    const std::size_t whole = limits.unsplit_request_bytes;
    if (!direct || whole < unit || whole % unit != 0 || whole >= block_size)
        return {block_size, queue_depth};
    // Divisions only: a block size may be near SIZE_MAX.
    const std::size_t pieces = block_size / whole + (block_size % whole != 0 ? 1 : 0);
    std::size_t slots = pieces > completion_capacity / queue_depth
                            ? completion_capacity
                            : std::size_t{queue_depth} * pieces;
    if (limits.requests > 0)
        slots = std::min(slots, std::max<std::size_t>(queue_depth, limits.requests));
    const std::size_t registered_from =
        queue_depth > 1 ? whole + 1 : whole_registered_pieces * whole;
    return {whole, static_cast<unsigned>(std::max<std::size_t>(queue_depth, slots)),
            registered_from};
}

/// Asks the kernel which memory huge pages (transparent or hugetlbfs) back, through
/// PAGEMAP_SCAN (Linux 6.7) on /proc/self/pagemap, opened at the first question and kept until
/// destruction (opening it per question costs more than the question: docs/perf/ram_device.md).
class pagemap {
  public:
    pagemap() = default;
    pagemap(const pagemap&) = delete;
    pagemap& operator=(const pagemap&) = delete;
    ~pagemap() {
        if (fd_ >= 0) ::close(fd_);
    }

    /// Whether huge pages map every page of [data, data + length); false when a page is not,
    /// is not mapped yet, or the kernel cannot say.
    [[nodiscard]] bool huge_pages_back(const void* data, std::size_t length) noexcept {
        struct page_region {  // <linux/fs.h> of Linux 6.7
            std::uint64_t start, end, categories;
        };
        struct pm_scan_arg {
            std::uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages,
                category_inverted, category_mask, category_anyof_mask, return_mask;
        };
        constexpr unsigned long pagemap_scan = 0xC0606610UL;  // _IOWR('f', 16, pm_scan_arg)
        constexpr std::uint64_t page_is_huge = 1u << 6;
        static_assert(sizeof(pm_scan_arg) == 96, "the kernel's pm_scan_arg");
        if (length == 0) return false;
        if (fd_ < 0) fd_ = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) return false;
        page_region found{};
        pm_scan_arg scan{};
        scan.size = sizeof scan;
        scan.start = reinterpret_cast<std::uintptr_t>(data);
        scan.end = scan.start + length;
        scan.vec = reinterpret_cast<std::uintptr_t>(&found);
        scan.vec_len = 1;
        scan.max_pages = 1;
        scan.category_inverted = page_is_huge;  // find the first page that is not huge
        scan.category_mask = page_is_huge;
        scan.return_mask = page_is_huge;
        return ::ioctl(fd_, pagemap_scan, &scan) == 0;
    }

  private:
    int fd_ = -1;
};

/// pagemap's question, asked once.
[[nodiscard]] inline bool huge_pages_back(const void* data, std::size_t length) noexcept {
    pagemap once;
    return once.huge_pages_back(data, length);
}

}  // namespace nvmeio::detail

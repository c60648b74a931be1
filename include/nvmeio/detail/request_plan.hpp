#pragma once
/// \file detail/request_plan.hpp
/// How large the engine's requests are and how many it keeps in flight, for one file.
///
/// A backend like io_uring tries each request without blocking first. On a block device under
/// O_DIRECT, a request the block layer would have to split fails that try and is issued again
/// from a kernel worker thread, its pages pinned twice (see queue_limits). For such a backend
/// requests are cut to the largest size the device takes whole, and a block cut into pieces
/// keeps its bytes in flight: queue depth x pieces requests, no more than the backend holds
/// completions for and, past the queue depth, than the device queues (more would only wait).

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "nvmeio/alignment.hpp"

namespace nvmeio::detail {

/// Whether `Backend` tells which memory goes out with a registered buffer: `registers(memory,
/// length)`, true for a request on [memory, memory + length) that would.
template <class Backend, class = void>
struct tells_registered : std::false_type {};
template <class Backend>
struct tells_registered<Backend, std::void_t<decltype(std::declval<const Backend&>().registers(
                                     static_cast<const void*>(nullptr), std::size_t{}))>>
    : std::true_type {};

/// Whether a request on [memory, memory + length) goes out with a registered buffer of `backend`
/// (false for a backend that cannot tell).
template <class Backend>
[[nodiscard]] bool goes_out_registered(const Backend& backend, const void* memory,
                                       std::size_t length) noexcept {
    if constexpr (tells_registered<Backend>::value) {
        return backend.registers(memory, length);
    } else {
        (void)backend, (void)memory, (void)length;
        return false;
    }
}

/// Whether `Backend` declares `keeps_to_queue_limits` true.
template <class Backend, class = void>
struct keeps_to_queue_limits : std::false_type {};
template <class Backend>
struct keeps_to_queue_limits<Backend, std::void_t<decltype(Backend::keeps_to_queue_limits)>>
    : std::bool_constant<Backend::keeps_to_queue_limits> {};

/// Pieces a block of registered memory must make, at least, to go out whole at depth 1 (see
/// stays_whole).
inline constexpr std::size_t whole_registered_pieces = 4;

/// Request size and requests in flight at most; when blocks are cut, the length from which a
/// block of registered memory stays whole (see stays_whole).
struct request_plan {
    std::size_t request_size = 0;
    unsigned slots = 0;
    std::size_t registered_whole_from = 0;
};

/// The plan for a context of `queue_depth` x `block_size` on a file with `limits`, O_DIRECT
/// alignment `unit` (when `direct`), through a backend that keeps to the limits and holds
/// `completion_capacity` (>= queue_depth) completions: what a block is cut to unless it stays
/// whole (see stays_whole), and how many requests are in flight at most. At depth 1 a block of
/// registered memory stays whole from whole_registered_pieces pieces, deeper from two.
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
/// destruction (a context keeps one: one ioctl per transfer a cut would apply to, 0.6 us for a
/// 1 MiB range here, where opening each time cost 3.6 us, 4 % of a 1 MiB transfer).
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

/// Whether a block of [memory, memory + length) that the plan cuts goes out whole: its memory
/// makes a failed try cheap, so pieces would cost more. The engine asks at the start of every
/// block, so memory pinned once during a transfer stays whole from its next block on:
/// - it is a buffer registered with the ring (by hand, or pinned once) and the block is at least
///   `registered_from` long (request_plan): nothing is pinned per request, and the one hand-off
///   to the kernel's worker that splits it costs less than the pieces, except at depth 1 where
///   nothing overlaps it. On the RAM-backed device (512 KiB whole), whole blocks at depth 2-4
///   ran at 1.06-1.30x the rate of the cut at 0.71-0.95x the CPU per GiB for 1 MiB, within the
///   noise at depth 16-128, and at 0.24-0.81x the CPU for 4-8 MiB; but 1 MiB at depth 1 ran at
///   0.57-0.64x the rate and 1.36-1.64x the CPU (docs/perf/whole_registered.md);
/// - `huge`: huge pages back its segment (see pagemap; asked once per segment, as an ask costs
///   1.1 us, 1 ms per GiB of 1 MiB blocks), so its pages are pinned a huge page at a time. On the
///   RAM-backed device 8 MiB blocks of huge pages ran at 0.94x the rate and 1.8-2x the CPU when
///   cut, and 1 MiB ones need no split there (physically contiguous pages make few segments).
template <class Backend>
[[nodiscard]] bool stays_whole(const Backend& backend, const void* memory, std::size_t length,
                               std::size_t registered_from, bool huge) noexcept {
    return huge || (length >= registered_from && goes_out_registered(backend, memory, length));
}

}  // namespace nvmeio::detail

#pragma once
/// \file backend/io_uring_pagemap.hpp
/// Which memory huge pages back, for io_uring_backend::segment_stays_whole: it is pinned a
/// huge page at a time, so a block of it stays whole on a block device even where the plan
/// cuts (docs/perf/causes.md has the measurements).

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

/// Asks the kernel which memory huge pages (transparent or hugetlbfs) back, through
/// PAGEMAP_SCAN (Linux 6.7) on /proc/self/pagemap, opened at the first question and kept until
/// destruction (opening it per question costs more than the question: docs/perf/causes.md).
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

}  // namespace detail
NVMEIO_END_NAMESPACE

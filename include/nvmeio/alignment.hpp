#pragma once
/// \file alignment.hpp
/// Alignment arithmetic and the direct-I/O alignment a file requires.

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mount.h>  // BLKGETSIZE64, BLKSSZGET (linux/fs.h clashes with it)
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <fstream>
#include <string>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// True when `align_up(value, alignment)` fits in 64 bits (`alignment` non-zero).
[[nodiscard]] constexpr bool align_up_fits(std::uint64_t value, std::uint64_t alignment) noexcept {
    return value % alignment == 0 || value / alignment < UINT64_MAX / alignment;
}

/// Rounds `value` up to a multiple of `alignment` (any non-zero alignment, not only powers of 2).
/// Exact whenever the result fits in 64 bits; check `align_up_fits` first for sizes a user gave.
[[nodiscard]] constexpr std::uint64_t align_up(std::uint64_t value,
                                               std::uint64_t alignment) noexcept {
    const std::uint64_t rest = value % alignment;
    return rest == 0 ? value : value + (alignment - rest);
}

/// Rounds `value` down to a multiple of `alignment`.
[[nodiscard]] constexpr std::uint64_t align_down(std::uint64_t value,
                                                 std::uint64_t alignment) noexcept {
    return value / alignment * alignment;
}

/// True when `value` is a multiple of `alignment`.
[[nodiscard]] constexpr bool is_aligned(std::uint64_t value, std::uint64_t alignment) noexcept {
    return value % alignment == 0;
}

/// True when the address `pointer` is a multiple of `alignment`.
[[nodiscard]] inline bool is_aligned(const void* pointer, std::uint64_t alignment) noexcept {
    return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

/// The size of a virtual memory page.
[[nodiscard]] inline std::size_t page_size() noexcept {
    static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return size;
}

/// What O_DIRECT requires of a transfer on one file.
struct dio_alignment {
    /// Buffer addresses (and lengths within memory) must be multiples of this.
    std::size_t memory = 4096;
    /// File offsets and lengths must be multiples of this.
    std::size_t offset = 4096;
    /// Where the numbers came from: "statx", "BLKSSZGET" (a block device),
    /// "logical_block_size" (the device under a file) or "default".
    const char* source = "default";

    /// The larger of the two: a block size that is a multiple of this satisfies both.
    [[nodiscard]] std::size_t strictest() const noexcept {
        return memory > offset ? memory : offset;
    }
};

/// What a block device takes at once, from its sysfs queue/ folder (a partition's from its
/// disk's). io_uring_backend keeps its requests within it (why: backend/io_uring.hpp).
struct queue_limits {
    /// The largest request, a power of two bytes, taken as one bio the block layer need not
    /// split: at most queue/max_sectors_kb, and at most as many pages as queue/max_segments and
    /// one bio (256) hold (docs/perf/causes.md, cause 5). 0: unknown, or not a block device.
    std::size_t unsplit_request_bytes = 0;
    /// Requests the device queues at once (queue/nr_requests): more pieces of cut requests in
    /// flight would only wait. 0: unknown, or not a block device.
    std::size_t requests = 0;
};

namespace detail {

// The number in a /proc or /sys file, or `otherwise` when it cannot be read.
template <class Number>
Number read_number(const std::string& path, Number otherwise) {
    std::ifstream in(path);
    Number value{};
    return in >> value ? value : otherwise;
}

/// A number from the sysfs queue/ folder of block device `device` (for a partition, its disk's);
/// 0 if unknown.
inline std::size_t queue_limit(dev_t device, const char* name) {
    const std::string base =
        "/sys/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device));
    // A partition has no queue/ of its own; its parent disk's is one level up.
    for (const char* folder : {"/queue/", "/../queue/"}) {
        if (std::size_t value = read_number(base + folder + name, std::size_t{0})) return value;
    }
    return 0;
}

/// How much block device `device` takes at once: the largest request the block layer need not
/// split, and how many it queues (see queue_limits). Zeros where sysfs does not say.
inline queue_limits read_queue_limits(dev_t device) {
    constexpr std::size_t bio_max_vecs = 256;
    queue_limits limits;
    limits.requests = queue_limit(device, "nr_requests");
    const std::size_t sectors_kb = queue_limit(device, "max_sectors_kb");
    const std::size_t segments = queue_limit(device, "max_segments");
    if (sectors_kb == 0 || segments == 0) return limits;
    const std::size_t most =
        std::min({sectors_kb * 1024, bio_max_vecs * page_size(), segments * page_size()});
    std::size_t bytes = 1;
    while (bytes <= most / 2)
        bytes *= 2;
    limits.unsplit_request_bytes = bytes;
    return limits;
}

/// A block device's own alignment: its logical block size (`BLKSSZGET`) for offsets and memory;
/// `source` stays "default" when the ioctl fails.
[[nodiscard]] inline dio_alignment block_device_alignment(int fd) noexcept {
    dio_alignment result;
    int size = 0;
    if (::ioctl(fd, BLKSSZGET, &size) == 0 && size > 0) {
        result.memory = static_cast<std::size_t>(size);
        result.offset = static_cast<std::size_t>(size);
        result.source = "BLKSSZGET";
    }
    return result;
}

}  // namespace detail

/// The direct-I/O alignment of an open file: `statx(STATX_DIOALIGN)` where the kernel provides
/// it (Linux >= 6.1 for files, 6.11 for block devices), else for a block device its logical
/// block size (`BLKSSZGET`), for a file the logical block size of the device under it, else 4096.
[[nodiscard]] inline dio_alignment query_dio_alignment(int fd) noexcept {
    dio_alignment result;
#ifdef STATX_DIOALIGN
    struct statx sx {};
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_mem_align != 0 &&
        sx.stx_dio_offset_align != 0) {
        result.memory = sx.stx_dio_mem_align;
        result.offset = sx.stx_dio_offset_align;
        result.source = "statx";
        return result;
    }
#endif
    struct stat st {};
    if (::fstat(fd, &st) != 0) return result;
    if (S_ISBLK(st.st_mode)) return detail::block_device_alignment(fd);
    try {
        if (std::size_t size = detail::queue_limit(st.st_dev, "logical_block_size")) {
            result.memory = size;
            result.offset = size;
            result.source = "logical_block_size";
        }
    } catch (...) {
        // Unreadable sysfs leaves the safe default.
    }
    return result;
}

NVMEIO_END_NAMESPACE

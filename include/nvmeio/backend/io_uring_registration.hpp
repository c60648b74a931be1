#pragma once
/// \file backend/io_uring_registration.hpp
/// What an io_uring ring's registrations are to callers (registered_buffer, registration_use),
/// and pin once's rule for when nvmeio's memory is worth pinning, with its one warning.

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "nvmeio/detail/memory_registry.hpp"

namespace nvmeio {
inline namespace v0 {

/// Where a buffer registered with an io_uring_backend lives; the backend owns the memory.
struct registered_buffer {
    std::byte* data = nullptr;  ///< First byte (aligned as the aligned_buffer was).
    std::size_t size = 0;       ///< The aligned_buffer's size().
};

/// How an io_uring_backend used its registrations so far.
struct registration_use {
    std::uint64_t fixed_buffer_requests = 0;  ///< READ_FIXED / WRITE_FIXED (pinned or by hand).
    std::uint64_t fixed_file_requests = 0;    ///< IOSQE_FIXED_FILE.
    std::uint64_t pinned = 0;    ///< Pieces of nvmeio's memory this ring pinned on its own.
    std::uint64_t unpinned = 0;  ///< Of those, let go because their memory was being freed.
    int pin_refused = 0;         ///< The errno with which the kernel refused to pin; 0 if never.
};

namespace detail {

// Whether [begin, begin + length) moves memory of the piece at `from` again: it lands in the
// span moved before (through any ring) and the bytes moved cover that span. Notes the move.
// A piece is pinned only then: a buffer used once (a model loaded into fresh memory) pins
// nothing and costs what it did unpinned, while one used again is pinned on its second pass,
// when its pages are present and pinning them is far cheaper than for fresh pages, which the
// pinning call faults in itself one by one (docs/perf/pin_once.md). Parallel workers share the
// record, so a worker pins memory that another one moved before.
inline bool moves_again(std::vector<piece_use>& uses, std::uintptr_t from, std::uintptr_t begin,
                        std::size_t length) {
    auto u = std::find_if(uses.begin(), uses.end(),
                          [from](const piece_use& x) { return x.begin == from; });
    if (u == uses.end()) u = uses.insert(uses.end(), {from, begin, begin, 0});
    const bool again = begin < u->high && begin + length > u->low && u->moved >= u->high - u->low;
    u->low = std::min(u->low, begin);
    u->high = std::max<std::uintptr_t>(u->high, begin + length);
    u->moved += length;
    return again;
}

// Says once per process that pinning was refused, and what happens instead.
inline void report_pin_refusal(int error) noexcept {
    static std::once_flag said;
    std::call_once(said, [error] {
        std::string why = std::system_category().message(error);
        if (error == ENOMEM) why += ": pinning would pass RLIMIT_MEMLOCK (ulimit -l)";
        if (error == EINVAL) why += ": this kernel has no sparse buffer tables (Linux 5.19+)";
        std::fprintf(stderr,
                     "nvmeio: io_uring did not pin buffers (%s); requests go on unpinned, "
                     "each pinning its pages as it runs\n",
                     why.c_str());
    });
}

}  // namespace detail

}  // namespace v0
}  // namespace nvmeio

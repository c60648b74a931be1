#pragma once
/// \file detail/populate.hpp
/// The populate step of a bounced read: the caller's destination pages are faulted in, writable,
/// on a worker thread while the requests are in flight, so that the copies out of the staging
/// slots find them mapped instead of taking one page fault per page (about 10 us each in a VM,
/// against a few hundred nanoseconds a page for the kernel's populate).
///
/// Only whole pages inside the ranges being read are populated, and of those only the ones not
/// resident yet (mincore), so that memory in use costs a walk of its page tables (a resident
/// page not mapped writable, such as the zero page after a read, a copy-on-write page after
/// fork or a private file page, is left to the copies, which fault on it as before):
/// madvise(MADV_POPULATE_WRITE, Linux 5.14) changes no byte and no mapping flag. Where the kernel
/// does not know the advice (EINVAL, and EINVAL for a fresh anonymous page too: a kernel before
/// 5.14) each page is touched instead by an atomic read-modify-write that stores the byte it
/// read, so a copy racing with it keeps its bytes. EINVAL for the caller's memory alone (a
/// mapping the kernel will not populate: device memory, read-only) and any other refusal end
/// the step: the copies then meet that memory as they would have.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/version.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value, for headers older than the kernel
#endif

NVMEIO_BEGIN_NAMESPACE
namespace detail {

/// ::madvise's shape, so that a test can stand in for the kernel's answer.
using advise_function = int (*)(void* address, std::size_t length, int advice);

/// The advice the populate step asks of the kernel. A test seam: tests store a function that
/// fails, and restore ::madvise; nothing else writes it.
inline std::atomic<advise_function> populate_advise{&::madvise};

/// Pages populated, by the kernel's advice or by touching them one at a time, and pages found
/// mapped already.
struct populate_count {
    std::size_t advised = 0;
    std::size_t touched = 0;
    std::size_t resident = 0;
};

/// The whole pages inside a read's destination ranges, in the order the ranges are added (the
/// order their bytes arrive in); a range that starts where the one before it ends continues it,
/// so that a slab of adjacent blocks loses only its first and last partial pages.
class page_runs {
  public:
    struct run {
        std::byte* first;  // page-aligned
        std::size_t pages;
    };

    explicit page_runs(std::size_t page = page_size()) noexcept : page_(page) {}

    void add(std::byte* memory, std::size_t length) {
        if (length == 0) return;
        if (open_end_ != nullptr && memory == open_end_) {
            open_end_ += length;  // the same destination goes on: its page runs do too
        } else {
            close();
            open_begin_ = memory;
            open_end_ = memory + length;
        }
    }

    /// The runs, once every range has been added.
    [[nodiscard]] const std::vector<run>& runs() {
        close();
        return runs_;
    }

    [[nodiscard]] std::size_t page() const noexcept { return page_; }

  private:
    void close() {
        if (open_end_ == nullptr) return;
        const auto begin = align_up(reinterpret_cast<std::uintptr_t>(open_begin_), page_);
        const auto end = align_down(reinterpret_cast<std::uintptr_t>(open_end_), page_);
        if (end > begin)
            runs_.push_back({reinterpret_cast<std::byte*>(begin), (end - begin) / page_});
        open_begin_ = open_end_ = nullptr;
    }

    std::size_t page_;
    std::byte* open_begin_ = nullptr;  // the range being extended
    std::byte* open_end_ = nullptr;
    std::vector<run> runs_;
};

/// Faults one page in for writing without changing its first byte: a locked read-modify-write
/// that stores what it read. A plain load and store would undo a copy landing between them.
inline void touch_page(std::byte* page) noexcept {
#if defined(__x86_64__) || defined(__i386__)
    // Inline, so that no compiler turns an idempotent atomic into a load (LLVM does on x86).
    asm volatile("lock orb $0, %0" : "+m"(*page)::"memory");
#else
    auto* byte = reinterpret_cast<unsigned char*>(page);
    unsigned char seen = __atomic_load_n(byte, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(byte, &seen, seen, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
#endif
}

/// Whether `advise` knows MADV_POPULATE_WRITE at all, asked for a fresh anonymous page (the
/// kernel's answer kept for the process; a test's stand-in asked each time).
inline bool advice_known(advise_function advise) {
    const auto ask = [advise] {
        const std::size_t page = page_size();
        void* fresh =
            ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (fresh == MAP_FAILED) return true;  // cannot tell: touch nothing of the caller's
        const bool known = advise(fresh, page, MADV_POPULATE_WRITE) == 0;
        ::munmap(fresh, page);
        return known;
    };
    if (advise == &::madvise) {
        static const bool known = ask();
        return known;
    }
    return ask();
}

/// Populates `pages` pages from `first` (page-aligned) with `advise`; where the kernel does not
/// know the advice, touches them and switches `touching` on for the runs after. False when the
/// step should end (any other refusal).
inline bool populate_run(std::byte* first, std::size_t pages, std::size_t page,
                         advise_function advise, bool& touching, populate_count& count) {
    if (!touching) {
        int rc;
        do {
            rc = advise(first, pages * page, MADV_POPULATE_WRITE);
        } while (rc != 0 && errno == EINTR);
        if (rc == 0) {
            count.advised += pages;
            return true;
        }
        if (errno != EINVAL || advice_known(advise)) return false;
        touching = true;
    }
    for (std::size_t k = 0; k < pages; ++k)
        touch_page(first + k * page);
    count.touched += pages;
    return true;
}

/// Populates `runs` in order, `chunk` bytes (whole pages) at a time, until done or `stop` is set
/// (checked after each chunk: the first is always looked at). Pages already mapped (mincore: a KV
/// pool in use) are left alone, so that touched memory costs a walk of its page tables and no more.
/// Safe beside copies into the same pages.
inline populate_count populate_pages(const std::vector<page_runs::run>& runs, std::size_t page,
                                     std::size_t chunk, const std::atomic<bool>& stop,
                                     advise_function advise = populate_advise.load()) {
    populate_count count;
    bool touching = false;
    const std::size_t chunk_pages = chunk / page == 0 ? 1 : chunk / page;
    std::vector<unsigned char> resident(chunk_pages);
    bool first_chunk = true;
    for (const page_runs::run& r : runs) {
        for (std::size_t at = 0; at < r.pages; at += chunk_pages) {
            if (!std::exchange(first_chunk, false) && stop.load(std::memory_order_relaxed))
                return count;
            std::byte* const first = r.first + at * page;
            const std::size_t pages = r.pages - at < chunk_pages ? r.pages - at : chunk_pages;
            if (::mincore(first, pages * page, resident.data()) != 0)
                std::fill(resident.begin(), resident.end(), 0);  // the advice answers for them
            for (std::size_t k = 0; k < pages;) {                // each run of pages not mapped yet
                if (resident[k] & 1) {
                    ++count.resident;
                    ++k;
                    continue;
                }
                std::size_t end = k + 1;
                while (end < pages && !(resident[end] & 1))
                    ++end;
                if (!populate_run(first + k * page, end - k, page, advise, touching, count))
                    return count;
                k = end;
            }
        }
    }
    return count;
}

/// The populate step of one bounced read: a worker populating its destinations' page runs from
/// construction, stopped (between chunks) and joined when the read's copies are done. Fewer than
/// `min_pages` pages are left to the copies; so is everything where no thread can be started.
class background_populate {
  public:
    static constexpr std::size_t min_pages = 16;
    static constexpr std::size_t chunk = std::size_t{1} << 20;

    explicit background_populate(page_runs& destinations) {
        const std::vector<page_runs::run>& runs = destinations.runs();
        std::size_t pages = 0;
        for (const page_runs::run& r : runs)
            pages += r.pages;
        if (pages < min_pages) return;
        runs_ = runs;
        page_ = destinations.page();
        try {
            worker_ = std::thread([this] { count_ = populate_pages(runs_, page_, chunk, stop_); });
        } catch (const std::system_error&) {
            // No thread: the copies fault the pages in themselves.
        }
    }

    background_populate(const background_populate&) = delete;
    background_populate& operator=(const background_populate&) = delete;

    ~background_populate() { finish(); }

    /// Stops the worker between chunks and waits for it; what it populated (all zero when none
    /// ran).
    populate_count finish() noexcept {
        if (worker_.joinable()) {
            stop_.store(true, std::memory_order_relaxed);
            worker_.join();
        }
        return count_;
    }

  private:
    std::vector<page_runs::run> runs_;
    std::size_t page_ = 0;
    std::atomic<bool> stop_{false};
    populate_count count_;
    std::thread worker_;
};

}  // namespace detail
NVMEIO_END_NAMESPACE

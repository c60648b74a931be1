#pragma once
/// \file detail/memory_registry.hpp
/// A record of the memory nvmeio allocated (aligned_buffers), for pinning it once
/// (backend/io_uring_registered.hpp): before the memory is freed every ring that pinned it lets
/// go, so a registration never outlives its memory. Memory nvmeio did not allocate is never here
/// and never pinned behind the caller's back.
///
/// One registry per copy of nvmeio: a shared object built with hidden symbols has its own. A
/// buffer remembers the registry it joined and leaves that one, whichever copy frees it; a ring
/// pins only memory its own copy recorded. Buffers join only where something can pin them: in a
/// program or shared object that includes backend/io_uring.hpp (which turns recording on as it
/// is loaded); elsewhere (libaio, no backend) allocating and freeing take no lock here.
///
/// Locks: the registry's mutex is taken before a pinner's own; a pinner never calls the registry
/// while holding its own. fork: the mutex is held across fork (pthread_atfork), so the child
/// finds it free and consistent; a pinner created by the parent must do nothing in the child.

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

// What pins registered memory (an io_uring ring). `unpin(id)` is called, with the registry's
// mutex held, before the memory of registration `id` is freed; it must let go of it at once.
class memory_pinner {
  public:
    virtual void unpin(std::uint64_t id) noexcept = 0;

  protected:
    memory_pinner() = default;
    memory_pinner(const memory_pinner&) = default;
    memory_pinner& operator=(const memory_pinner&) = default;
    ~memory_pinner() = default;
};

// What transfers moved through one piece of a registered buffer, through any ring: the span of
// it moved so far and the bytes (a byte moved twice counts twice). Kept for the pinners.
struct piece_use {
    std::uintptr_t begin;  // the piece's first address
    std::uintptr_t low;    // the span moved
    std::uintptr_t high;
    std::uint64_t moved;
};

// Notes that [begin, begin + length) of the piece at `from` moves, and answers whether it moves
// again: it lands in the span moved before (through any ring, so a worker pins what another
// moved) and the bytes moved cover that span. A buffer used once pins nothing; one used again is
// pinned on its second pass, when its pages are present and cheap to pin (docs/perf/pin_once.md).
inline bool note_move(std::vector<piece_use>& uses, std::uintptr_t from, std::uintptr_t begin,
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

// A range of addresses: a registered buffer, or on a miss the gap around the address asked for.
struct memory_range {
    std::uint64_t id = 0;  // the buffer's registration; 0 for a gap
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
};

class memory_registry {
  public:
    // This copy of nvmeio's registry; never destroyed, so buffers freed during exit (and those
    // that remember it) still find it.
    static memory_registry& instance() {
        static memory_registry* const registry = new memory_registry;
        return *registry;
    }

    // Buffers allocated from now on join (see the file comment); never turned off again.
    void start_recording() noexcept { recording_.store(true, std::memory_order_release); }
    [[nodiscard]] bool recording() const noexcept {
        return recording_.load(std::memory_order_acquire);
    }

    // Records [data, data + size) as nvmeio's.
    void add(const void* data, std::size_t size) {
        const auto begin = reinterpret_cast<std::uintptr_t>(data);
        const std::lock_guard<std::mutex> lock(mutex_);
        const std::uint64_t id = ++last_id_;
        buffers_.insert_or_assign(begin, entry{id, begin + size, {}, {}});
        generation_.fetch_add(1, std::memory_order_release);
    }

    // Before the memory at `data` is freed: every pinner holding it lets go, then it is
    // forgotten. Nothing happens for memory the registry does not hold.
    void remove(const void* data) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        const auto found = buffers_.find(reinterpret_cast<std::uintptr_t>(data));
        if (found == buffers_.end()) return;
        for (memory_pinner* pinner : found->second.pinners)
            pinner->unpin(found->second.id);
        buffers_.erase(found);
    }

    // Looks up [address, address + length): when a registered buffer holds it, calls
    // `pin(range, uses)` with the buffer's piece_use records (with the registry's mutex held, so
    // the buffer cannot be freed meanwhile) and, when that returns true, records `pinner` as
    // holding the buffer. Returns the buffer's range, or the gap of addresses around `address`
    // that holds no registered buffer (id 0; empty when the range straddles a buffer's edge).
    template <class Pin>
    memory_range pin(memory_pinner& pinner, const void* address, std::size_t length, Pin&& pin) {
        const auto begin = reinterpret_cast<std::uintptr_t>(address);
        const std::lock_guard<std::mutex> lock(mutex_);
        auto after = buffers_.upper_bound(begin);
        const std::uintptr_t gap_end =
            after == buffers_.end() ? std::numeric_limits<std::uintptr_t>::max() : after->first;
        if (after == buffers_.begin()) return {0, 0, gap_end};
        entry& e = std::prev(after)->second;
        const memory_range range{e.id, std::prev(after)->first, e.end};
        if (begin >= e.end) return {0, e.end, gap_end};
        if (length > e.end - begin) return {0, begin, begin};
        if (pin(range, e.uses) &&
            std::find(e.pinners.begin(), e.pinners.end(), &pinner) == e.pinners.end()) {
            e.pinners.push_back(&pinner);
        }
        return range;
    }

    // A pinner going away: no buffer names it any more.
    void forget(memory_pinner& pinner) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [begin, e] : buffers_) {
            (void)begin;
            e.pinners.erase(std::remove(e.pinners.begin(), e.pinners.end(), &pinner),
                            e.pinners.end());
        }
    }

    [[nodiscard]] std::size_t size() {
        const std::lock_guard<std::mutex> lock(mutex_);
        return buffers_.size();
    }

    // Changes with every buffer added: a gap seen at one generation still holds no registered
    // buffer while the generation is unchanged.
    [[nodiscard]] std::uint64_t generation() const noexcept {
        return generation_.load(std::memory_order_acquire);
    }

  private:
    struct entry {
        std::uint64_t id;
        std::uintptr_t end;
        std::vector<memory_pinner*> pinners;
        std::vector<piece_use> uses;
    };

    memory_registry() {
        ::pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                         [] { instance().mutex_.unlock(); });
    }

    std::mutex mutex_;
    std::map<std::uintptr_t, entry> buffers_;  // by first address
    std::uint64_t last_id_ = 0;
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<bool> recording_{false};
};

}  // namespace detail
NVMEIO_END_NAMESPACE

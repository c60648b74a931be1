#pragma once
/// \file detail/pin_record.hpp
/// What an aligned_buffer tells the io_uring rings that pin it once
/// (backend/io_uring_registered.hpp): how its pieces moved so far, so that a ring pins what moves
/// again, and which rings hold it pinned, so that they let go before its memory is freed.
///
/// Owner and lifetime: each aligned_buffer makes its own record, and a ring that pins the buffer
/// shares it; the record goes with the last of them. A view made from the buffer carries the
/// record to the ring (memory.hpp, io_request::pins). Memory described by a bare pointer has
/// none, and is never pinned behind its owner's back. Nothing here runs at load time; a record
/// costs its buffer one small allocation, and a buffer no ring has looked at is freed without
/// taking a lock.
///
/// Across shared objects, each with its own copy of nvmeio: the record travels with the view,
/// and whichever copy frees the buffer reaches the rings through memory_pinner's virtual unpin.
///
/// Locks: a record's lock is taken before a ring's own, never after. After fork, a child finds
/// a record locked by one of its parent's threads (the lock word names the locking process) in
/// an unknown state: it leaves that record alone, neither reading nor freeing it, and a ring the
/// parent made does nothing in the child.

#include <sched.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvmeio/detail/process.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

class pin_record;

// What pins nvmeio's memory (an io_uring ring). `unpin(record)` is called, with the record
// locked, before the record's buffer is freed; it must let go of the buffer at once.
class memory_pinner {
  public:
    virtual void unpin(pin_record& record) noexcept = 0;

  protected:
    memory_pinner() = default;
    memory_pinner(const memory_pinner&) = default;
    memory_pinner& operator=(const memory_pinner&) = default;
    ~memory_pinner() = default;
};

// What transfers moved through one piece of a buffer, through any ring: the span of it moved so
// far and the bytes (a byte moved twice counts twice).
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

// A lock whose word holds the process that holds it (this_process_token). Threads of one process
// wait for each other: a short spin, then sleeps that grow to a millisecond, since a holder may
// be registering memory with the kernel for milliseconds. A thread that finds it held by another
// process (its parent or an earlier ancestor, before a fork) is told so instead of waiting for a
// thread that is not there.
class process_lock {
  public:
    // Takes the lock (true), or finds it held by another process (false: not taken).
    [[nodiscard]] bool lock() noexcept {
        const std::uint64_t me = this_process_token();
        for (unsigned tries = 0;; ++tries) {
            std::uint64_t holder = 0;
            if (word_.compare_exchange_weak(holder, me, std::memory_order_acquire,
                                            std::memory_order_relaxed))
                return true;
            if (holder != 0 && holder != me) return false;
            if (tries < 16) continue;
            if (tries < 32) {
                (void)::sched_yield();
                continue;
            }
            const long micro = 10L << std::min(tries - 32, 7U);  // 10 us, growing to 1 ms
            const timespec pause{0, std::min(micro, 1000L) * 1000};
            (void)::nanosleep(&pause, nullptr);
        }
    }
    void unlock() noexcept { word_.store(0, std::memory_order_release); }

  private:
    std::atomic<std::uint64_t> word_{0};
};

class pin_record {
  public:
    // The record of [begin, end), held by its buffer.
    static pin_record* make(const void* begin, std::size_t size) {
        return new pin_record(reinterpret_cast<std::uintptr_t>(begin), size);
    }

    pin_record(const pin_record&) = delete;
    pin_record& operator=(const pin_record&) = delete;

    [[nodiscard]] std::uintptr_t begin() const noexcept { return begin_; }
    [[nodiscard]] std::uintptr_t end() const noexcept { return end_; }

    // One more owner (a ring that pinned the buffer); `drop` lets one go, and the last frees it.
    void retain() noexcept { owners_.fetch_add(1, std::memory_order_relaxed); }
    void drop() noexcept {
        if (owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
    }

    // With the record locked, calls `pin(uses)` with the buffer's piece_use records and, when it
    // returns true, records `pinner` as holding the buffer. False, without calling it, in a
    // child whose ancestor held the lock at the fork, or once free_memory has begun (a request
    // on a buffer being freed is the caller's bug, and this does not make it safe: the record
    // may be gone).
    // `pin` must not throw once it has registered anything: the pinner is then named without an
    // allocation, so that freeing the buffer reaches it.
    template <class Pin>
    bool pin(memory_pinner& pinner, Pin&& pin) {
        if (!lock_.lock()) return false;
        const unlock_at_end unlock{lock_};
        looked_at_.store(true, std::memory_order_seq_cst);
        if (freeing_.load(std::memory_order_seq_cst)) return false;
        pinners_.reserve(pinners_.size() + 1);
        if (!pin(uses_)) return false;
        if (std::find(pinners_.begin(), pinners_.end(), &pinner) == pinners_.end())
            pinners_.push_back(&pinner);
        return true;
    }

    // A pinner going away: the record no longer names it.
    void forget(memory_pinner& pinner) noexcept {
        if (!lock_.lock()) return;
        pinners_.erase(std::remove(pinners_.begin(), pinners_.end(), &pinner), pinners_.end());
        lock_.unlock();
    }

    // Before the buffer's memory is freed: every pinner holding it lets go. A buffer no ring has
    // looked at takes no lock (`pin` sets looked_at_ before it reads freeing_, and this sets
    // freeing_ before it reads looked_at_, so one of the two sees the other).
    // Returns false in a child whose ancestor held the lock at the fork: the record may be
    // half-changed there, so the caller leaves it (a small leak) instead of dropping it.
    [[nodiscard]] bool free_memory() noexcept {
        freeing_.store(true, std::memory_order_seq_cst);
        if (!looked_at_.load(std::memory_order_seq_cst)) return true;
        if (!lock_.lock()) return false;  // the pinners are an ancestor's rings, which do nothing
        for (memory_pinner* pinner : pinners_)
            pinner->unpin(*this);
        pinners_.clear();
        lock_.unlock();
        return true;
    }

    // Whether a ring has looked at the buffer to pin it.
    [[nodiscard]] bool looked_at() const noexcept {
        return looked_at_.load(std::memory_order_acquire);
    }

  private:
    struct unlock_at_end {
        process_lock& lock;
        ~unlock_at_end() { lock.unlock(); }
    };

    pin_record(std::uintptr_t begin, std::size_t size) noexcept
        : begin_(begin), end_(begin + size) {}
    ~pin_record() = default;

    const std::uintptr_t begin_;
    const std::uintptr_t end_;
    std::atomic<unsigned> owners_{1};
    std::atomic<bool> looked_at_{false};
    std::atomic<bool> freeing_{false};
    process_lock lock_;
    std::vector<memory_pinner*> pinners_;  // with lock_ held
    std::vector<piece_use> uses_;          // with lock_ held
};

}  // namespace detail
NVMEIO_END_NAMESPACE

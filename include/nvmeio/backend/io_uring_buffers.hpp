#pragma once
/// \file backend/io_uring_buffers.hpp
/// An io_uring ring's table of registered buffers: those a caller hands over
/// (io_uring_backend::register_buffers) and the memory nvmeio allocated that the ring pins on its
/// own once it moves bytes through it again (pin once). A request whose memory lies in a
/// registered buffer goes as READ_FIXED/WRITE_FIXED: the kernel pinned its pages once, at
/// registration, instead of once per request.
///
/// Pin once, in detail:
///  - Which memory: every aligned_buffer this copy of nvmeio allocated (impl/memory_registry.hpp
///    records them; a shared object with hidden symbols has its own copy). Memory nvmeio
///    did not allocate (a std::vector, a tensor, a mapping) is never pinned behind its owner's
///    back; register it by hand if you own it.
///  - How much, and when: the 64 MiB piece of the buffer that a request falls in, when the
///    request moves memory of that piece that an earlier request through this ring moved (its
///    second pass, for a buffer reused pass after pass). Its first pass goes plain, so memory
///    used once costs what it did unpinned (see moves_again). A request that straddles
///    two pieces goes plain.
///  - Never stale: before an aligned_buffer's memory is freed, every ring that pinned it lets go
///    (the slot is forgotten here and emptied in the kernel), so new memory at the same address
///    is never moved through the old pages. A ring that serves one thread (SINGLE_ISSUER) takes
///    table changes from that thread only: freed on another thread, the slot is forgotten at
///    once (no request can reach it) and emptied by the ring's thread before its next submit,
///    so the old pages stay pinned until then (or until the ring goes).
///  - Refused: when the kernel will not pin (ENOMEM at RLIMIT_MEMLOCK; EINVAL before Linux 5.19,
///    which has no sparse tables), the ring stops trying and its requests go plain; the process
///    says so once on stderr and `registration_use::pin_refused` holds the errno. A full table
///    (4096 slots) leaves further pieces plain. No transfer ever fails for it.

#include "nvmeio/backend/io_uring_registration.hpp"
#include "nvmeio/backend/io_uring_support.hpp"

#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/detail/memory_registry.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"

namespace nvmeio {
inline namespace v0 {

#if NVMEIO_HAS_IO_URING

namespace detail {

// Where a ring can be made, nvmeio's memory is recorded for pinning: from the moment the program
// or shared object that includes this header is loaded (impl/memory_registry.hpp).
inline const bool records_memory = (memory_registry::instance().start_recording(), true);

// One ring's registered buffers: see the file comment. Thread-safe: the ring's thread looks up
// and pins, any thread freeing an aligned_buffer unpins. Also keeps which thread the ring
// serves, as table changes from any other thread must wait for that one.
class ring_buffers final : public memory_pinner {
  public:
    static constexpr unsigned slots = 4096;
    static constexpr std::size_t max_length = std::size_t{1} << 30;  // the kernel's, per buffer
    static constexpr std::size_t piece = std::size_t{64} << 20;

    ring_buffers(io_uring& ring, pid_t creator) noexcept : ring_(ring), creator_(creator) {}
    ring_buffers(const ring_buffers&) = delete;
    ring_buffers& operator=(const ring_buffers&) = delete;
    ~ring_buffers() { detach(); }

    // Before the ring is torn down: no freed buffer reaches it any more.
    void detach() noexcept {
        if (detached_) return;
        memory_registry::instance().forget(*this);
        detached_ = true;
    }

    void set_pin_once(bool on) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        pin_once_ = on;
    }

    // The slot of the registered buffer holding [buffer, buffer + length), or -1; nvmeio's
    // memory that moves again (moves_again) is pinned here. The pinning call runs with the
    // registry's mutex held: 1-3 ms per 64 MiB piece of present pages, once per piece and ring.
    int index_for(const void* buffer, std::size_t length) noexcept {
        const auto begin = reinterpret_cast<std::uintptr_t>(buffer);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            const int found = lookup(begin, length);
            if (found >= 0 || !pin_once_ || refused_ != 0) return found;
            if (gap_generation_ == memory_registry::instance().generation() &&
                begin >= gap_.begin && begin < gap_.end && length <= gap_.end - begin)
                return -1;  // no nvmeio memory there, as last seen
        }
        try {
            const std::uint64_t generation = memory_registry::instance().generation();
            const memory_range seen = memory_registry::instance().pin(
                *this, buffer, length, [&](const memory_range& r, std::vector<piece_use>& uses) {
                    return pin(r, uses, begin, length);
                });
            const std::lock_guard<std::mutex> lock(mutex_);
            if (seen.id == 0) {
                gap_ = seen;
                gap_generation_ = generation;
            }
            return lookup(begin, length);
        } catch (...) {  // out of memory for the registry's bookkeeping: go plain
            return -1;
        }
    }

    // Whether a registered buffer holds [buffer, buffer + length) now (pins nothing).
    bool holds(const void* buffer, std::size_t length) const noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        return lookup(reinterpret_cast<std::uintptr_t>(buffer), length) >= 0;
    }

    // Called by the registry (its mutex held) before buffer `id`'s memory is freed.
    void unpin(std::uint64_t id) noexcept override {
        if (creator_ != this_process_id()) return;  // the parent's ring: not ours to change
        const std::lock_guard<std::mutex> lock(mutex_);
        const pid_t issuer = issuer_.load(std::memory_order_relaxed);
        const bool here = issuer == 0 || issuer == this_thread_id();
        for (auto r = regions_.begin(); r != regions_.end();) {
            if (r->id != id) {
                ++r;
                continue;
            }
            if (here) {
                (void)update(r->slot, nullptr, 0);  // refused, it is refilled or dies with the ring
                free_.push_back(r->slot);
            } else {
                later_.push_back(r->slot);  // for the ring's thread (let_go)
                has_later_.store(true, std::memory_order_release);
            }
            ++unpinned_;
            r = regions_.erase(r);
        }
    }

    // The thread the ring serves (SINGLE_ISSUER, once enabled), or 0 for any.
    [[nodiscard]] pid_t issuer() const noexcept { return issuer_.load(std::memory_order_relaxed); }

    // Enables the ring with `enable` and makes the calling thread, `me`, its issuer, with no
    // unpin in between; 0 or what `enable` returned.
    template <class Enable>
    int bind(pid_t me, Enable&& enable) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        const int rc = enable();
        if (rc == 0) issuer_.store(me, std::memory_order_relaxed);
        return rc;
    }

    // On the ring's thread: empties the slots of memory freed on other threads.
    void let_go() noexcept {
        if (!has_later_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const unsigned slot : later_)
            (void)empty_slot(slot);  // refused, it stays out of use until the ring goes
        later_.clear();
        has_later_.store(false, std::memory_order_relaxed);
    }

    // Runs `replace`, which sets a new ring up in place of the old one and tears the old one
    // down (with every registration it held), with no table change in between; then fills the
    // new ring's table with the caller's buffers. Pinned memory is pinned again as it moves.
    template <class Replace>
    void replace_ring(Replace&& replace) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        replace();
        issuer_.store(0, std::memory_order_relaxed);
        later_.clear();
        has_later_.store(false, std::memory_order_relaxed);
        table_made_ = false;
        free_.clear();
        std::vector<region> owned;
        for (const region& r : regions_) {
            if (r.id == 0) owned.push_back(r);
        }
        regions_.clear();
        if (owned.empty()) return;
        int error = make_table();
        for (const region& r : owned) {
            if (error == 0) error = fill(r.slot, r.begin, r.end - r.begin);
            if (error != 0) break;
            free_.erase(std::find(free_.begin(), free_.end(), r.slot));
            regions_.push_back(r);  // still in address order
        }
        if (error != 0) {  // the caller's buffers go plain, and nothing is pinned any more
            regions_.clear();
            (void)refuse(error);
        }
    }

    // Registers the caller's buffers (io_uring_backend::register_buffers documents the rules).
    void add(std::vector<aligned_buffer>&& buffers) {
        if (buffers.empty()) throw_invalid("register_buffers: no buffers given");
        for (std::size_t i = 0; i < buffers.size(); ++i) {
            if (buffers[i].capacity() == 0 || buffers[i].capacity() > max_length) {
                throw_invalid("register_buffers: buffer " + std::to_string(i) + " has " +
                              std::to_string(buffers[i].capacity()) +
                              " bytes; each must hold 1 byte to 1 GiB");
            }
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!owned_.empty()) throw_invalid("register_buffers: buffers are already registered");
        if (const int rc = make_table(); rc != 0) throw refused(rc, buffers.size());
        if (buffers.size() > free_.size()) {
            throw_invalid("register_buffers: " + std::to_string(buffers.size()) +
                          " buffers, but only " + std::to_string(free_.size()) + " of the ring's " +
                          std::to_string(slots) + " slots are free");
        }
        std::vector<region> added;
        for (aligned_buffer& b : buffers) {
            const auto at = reinterpret_cast<std::uintptr_t>(b.data());
            const int rc = fill(free_.back(), at, b.capacity());
            if (rc != 0) {
                for (const region& r : added)
                    (void)empty_slot(r.slot);
                throw refused(rc, buffers.size());
            }
            added.push_back({at, at + b.capacity(), free_.back(), 0});
            free_.pop_back();
        }
        for (const region& r : added)
            insert(r);
        owned_ = std::move(buffers);
        buffers.clear();
    }

    // Unregisters the caller's buffers and hands them back (the caller checked that none is in
    // flight).
    std::vector<aligned_buffer> take() {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (auto r = regions_.begin(); r != regions_.end();) {
            if (r->id != 0) {
                ++r;
                continue;
            }
            if (const int error = empty_slot(r->slot); error != 0)
                throw io_error({errno_code(error), "io_uring_register_buffers_update", "", 0, 0});
            r = regions_.erase(r);
        }
        return std::exchange(owned_, {});
    }

    [[nodiscard]] std::size_t owned_count() const {
        const std::lock_guard<std::mutex> lock(mutex_);
        return owned_.size();
    }

    [[nodiscard]] registered_buffer owned_at(std::size_t index) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (index >= owned_.size()) {
            throw_invalid("registered_buffer_at(" + std::to_string(index) +
                          "): " + std::to_string(owned_.size()) + " buffers are registered");
        }
        return {const_cast<std::byte*>(owned_[index].data()), owned_[index].size()};
    }

    // The pinning counts of `registration_use`.
    void count(registration_use& use) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        use.pinned = pinned_;
        use.unpinned = unpinned_;
        use.pin_refused = refused_;
    }

  private:
    struct region {
        std::uintptr_t begin;
        std::uintptr_t end;
        unsigned slot;
        std::uint64_t id;  // the registry's id of pinned memory; 0 for a caller's buffer
    };

    // With mutex_ held: pins the piece of buffer `r` that holds [begin, begin + length).
    bool pin(const memory_range& r, std::vector<piece_use>& uses, std::uintptr_t begin,
             std::size_t length) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!pin_once_ || refused_ != 0) return false;
        const std::uintptr_t from = r.begin + (begin - r.begin) / piece * piece;
        const std::uintptr_t to = std::min<std::uintptr_t>(r.end, from + piece);
        if (length > to - begin) return false;  // straddles two pieces
        for (const region& held : regions_) {
            if (held.id == r.id && held.begin == from) return true;
        }
        if (!moves_again(uses, from, begin, length)) return false;
        if (const int rc = make_table(); rc != 0) return refuse(rc);
        if (free_.empty()) return false;
        if (const int rc = fill(free_.back(), from, to - from); rc != 0) return refuse(rc);
        insert({from, to, free_.back(), r.id});
        free_.pop_back();
        ++pinned_;
        return true;
    }

    bool refuse(int error) noexcept {
        refused_ = error;
        report_pin_refusal(error);
        return false;
    }

    io_error refused(int error, std::size_t count) const {
        std::string what = "io_uring_register_buffers (" + std::to_string(count) + " buffers)";
        if (error == ENOMEM)
            what += " (pinning them would pass RLIMIT_MEMLOCK; raise it or register less)";
        return io_error({errno_code(error), what, "", 0, 0});
    }

    // A sparse table of `slots` empty slots, made on first need; 0 or the kernel's errno.
    int make_table() noexcept {
        if (table_made_) return 0;
        const int rc = ::io_uring_register_buffers_sparse(&ring_, slots);
        if (rc < 0) return -rc;
        free_.clear();
        for (unsigned s = slots; s-- > 0;)
            free_.push_back(s);
        table_made_ = true;
        return 0;
    }

    // Sets `slot` to [begin, begin + length), or empties it for null; 0 or the kernel's errno.
    // A signal that interrupts the call (one without SA_RESTART) does not stop it.
    int update(unsigned slot, void* begin, std::size_t length) noexcept {
        iovec v{begin, length};
        int rc;
        do {
            rc = ::io_uring_register_buffers_update_tag(&ring_, slot, &v, nullptr, 1);
        } while (rc == -EINTR);
        return rc < 0 ? -rc : 0;
    }

    int fill(unsigned slot, std::uintptr_t begin, std::size_t length) noexcept {
        return update(slot, reinterpret_cast<void*>(begin), length);
    }

    int empty_slot(unsigned slot) noexcept {
        const int error = update(slot, nullptr, 0);
        if (error == 0) free_.push_back(slot);
        return error;
    }

    void insert(const region& r) {
        regions_.insert(
            std::upper_bound(regions_.begin(), regions_.end(), r.begin,
                             [](std::uintptr_t a, const region& x) { return a < x.begin; }),
            r);
    }

    // With mutex_ held: the slot holding [begin, begin + length), or -1.
    int lookup(std::uintptr_t begin, std::size_t length) const noexcept {
        auto after =
            std::upper_bound(regions_.begin(), regions_.end(), begin,
                             [](std::uintptr_t a, const region& x) { return a < x.begin; });
        if (after == regions_.begin()) return -1;
        const region& r = *(after - 1);
        if (begin >= r.end || length > r.end - begin) return -1;
        return static_cast<int>(r.slot);
    }

    io_uring& ring_;
    const pid_t creator_;
    mutable std::mutex mutex_;
    bool detached_ = false;
    bool pin_once_ = true;
    bool table_made_ = false;
    int refused_ = 0;
    std::atomic<pid_t> issuer_{0};  // the thread the ring serves; 0 for any
    std::vector<unsigned> later_;   // slots of memory freed on other threads, to empty
    std::atomic<bool> has_later_{false};
    std::vector<region> regions_;        // sorted by address
    std::vector<unsigned> free_;         // empty slots
    std::vector<aligned_buffer> owned_;  // the caller's, while registered
    memory_range gap_;                   // where the registry last said no nvmeio memory lies
    std::uint64_t gap_generation_ = ~std::uint64_t{0};
    std::uint64_t pinned_ = 0;
    std::uint64_t unpinned_ = 0;
};

}  // namespace detail

#endif  // NVMEIO_HAS_IO_URING

}  // namespace v0
}  // namespace nvmeio

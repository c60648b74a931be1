#pragma once
// The process's staging rings: one pool, which every loader and saver of nvmeio_torch (through
// _staged.py) and the handle's GPU calls take rings from. A ring costs its page-locked slots
// (locking 256 MiB takes about as long as moving it), so a ring given back is kept for the next
// transfer of its device; at most one per device is kept (the larger), so that rings of other
// shapes (a bound on host memory) never pile up. A thread that finds its device's ring taken
// gets one of its own. Rings own no threads: their transfers run on a context their caller
// lends (the pool's own, or the handle's).

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <nvmeio/async.hpp>

#include "staged.hpp"

namespace nvmeio_torch {

/// The shape of a ring within `max_bytes` of host memory (0: no bound): nvmeio's default ring
/// (`nvmeio::ring_options{}`, the one place the defaults live) where it fits, else 4 slots (2
/// under 16 KiB) of whole pages. std::invalid_argument under two pages.
inline nvmeio::ring_options ring_shape(std::size_t max_bytes) {
    const nvmeio::ring_options defaults{};
    constexpr std::size_t page = 4096;
    if (max_bytes == 0 || std::size_t{defaults.slots} * defaults.slot_size <= max_bytes) {
        return defaults;
    }
    const unsigned slots = max_bytes >= 4 * page ? 4 : 2;
    const std::size_t size = max_bytes / slots / page * page;
    if (size < page) {
        throw std::invalid_argument("a staging ring needs at least " + std::to_string(2 * page) +
                                    " bytes, not " + std::to_string(max_bytes));
    }
    return {slots, size};
}

class ring_pool {
  public:
    /// The process's pool. After fork, `forget()` in the child leaves the parent's rings and
    /// threads untouched (they are the parent's) and starts an empty pool.
    static ring_pool& process() { return *current(); }
    static void forget() noexcept { current() = new ring_pool; }  // the old one is not freed

    /// A ring of `device` (-1: the host's engine) within `max_bytes` (0: nvmeio's default
    /// ring): the kept one where it fits, else a new one (made without the pool's lock held:
    /// page-locking its slots takes a while).
    std::unique_ptr<staging_ring_base> take(int device, std::size_t max_bytes) {
        const nvmeio::ring_options shape = ring_shape(max_bytes);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto kept = idle_.find(device);
            if (kept != idle_.end() && fits(*kept->second, shape, max_bytes)) {
                std::unique_ptr<staging_ring_base> ring = std::move(kept->second);
                idle_.erase(kept);
                return ring;
            }
        }
        ring_settings s;
        s.device = device;
        s.ring = shape;
        return make_staging_ring(s);
    }

    /// Keeps `ring` for its device's next transfer, unless a larger one is kept: then it is
    /// freed (here, without the pool's lock held).
    void give_back(std::unique_ptr<staging_ring_base> ring) noexcept {
        if (!ring) return;
        std::unique_ptr<staging_ring_base> freed;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            std::unique_ptr<staging_ring_base>& kept = idle_[ring->settings().device];
            freed = !kept || kept->bytes() < ring->bytes() ? std::exchange(kept, std::move(ring))
                                                           : std::move(ring);
        }
    }

    /// Frees the kept rings (their page-locked memory).
    void release_idle() noexcept {
        std::map<int, std::unique_ptr<staging_ring_base>> freed;
        std::lock_guard<std::mutex> lock(mutex_);
        freed.swap(idle_);
    }

    /// The context the pool lends rings whose caller brings none: one worker per CPU (at
    /// most 8), each moving a window at a time with nvmeio's default queue.
    nvmeio::async_context& context() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!context_) {
            const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
            context_ = std::make_unique<nvmeio::async_context>(
                nvmeio::async_options{std::min(8u, std::max(2u, cpus)), {}});
        }
        return *context_;
    }

    /// Bytes of the rings kept.
    std::size_t idle_bytes() {
        std::lock_guard<std::mutex> lock(mutex_);
        std::size_t bytes = 0;
        for (const auto& kept : idle_)
            bytes += kept.second->bytes();
        return bytes;
    }

  private:
    ring_pool() = default;

    static ring_pool*& current() {
        static ring_pool* pool = new ring_pool;  // never freed: CUDA may be gone at exit
        return pool;
    }

    // A kept ring serves a request of `shape` (within `max_bytes`, 0: none) when it is as large
    // as the shape asks and, under a bound, within it.
    static bool fits(const staging_ring_base& ring, const nvmeio::ring_options& shape,
                     std::size_t max_bytes) {
        const std::size_t asked = std::size_t{shape.slots} * shape.slot_size;
        return ring.bytes() >= asked && (max_bytes == 0 || ring.bytes() <= max_bytes);
    }

    std::mutex mutex_;
    std::map<int, std::unique_ptr<staging_ring_base>> idle_;
    std::unique_ptr<nvmeio::async_context> context_;
};

/// A ring taken from a pool, given back when the lease ends.
class ring_lease {
  public:
    ring_lease(ring_pool& pool, std::unique_ptr<staging_ring_base> ring)
        : pool_(&pool), ring_(std::move(ring)) {}
    ring_lease(const ring_lease&) = delete;
    ring_lease& operator=(const ring_lease&) = delete;
    ~ring_lease() { pool_->give_back(std::move(ring_)); }

    [[nodiscard]] staging_ring_base& operator*() const { return *ring_; }
    [[nodiscard]] staging_ring_base* operator->() const { return ring_.get(); }

  private:
    ring_pool* pool_;
    std::unique_ptr<staging_ring_base> ring_;
};

}  // namespace nvmeio_torch

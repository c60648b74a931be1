#pragma once
/// \file simulated_link.hpp
/// A copy engine (nvmeio/staging_ring.hpp's concept) that stands in for a GPU behind a PCIe
/// link, for tests and benchmarks on machines without one: copies run in order on a thread of
/// its own, each taking at least its bytes / `bytes_per_second` (the link's rate; 0: as fast as
/// memcpy), between the ring's slots and a stand-in for the device's memory. A device address
/// is an offset into the stand-in, taken modulo its size (a plan refuses address 0: start at the
/// size, which is offset 0 again): a stand-in smaller than what moves is
/// reused, so that host memory measures the pipeline rather than the data; one at least as
/// large holds exactly what a read brought, or gives exactly what a write stores.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace nvmeio::support {

class simulated_link {
  public:
    /// A link of `bytes_per_second` (0: unpaced) to a stand-in of `stand_in_bytes` (> 0).
    simulated_link(double bytes_per_second, std::size_t stand_in_bytes)
        : rate_(bytes_per_second),
          stand_in_(checked(stand_in_bytes)),
          worker_([this] { work(); }) {}
    simulated_link(const simulated_link&) = delete;
    simulated_link& operator=(const simulated_link&) = delete;
    ~simulated_link() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        worker_.join();
    }

    /// The device's memory: device address a is byte a % size of it.
    [[nodiscard]] std::byte* stand_in() noexcept { return stand_in_.data(); }
    [[nodiscard]] std::size_t stand_in_size() const noexcept { return stand_in_.size(); }

    void attach(std::byte*, std::size_t, unsigned slots) {
        std::lock_guard<std::mutex> lock(mutex_);
        started_.assign(slots, 0);
        recorded_.assign(slots, 0);
        completed_.assign(slots, 0);
    }
    void detach() noexcept { (void)wait_all(); }

    void copy_from_slot(unsigned slot, std::uintptr_t to, const std::byte* from, std::size_t n) {
        enqueue({slot, 0, const_cast<std::byte*>(from), to, n, true});
    }
    void copy_to_slot(unsigned slot, std::byte* to, std::uintptr_t from, std::size_t n) {
        enqueue({slot, 0, to, from, n, false});
    }
    void record(unsigned slot) {
        std::lock_guard<std::mutex> lock(mutex_);
        recorded_.at(slot) = started_.at(slot);
    }
    void wait(unsigned slot) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return completed_[slot] >= recorded_[slot]; });
    }
    [[nodiscard]] bool ready(unsigned slot) {
        std::lock_guard<std::mutex> lock(mutex_);
        return completed_.at(slot) >= recorded_.at(slot);
    }
    bool wait_all() noexcept {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return queue_.empty() && !running_; });
        return true;
    }

    /// Bytes the link has moved.
    [[nodiscard]] std::uint64_t bytes() {
        std::lock_guard<std::mutex> lock(mutex_);
        return bytes_;
    }

  private:
    struct copy {
        unsigned slot;
        std::uint64_t position;  // among the slot's copies, from 1
        std::byte* host;         // in a slot
        std::uintptr_t device;   // an offset into the stand-in, modulo its size
        std::size_t n;
        bool to_device;
    };

    static std::size_t checked(std::size_t bytes) {
        if (bytes == 0) throw std::invalid_argument("simulated_link: an empty stand-in");
        return bytes;
    }

    void enqueue(copy c) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            c.position = ++started_.at(c.slot);
            queue_.push_back(c);
        }
        changed_.notify_all();
    }

    // Between a slot and the stand-in, wrapping around its end.
    void move(const copy& c) {
        std::size_t done = 0;
        while (done < c.n) {
            const std::size_t at = (c.device + done) % stand_in_.size();
            const std::size_t part = std::min(c.n - done, stand_in_.size() - at);
            if (c.to_device) {
                std::memcpy(stand_in_.data() + at, c.host + done, part);
            } else {
                std::memcpy(c.host + done, stand_in_.data() + at, part);
            }
            done += part;
        }
    }

    void work() {
        using clock = std::chrono::steady_clock;
        clock::time_point free_at = clock::now();  // when the link is done with what it had
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;
            const copy c = queue_.front();
            queue_.pop_front();
            running_ = true;
            lock.unlock();
            const clock::time_point began = clock::now();
            move(c);
            if (rate_ > 0) {  // the link's time for these bytes, once done with the earlier ones
                free_at = std::max(free_at, began) +
                          std::chrono::duration_cast<clock::duration>(
                              std::chrono::duration<double>(static_cast<double>(c.n) / rate_));
                std::this_thread::sleep_until(free_at);
            }
            lock.lock();
            running_ = false;
            bytes_ += c.n;
            completed_[c.slot] = c.position;
            changed_.notify_all();
        }
    }

    double rate_;
    std::vector<std::byte> stand_in_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<copy> queue_;
    std::vector<std::uint64_t> started_, recorded_, completed_;
    std::uint64_t bytes_ = 0;
    bool running_ = false;
    bool stop_ = false;
    std::thread worker_;
};

}  // namespace nvmeio::support

#pragma once
// A test copy engine (the concept of nvmeio/staging_ring.hpp) whose copies complete late, on a
// thread of its own, and touch the slot only then: a transfer that reuses a slot before waiting
// for it copies the wrong bytes, and the test comparing them sees it. It also counts the copies
// made into each byte of one destination area, to show every byte is written exactly once. To
// test the failure paths, it can fail its n-th copy or record call at once (the call throws and
// starts nothing), or fail a copy late (started, then dropped when its turn comes: the `wait`
// of its slot's recorded copies throws, and the next `wait_all` returns false), as a GPU's copy
// may.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nvmeio_test {

class delayed_copy_engine {
  public:
    explicit delayed_copy_engine(std::chrono::microseconds delay = std::chrono::microseconds{300})
        : delay_(delay), worker_([this] { work(); }) {}
    delayed_copy_engine(const delayed_copy_engine&) = delete;
    delayed_copy_engine& operator=(const delayed_copy_engine&) = delete;
    ~delayed_copy_engine() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        worker_.join();
    }

    // Copies into [base, base + size) are counted per byte in `counts()`.
    void count_into(std::uintptr_t base, std::size_t size) {
        base_ = base;
        counts_.assign(size, 0);
    }
    const std::vector<unsigned>& counts() const { return counts_; }

    void attach(std::byte* memory, std::size_t slot_size, unsigned slots) {
        std::lock_guard<std::mutex> lock(mutex_);
        memory_ = memory;
        slot_size_ = slot_size;
        recorded_.assign(slots, 0);
        recorded_before_.assign(slots, 0);
        started_.assign(slots, 0);
        completed_.assign(slots, 0);
        failed_.assign(slots, {});
        ++attaches_;
    }
    void detach() noexcept {
        (void)wait_all();
        ++detaches_;
    }

    // The n-th copy (either way) or record call from now throws std::runtime_error; 0: none.
    void fail_copy_call(std::size_t n) { copy_calls_left_ = n; }
    void fail_record_call(std::size_t n) { record_calls_left_ = n; }
    // The n-th copy (either way) from now is started and fails late; 0: none.
    void fail_copy_late(std::size_t n) { late_copies_left_ = n; }

    void copy_from_slot(unsigned slot, std::uintptr_t to, const std::byte* from, std::size_t n) {
        check_in_slot(slot, from, n);
        fail_if_due(copy_calls_left_, "copy");
        enqueue(slot, [this, to, from, n] {
            std::memcpy(reinterpret_cast<void*>(to), from, n);
            count(to, n);
        });
    }
    void copy_to_slot(unsigned slot, std::byte* to, std::uintptr_t from, std::size_t n) {
        check_in_slot(slot, to, n);
        fail_if_due(copy_calls_left_, "copy");
        enqueue(slot, [to, from, n] { std::memcpy(to, reinterpret_cast<const void*>(from), n); });
    }
    void record(unsigned slot) {
        fail_if_due(record_calls_left_, "record");
        std::lock_guard<std::mutex> lock(mutex_);
        recorded_before_.at(slot) = recorded_.at(slot);
        recorded_.at(slot) = started_.at(slot);
    }
    // Throws when a copy of the slot's last recorded ones failed.
    void wait(unsigned slot) {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return completed_[slot] >= recorded_[slot]; });
        for (const std::uint64_t position : failed_[slot]) {
            if (position > recorded_before_[slot] && position <= recorded_[slot]) {
                throw std::runtime_error("delayed_copy_engine: a copy of slot " +
                                         std::to_string(slot) + " failed late");
            }
        }
    }
    // Every copy started, recorded or not, has ended; false if one failed since the last call.
    bool wait_all() noexcept {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return queue_.empty() && !running_; });
        return !std::exchange(failed_since_wait_all_, false);
    }
    bool ready(unsigned slot) {
        std::lock_guard<std::mutex> lock(mutex_);
        return completed_.at(slot) >= recorded_.at(slot);
    }

    // Copies started and not completed, over all slots.
    std::size_t in_flight() {
        std::lock_guard<std::mutex> lock(mutex_);
        return queue_.size() + (running_ ? 1 : 0);
    }
    std::size_t copies() const { return copies_; }
    unsigned attaches() const { return attaches_; }
    unsigned detaches() const { return detaches_; }

  private:
    struct job {
        unsigned slot;
        std::uint64_t position;  // among the slot's copies, from 1
        bool fails;              // dropped when its turn comes
        std::function<void()> copy;
    };

    void check_in_slot(unsigned slot, const std::byte* at, std::size_t n) const {
        const std::byte* begin = memory_ + std::size_t{slot} * slot_size_;
        if (at < begin || at + n > begin + slot_size_) {
            throw std::logic_error("delayed_copy_engine: a copy outside its slot");
        }
    }

    static bool due(std::size_t& calls_left) { return calls_left != 0 && --calls_left == 0; }

    static void fail_if_due(std::size_t& calls_left, const char* call) {
        if (due(calls_left)) {
            throw std::runtime_error(std::string("delayed_copy_engine: ") + call + " failed");
        }
    }

    void enqueue(unsigned slot, std::function<void()> copy) {
        const bool fails = due(late_copies_left_);
        std::lock_guard<std::mutex> lock(mutex_);
        ++copies_;
        queue_.push_back({slot, ++started_.at(slot), fails, std::move(copy)});
        changed_.notify_all();
    }

    void count(std::uintptr_t to, std::size_t n) {
        if (counts_.empty() || to < base_ || to + n > base_ + counts_.size()) return;
        for (std::size_t i = 0; i < n; ++i)
            ++counts_[to - base_ + i];
    }

    void work() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return;
            job next = std::move(queue_.front());
            queue_.pop_front();
            running_ = true;
            lock.unlock();
            std::this_thread::sleep_for(delay_);  // the copy lands late, reading the slot now
            if (!next.fails) next.copy();
            lock.lock();
            running_ = false;
            if (next.fails) {
                failed_[next.slot].push_back(next.position);
                failed_since_wait_all_ = true;
            }
            ++completed_[next.slot];
            changed_.notify_all();
        }
    }

    std::chrono::microseconds delay_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<job> queue_;
    bool running_ = false;
    bool stop_ = false;
    std::byte* memory_ = nullptr;
    std::size_t slot_size_ = 0;
    // Per slot: copies started, completed, and recorded by the last record call and the one
    // before it (its recorded copies are those after the latter, up to the former).
    std::vector<std::uint64_t> recorded_, recorded_before_, started_, completed_;
    std::vector<std::vector<std::uint64_t>> failed_;  // per slot: positions of failed copies
    bool failed_since_wait_all_ = false;
    std::size_t copies_ = 0;
    unsigned attaches_ = 0, detaches_ = 0;
    std::size_t copy_calls_left_ = 0, record_calls_left_ = 0, late_copies_left_ = 0;
    std::uintptr_t base_ = 0;
    std::vector<unsigned> counts_;
    std::thread worker_;
};

}  // namespace nvmeio_test

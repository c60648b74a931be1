#pragma once
// A Backend policy for fault injection: libaio, except that a request covering the file offset
// in `offset_fault_backend::fail_offset` completes with `-fail_errno` without reaching the kernel.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nvmeio/backend/libaio.hpp>
#include <vector>

namespace nvmeio_test {

class offset_fault_backend {
  public:
    static constexpr const char* name = "offset_fault";
    static inline std::atomic<std::uint64_t> fail_offset{~std::uint64_t{0}};
    static inline std::atomic<int> fail_errno{5};  // EIO

    explicit offset_fault_backend(unsigned queue_depth) : real_(queue_depth) {
        failed_.reserve(queue_depth);
    }

    int submit(const nvmeio::io_request* requests, std::size_t count) noexcept {
        const std::uint64_t bad = fail_offset.load();
        std::size_t i = 0;
        for (; i < count; ++i) {
            const nvmeio::io_request& r = requests[i];
            if (bad >= r.offset && bad < r.offset + r.length) {
                failed_.push_back({r.user_data, -static_cast<std::int64_t>(fail_errno.load())});
                continue;
            }
            const int rc = real_.submit(&r, 1);
            if (rc <= 0) return i == 0 ? rc : static_cast<int>(i);
        }
        return static_cast<int>(i);
    }

    int reap(nvmeio::io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        std::size_t got = 0;
        while (!failed_.empty() && got < max) {
            out[got++] = failed_.back();
            failed_.pop_back();
        }
        if (got >= min && got > 0) return static_cast<int>(got);
        const int rc = real_.reap(out + got, min - got, max - got, timeout);
        if (rc < 0) return got > 0 ? static_cast<int>(got) : rc;
        return static_cast<int>(got) + rc;
    }

    unsigned queue_depth() const noexcept { return real_.queue_depth(); }

    // The failed requests count until reap hands their completions back.
    [[nodiscard]] std::size_t in_flight() const noexcept {
        return real_.in_flight() + failed_.size();
    }

  private:
    nvmeio::libaio_backend real_;
    std::vector<nvmeio::io_completion> failed_;
};

}  // namespace nvmeio_test

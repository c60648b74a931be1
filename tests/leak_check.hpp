#pragma once
// What a process holds that nvmeio could leak: descriptors, kernel AIO contexts and locked
// memory, read from /proc/self so the count does not depend on nvmeio's own bookkeeping.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <ostream>
#include <string>
#include <utility>

#include "test_support.hpp"

namespace nvmeio_test {

// Kernel AIO contexts of this process: io_setup maps a ring named "[aio]" into the process.
inline int aio_context_count() {
    std::ifstream maps("/proc/self/maps");
    int n = 0;
    for (std::string line; std::getline(maps, line);)
        n += line.find("[aio]") != std::string::npos;
    return n;
}

// Memory this process has mlock'ed, in KiB (VmLck in /proc/self/status).
inline long locked_kib() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("VmLck:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    }
    return -1;
}

// A snapshot of the three counts; equal snapshots before and after a scope mean no leak.
struct held_resources {
    int descriptors = open_fd_count();
    int aio_contexts = aio_context_count();
    long locked = locked_kib();

    std::string str() const {
        return "descriptors=" + std::to_string(descriptors) +
               " aio_contexts=" + std::to_string(aio_contexts) +
               " locked_kib=" + std::to_string(locked);
    }
    bool operator==(const held_resources& o) const {
        return descriptors == o.descriptors && aio_contexts == o.aio_contexts && locked == o.locked;
    }
    bool operator!=(const held_resources& o) const { return !(*this == o); }
    friend std::ostream& operator<<(std::ostream& out, const held_resources& r) {
        return out << r.str();
    }
};

// Runs `f` on another thread and waits at most `bound` for it. A hang cannot be reported as an
// ordinary test failure (the thread still uses the caller's objects, and std::async's future
// would wait for it forever), so on timeout this prints what hung and aborts the process.
template <class F>
auto within(std::chrono::seconds bound, const std::string& what, F&& f) {
    auto future = std::async(std::launch::async, std::forward<F>(f));
    if (future.wait_for(bound) != std::future_status::ready) {
        std::fprintf(stderr, "HANG: %s did not finish within %lld s; aborting\n", what.c_str(),
                     static_cast<long long>(bound.count()));
        std::fflush(stderr);
        std::abort();
    }
    return future.get();
}

}  // namespace nvmeio_test

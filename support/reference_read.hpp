#pragma once
/// \file support/reference_read.hpp
/// The reads every user already has, to measure nvmeio against: a buffered `pread` loop and an
/// mmap + memcpy, one thread each, timed with the process's CPU time.

#include <sys/mman.h>

#include <nvmeio/error.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/perf.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "support/machine.hpp"

namespace nvmeio::support {

/// What a reference read did.
struct reference_result {
    transfer_perf perf;      ///< bytes and elapsed_us (no latencies: no requests to time).
    double cpu_seconds = 0;  ///< User + system CPU of the process during the read.
};

/// Reads the first `size` bytes of `path` into `buffer` with buffered `pread` calls of `chunk`
/// bytes; stops early at the end of the file (perf.bytes says how far it got). Throws io_error.
inline reference_result buffered_read(const std::string& path, void* buffer, std::uint64_t size,
                                      std::size_t chunk = std::size_t{1} << 20) {
    file f(path, open_mode::read, direct_io::off);
    auto* bytes = static_cast<std::byte*>(buffer);
    reference_result result;
    const cpu_times before = process_cpu_times();
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t at = 0; at < size;) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - at));
        const std::size_t got = f.read_at(nvmeio::memory(bytes + at, want), at);
        if (got == 0) break;
        at += got;
        result.perf.bytes += got;
    }
    const auto stop = std::chrono::steady_clock::now();
    result.cpu_seconds = process_cpu_times().total() - before.total();
    result.perf.elapsed_us = std::chrono::duration<double, std::micro>(stop - start).count();
    return result;
}

/// Maps `path` and copies its first `size` bytes into `buffer` (madvise SEQUENTIAL). Throws
/// io_error when the map fails or the file is shorter than `size`.
inline reference_result mmap_read(const std::string& path, void* buffer, std::uint64_t size) {
    file f(path, open_mode::read, direct_io::off);
    if (f.size() < size) {
        throw io_error({std::make_error_code(std::errc::invalid_argument),
                        "mmap (the file is shorter than the range)", path, 0, size});
    }
    reference_result result;
    const cpu_times before = process_cpu_times();
    const auto start = std::chrono::steady_clock::now();
    const auto length = static_cast<std::size_t>(size);
    void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, f.native_handle(), 0);
    if (map == MAP_FAILED) {
        throw io_error({std::error_code(errno, std::generic_category()), "mmap", path, 0, size});
    }
    (void)::madvise(map, length, MADV_SEQUENTIAL);
    std::memcpy(buffer, map, length);
    ::munmap(map, length);
    const auto stop = std::chrono::steady_clock::now();
    result.cpu_seconds = process_cpu_times().total() - before.total();
    result.perf.bytes = size;
    result.perf.elapsed_us = std::chrono::duration<double, std::micro>(stop - start).count();
    return result;
}

}  // namespace nvmeio::support

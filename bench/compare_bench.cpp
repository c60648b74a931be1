// compare_bench: throughput of nvmeio::equal, nvmeio::first_mismatch and
// nvmeio::count_mismatches against glibc memcmp on a large pair of equal buffers (memory bound)
// and a small, cache-resident pair.
//
// Build: g++ -O2 -std=c++17 -Iinclude bench/compare_bench.cpp -o compare_bench
//        (add -march=native for the host's widest registers)
// The functions are timed interleaved, in an order rotated per round (A B C D, B C D A, ...), and
// each measurement follows an untimed call of the same function, so every function starts with
// the caches as it leaves them (near the L3's size, the function run before would otherwise
// decide what is still cached). Reported are the median GB/s over the rounds and the median of
// each round's ratio to memcmp.
// GB = 10^9 bytes of ONE buffer per second; each comparison reads both buffers.

#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/compare.hpp>

#include <gnu/libc-version.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"
#include "support/stats.hpp"

namespace support = nvmeio::support;

namespace {

/// Everything the command line can change.
struct options {
    unsigned rounds = 7;
    std::uint64_t size = std::uint64_t{1} << 30;
    std::uint64_t small_size = 64 << 10;
    double small_seconds = 0.05;  // target duration of one small-buffer measurement
};

options parse(int argc, char** argv) {
    options opts;
    CLI::App app{
        "compare_bench: nvmeio::equal, first_mismatch and count_mismatches against memcmp, "
        "interleaved, medians."};
    support::add_count_option(app, "--rounds", opts.rounds,
                              "interleaved rounds per function; the median is reported", 1u, 1000u);
    support::add_size_option(app, "--size", opts.size, "size of each large buffer");
    support::add_size_option(app, "--small-size", opts.small_size,
                             "size of each cache-resident buffer");
    support::parse_command_line(app, argc, argv);
    if (opts.size > support::physical_memory_bytes() / 3)
        throw support::usage_error("--size", "two buffers of it do not fit in memory");
    return opts;
}

/// A page-aligned buffer, like the ones nvmeio reads into with O_DIRECT.
using buffer = nvmeio::aligned_buffer;

std::uint8_t* bytes(buffer& b) {
    return reinterpret_cast<std::uint8_t*>(b.data());
}

/// Fills `a` with the generated pattern and copies it into `b`: writes every page of both (hot).
void fill_equal(std::uint8_t* a, std::uint8_t* b, std::size_t size) {
    support::fill_pattern(a, size, 0, 42);
    std::memcpy(b, a, size);
}

/// Keeps the compiler from proving the inputs unchanged between repetitions, so it cannot
/// hoist or merge the (pure) comparisons.
template <class T>
inline void launder(T*& p) {
    asm volatile("" : "+r"(p) : : "memory");
}

volatile std::size_t sink;  // every result ends up here

enum class function { equal, first_mismatch, count_mismatches, memcmp };
constexpr function functions[] = {function::equal, function::first_mismatch,
                                  function::count_mismatches, function::memcmp};
constexpr std::size_t function_count = std::size(functions);
constexpr const char* names[] = {"nvmeio::equal", "nvmeio::first_mismatch",
                                 "nvmeio::count_mismatches", "memcmp == 0"};

/// Runs `f` on (a, b, size) `repetitions` times; returns seconds.
double time_function(function f, const std::uint8_t* a, const std::uint8_t* b, std::size_t size,
                     std::size_t repetitions) {
    std::size_t accumulated = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t r = 0; r < repetitions; ++r) {
        launder(a);
        launder(b);
        switch (f) {
            case function::equal:
                accumulated += nvmeio::equal(a, b, size) ? 1 : 0;
                break;
            case function::first_mismatch:
                accumulated += nvmeio::first_mismatch(a, b, size) == nvmeio::no_mismatch ? 1 : 0;
                break;
            case function::count_mismatches:
                accumulated += nvmeio::count_mismatches(a, b, size).count + 1;
                break;
            case function::memcmp:
                accumulated += std::memcmp(a, b, size) == 0 ? 1 : 0;
                break;
        }
    }
    const auto stop = std::chrono::steady_clock::now();
    sink = sink + accumulated;
    if (accumulated != repetitions) {
        std::fprintf(stderr, "%s found a difference in equal buffers\n",
                     names[static_cast<int>(f)]);
        std::exit(1);
    }
    return std::chrono::duration<double>(stop - start).count();
}

/// Interleaves the functions for `rounds` rounds and prints median GB/s and ratios.
void run_interleaved(const char* label, const std::uint8_t* a, const std::uint8_t* b,
                     std::size_t size, std::size_t repetitions, unsigned rounds) {
    std::vector<double> rates[function_count];
    for (unsigned round = 0; round < rounds; ++round) {
        for (std::size_t i = 0; i < function_count; ++i) {
            const function f = functions[(i + round) % function_count];
            (void)time_function(f, a, b, size, 1);  // settles the caches as f leaves them
            const double seconds = time_function(f, a, b, size, repetitions);
            rates[static_cast<int>(f)].push_back(double(size) * double(repetitions) / seconds /
                                                 1e9);
        }
    }
    const auto& reference = rates[static_cast<int>(function::memcmp)];
    std::printf("\n%s: %zu bytes per buffer, %zu call(s) per measurement, %u rounds\n", label, size,
                repetitions, rounds);
    std::printf("  %-26s %12s %12s %12s %10s\n", "function", "median GB/s", "min GB/s", "max GB/s",
                "/ memcmp");
    for (const function f : functions) {
        const auto& r = rates[static_cast<int>(f)];
        // Ratio per round first: neighbours in time share the machine's load, so this is
        // steadier than a ratio of medians on a busy host.
        std::vector<double> ratios;
        for (std::size_t i = 0; i < r.size(); ++i)
            ratios.push_back(r[i] / reference[i]);
        std::printf("  %-26s %12.2f %12.2f %12.2f %9.2fx\n", names[static_cast<int>(f)],
                    support::median(r), *std::min_element(r.begin(), r.end()),
                    *std::max_element(r.begin(), r.end()), support::median(ratios));
    }
}

int run(int argc, char** argv) {
    const options opts = parse(argc, argv);
    std::printf("compare_bench\n");
    std::printf("  cpu:            %s\n", support::cpu_model().c_str());
    std::printf("  compiler:       %s\n", __VERSION__);
    std::printf("  glibc:          %s\n", gnu_get_libc_version());
    std::printf("  simd_enabled:   %s\n", nvmeio::simd_enabled ? "true" : "false");
#if NVMEIO_DETAIL_COMPARE_USES_XSIMD
    std::printf("  xsimd:          %d.%d.%d, default arch %s, %zu-byte registers\n",
                XSIMD_VERSION_MAJOR, XSIMD_VERSION_MINOR, XSIMD_VERSION_PATCH,
                nvmeio::detail::simd::arch_name(), nvmeio::detail::simd::byte_lanes);
#else
    std::printf("  xsimd:          not used (scalar word-at-a-time path)\n");
#endif
    std::printf("  rounds:         %u (interleaved, median reported)\n", opts.rounds);
    std::printf("  GB:             10^9 bytes of one buffer per second (both are read)\n");

    const auto large_size = static_cast<std::size_t>(opts.size);
    const auto small_size = static_cast<std::size_t>(opts.small_size);
    {
        buffer a(large_size);
        buffer b(large_size);
        fill_equal(bytes(a), bytes(b), large_size);
        const std::string label = "large (hot, " + support::format_size(opts.size) + ")";
        run_interleaved(label.c_str(), bytes(a), bytes(b), large_size, 1, opts.rounds);
    }
    {
        buffer a(small_size);
        buffer b(small_size);
        fill_equal(bytes(a), bytes(b), small_size);
        // Calibrate once with memcmp so every function gets the same number of calls.
        std::size_t repetitions = 16;
        for (;;) {
            const double seconds =
                time_function(function::memcmp, bytes(a), bytes(b), small_size, repetitions);
            if (seconds >= opts.small_seconds / 4) {
                repetitions = std::max<std::size_t>(
                    1, static_cast<std::size_t>(repetitions * opts.small_seconds / seconds));
                break;
            }
            repetitions *= 4;
        }
        const std::string label =
            "small (cache-resident, " + support::format_size(opts.small_size) + ")";
        run_interleaved(label.c_str(), bytes(a), bytes(b), small_size, repetitions, opts.rounds);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("compare_bench", 1, [&] { return run(argc, argv); });
}

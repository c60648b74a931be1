// compare_bench: throughput of nvmeio::equal and nvmeio::count_mismatches against glibc memcmp
// on a large pair of equal buffers (memory bound) and a small, cache-resident pair.
//
// Build: g++ -O2 -std=c++17 -Iinclude bench/compare_bench.cpp -o compare_bench
//        (add -march=native for the host's widest registers)
// The three functions are timed interleaved (A B C A B C ...); reported are the median GB/s
// over the rounds and the median of each round's ratio to memcmp.
// GB = 10^9 bytes of ONE buffer per second; each comparison reads both buffers.

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
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

/// Everything the command line can change.
struct options {
    int rounds = 7;
    std::size_t size_mib = 1024;
    std::size_t small_kib = 64;
    double small_seconds = 0.05;  // target duration of one small-buffer measurement
};

void print_usage(const char* program) {
    std::printf(
        "usage: %s [--rounds N] [--size-mib M] [--small-kib K] [--help]\n"
        "  --rounds N     interleaved rounds per function; the median is reported (default 7)\n"
        "  --size-mib M   size of each large buffer in MiB (default 1024)\n"
        "  --small-kib K  size of each cache-resident buffer in KiB (default 64)\n",
        program);
}

bool parse(int argc, char** argv, options& opts) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--help" || arg == "-h") {
            print_usage(argv[0]);
            std::exit(0);
        } else if (arg == "--rounds" && has_value) {
            opts.rounds = std::atoi(argv[++i]);
        } else if (arg == "--size-mib" && has_value) {
            opts.size_mib = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--small-kib" && has_value) {
            opts.small_kib = std::strtoull(argv[++i], nullptr, 10);
        } else {
            std::fprintf(stderr, "unknown or incomplete argument: %s\n", arg.c_str());
            print_usage(argv[0]);
            return false;
        }
    }
    if (opts.rounds < 1 || opts.size_mib == 0 || opts.small_kib == 0) {
        std::fprintf(stderr, "--rounds, --size-mib and --small-kib must be positive\n");
        return false;
    }
    return true;
}

std::string cpu_model() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            return colon == std::string::npos ? line : line.substr(colon + 2);
        }
    }
    return "unknown";
}

struct free_deleter {
    void operator()(void* p) const noexcept { std::free(p); }
};
using buffer = std::unique_ptr<std::uint8_t, free_deleter>;

/// A page-aligned buffer, like the ones nvmeio reads into with O_DIRECT.
buffer allocate(std::size_t size) {
    const std::size_t rounded = (size + 4095) / 4096 * 4096;
    auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(4096, rounded));
    if (p == nullptr) {
        std::fprintf(stderr, "cannot allocate %zu bytes\n", size);
        std::exit(1);
    }
    return buffer(p);
}

/// Fills `a` with random bytes and copies it into `b`: writes every page of both (hot).
void fill_equal(std::uint8_t* a, std::uint8_t* b, std::size_t size) {
    std::mt19937_64 random(42);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        const std::uint64_t word = random();
        std::memcpy(a + i, &word, 8);
    }
    for (; i < size; ++i)
        a[i] = static_cast<std::uint8_t>(random());
    std::memcpy(b, a, size);
}

/// Keeps the compiler from proving the inputs unchanged between repetitions, so it cannot
/// hoist or merge the (pure) comparisons.
template <class T>
inline void launder(T*& p) {
    asm volatile("" : "+r"(p) : : "memory");
}

volatile std::size_t sink;  // every result ends up here

enum class function { equal, count_mismatches, memcmp };
constexpr function functions[] = {function::equal, function::count_mismatches, function::memcmp};
constexpr const char* names[] = {"nvmeio::equal", "nvmeio::count_mismatches", "memcmp == 0"};

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

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t mid = values.size() / 2;
    return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// Interleaves the three functions for `rounds` rounds and prints median GB/s and ratios.
void run(const char* label, const std::uint8_t* a, const std::uint8_t* b, std::size_t size,
         std::size_t repetitions, int rounds) {
    std::vector<double> rates[3];
    for (int round = 0; round < rounds; ++round) {
        for (const function f : functions) {
            const double seconds = time_function(f, a, b, size, repetitions);
            rates[static_cast<int>(f)].push_back(double(size) * double(repetitions) / seconds /
                                                 1e9);
        }
    }
    const auto& reference = rates[static_cast<int>(function::memcmp)];
    std::printf("\n%s: %zu bytes per buffer, %zu call(s) per measurement, %d rounds\n", label, size,
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
        std::printf("  %-26s %12.2f %12.2f %12.2f %9.2fx\n", names[static_cast<int>(f)], median(r),
                    *std::min_element(r.begin(), r.end()), *std::max_element(r.begin(), r.end()),
                    median(ratios));
    }
}

}  // namespace

int main(int argc, char** argv) {
    options opts;
    if (!parse(argc, argv, opts)) return 2;

    std::printf("compare_bench\n");
    std::printf("  cpu:            %s\n", cpu_model().c_str());
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
    std::printf("  rounds:         %d (interleaved, median reported)\n", opts.rounds);
    std::printf("  GB:             10^9 bytes of one buffer per second (both are read)\n");

    const std::size_t large_size = opts.size_mib << 20;
    const std::size_t small_size = opts.small_kib << 10;
    {
        buffer a = allocate(large_size);
        buffer b = allocate(large_size);
        fill_equal(a.get(), b.get(), large_size);
        const std::string label = "large (hot, " + std::to_string(opts.size_mib) + " MiB)";
        run(label.c_str(), a.get(), b.get(), large_size, 1, opts.rounds);
    }
    {
        buffer a = allocate(small_size);
        buffer b = allocate(small_size);
        fill_equal(a.get(), b.get(), small_size);
        // Calibrate once with memcmp so every function gets the same number of calls.
        std::size_t repetitions = 16;
        for (;;) {
            const double seconds =
                time_function(function::memcmp, a.get(), b.get(), small_size, repetitions);
            if (seconds >= opts.small_seconds / 4) {
                repetitions = std::max<std::size_t>(
                    1, static_cast<std::size_t>(repetitions * opts.small_seconds / seconds));
                break;
            }
            repetitions *= 4;
        }
        const std::string label =
            "small (cache-resident, " + std::to_string(opts.small_kib) + " KiB)";
        run(label.c_str(), a.get(), b.get(), small_size, repetitions, opts.rounds);
    }
    return 0;
}

#pragma once
// Shared by parallel_bench and batch_bench: arguments, machine description, page-cache drops,
// medians.

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace scaling_bench {

// --key=value arguments with defaults; unknown keys are an error.
class arguments {
  public:
    arguments(int argc, char** argv, std::map<std::string, std::string> defaults)
        : values_(std::move(defaults)) {
        for (int i = 1; i < argc; ++i) {
            std::string a = argv[i];
            const auto eq = a.find('=');
            if (a.rfind("--", 0) != 0 || eq == std::string::npos) usage(a);
            const std::string key = a.substr(2, eq - 2);
            if (values_.count(key) == 0) usage(a);
            values_[key] = a.substr(eq + 1);
        }
    }
    std::string text(const std::string& key) const { return values_.at(key); }
    // Accepts K, M, G suffixes (powers of 1024).
    std::uint64_t bytes(const std::string& key) const {
        const std::string v = values_.at(key);
        char* end = nullptr;
        std::uint64_t n = std::strtoull(v.c_str(), &end, 10);
        switch (*end) {
            case 'G':
                n <<= 30;
                break;
            case 'M':
                n <<= 20;
                break;
            case 'K':
                n <<= 10;
                break;
            default:
                break;
        }
        return n;
    }
    unsigned number(const std::string& key) const {
        return static_cast<unsigned>(std::strtoul(values_.at(key).c_str(), nullptr, 10));
    }
    void print() const {
        std::printf("parameters:");
        for (const auto& [k, v] : values_)
            std::printf(" --%s=%s", k.c_str(), v.c_str());
        std::printf("\n");
    }

  private:
    [[noreturn]] void usage(const std::string& bad) const {
        std::fprintf(stderr, "unknown argument '%s'; accepted (with defaults):", bad.c_str());
        for (const auto& [k, v] : values_)
            std::fprintf(stderr, " --%s=%s", k.c_str(), v.c_str());
        std::fprintf(stderr, "\n");
        std::exit(2);
    }
    std::map<std::string, std::string> values_;
};

inline void print_machine(const std::string& dir) {
    utsname u{};
    ::uname(&u);
    std::string cpu = "unknown";
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);) {
        if (line.rfind("model name", 0) == 0) {
            cpu = line.substr(line.find(':') + 2);
            break;
        }
    }
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGE_SIZE);
    std::printf("machine: %s %s, cpu: %s x %u, memory: %.1f GiB, scratch dir: %s\n", u.sysname,
                u.release, cpu.c_str(), std::thread::hardware_concurrency(),
                static_cast<double>(pages) * static_cast<double>(page) / (1 << 30), dir.c_str());
}

// Writes back dirty pages and drops the page cache; false when not allowed (not root).
inline bool drop_page_cache() {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    if (!drop) return false;
    drop << "1" << std::flush;
    return static_cast<bool>(drop);
}

inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 != 0 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <class F>
double seconds_of(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace scaling_bench

#pragma once
// What the comparing examples (load_model, kv_offload, swap_optimizer) share: cold or warm runs
// (the page cache dropped before every cold run, or the run refused), samples per method taken
// in interleaved rounds, and the report: medians, spread and ratios against a reference method,
// with the machine and the parameters printed first. Medians and the cache drop come from the
// tool-support layer (support/).

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/machine.hpp"
#include "support/stats.hpp"

namespace example {

/// Seconds since an arbitrary point, for timing a run.
[[nodiscard]] inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/// Cold (the page cache dropped before every run) or warm runs, as --warm chose.
class run_temperature {
  public:
    explicit run_temperature(bool warm) : warm_(warm) {}

    /// Drops the page cache before a cold run; throws std::runtime_error saying why and
    /// offering --warm when it cannot, so that no run is called cold that was not.
    void before_run() const {
        if (warm_) return;
        std::string why;
        if (!nvmeio::support::drop_page_cache(why)) {
            throw std::runtime_error("cannot drop the page cache before a cold run (" + why +
                                     "); run as root, or pass --warm to measure warm runs");
        }
    }
    /// "cold (page cache dropped before every run)" or "WARM (...)".
    [[nodiscard]] const char* describe() const {
        return warm_ ? "WARM (--warm: the page cache was not dropped; reads may come from memory)"
                     : "cold (page cache dropped before every run)";
    }
    [[nodiscard]] bool warm() const { return warm_; }

  private:
    bool warm_;
};

/// The samples of one method over the interleaved rounds.
struct method_samples {
    std::string name;
    std::vector<double> seconds;      ///< Wall time of each run.
    std::vector<double> cpu_seconds;  ///< User + system CPU of the process during each run.

    /// Records one run that started at `start_wall` with `start_cpu` CPU seconds used.
    void record(double start_wall, double start_cpu) {
        seconds.push_back(now_seconds() - start_wall);
        cpu_seconds.push_back(nvmeio::support::process_cpu_times().total() - start_cpu);
    }
};

/// Prints the machine (with the device under `path`, or under its folder when `path` does not
/// exist yet), the target and the run temperature.
inline void print_setting(const std::string& program, const std::string& path,
                          const run_temperature& temperature) {
    struct stat st {};
    std::string where = path;
    if (::stat(path.c_str(), &st) != 0) {
        const std::size_t slash = path.find_last_of('/');
        where = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    }
    std::cout << program << " (nvmeio " << nvmeio::support::nvmeio_version() << ") at "
              << nvmeio::support::utc_now()
              << "\nmachine: " << nvmeio::support::describe_machine(where)
              << "\nruns: " << temperature.describe() << "\n";
}

/// Prints one line per method: median wall time, GB/s for `bytes` (10^9 B/s), median CPU time,
/// spread, and the median time relative to `reference` (a method's index).
inline void print_comparison(const std::vector<method_samples>& methods, std::uint64_t bytes,
                             std::size_t reference) {
    if (methods.empty()) return;
    const double reference_time = nvmeio::support::median(methods[reference].seconds);
    std::printf("\n%-28s %5s %11s %9s %9s %8s  %s\n", "method", "runs", "median s", "GB/s", "CPU s",
                "spread", ("time vs " + methods[reference].name).c_str());
    for (const method_samples& m : methods) {
        const nvmeio::support::summary_stats wall = nvmeio::support::summarize(m.seconds);
        const double cpu = nvmeio::support::median(m.cpu_seconds);
        std::printf("%-28s %5zu %11.4f %9.3f %9.3f %7.0f%%  %.2fx\n", m.name.c_str(), wall.count,
                    wall.median,
                    wall.median > 0 ? static_cast<double>(bytes) / wall.median / 1e9 : 0, cpu,
                    wall.spread() * 100, reference_time > 0 ? wall.median / reference_time : 0);
    }
}

}  // namespace example

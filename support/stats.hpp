#pragma once
/// \file support/stats.hpp
/// Medians of repeated measurements, as every benchmark, tool and example reports them, and the
/// stopwatch they are taken with.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

namespace nvmeio::support {

/// Median, extremes and relative spread of repeated measurements.
struct summary_stats {
    std::size_t count = 0;  ///< Number of values.
    double median = 0;      ///< Middle value (mean of the two middle ones for an even count).
    double min = 0;         ///< Smallest value.
    double max = 0;         ///< Largest value.
    /// (max - min) / median: how far apart the repeats landed, 0 for a single value.
    [[nodiscard]] double spread() const noexcept { return median > 0 ? (max - min) / median : 0; }
};

/// Summarises `values` (taken by value, then sorted); all zero for no values.
[[nodiscard]] inline summary_stats summarize(std::vector<double> values) {
    summary_stats s;
    if (values.empty()) return s;
    std::sort(values.begin(), values.end());
    s.count = values.size();
    s.min = values.front();
    s.max = values.back();
    const std::size_t mid = values.size() / 2;
    s.median = values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
    return s;
}

/// The median of `values` (0 for none).
[[nodiscard]] inline double median(std::vector<double> values) {
    return summarize(std::move(values)).median;
}

/// Seconds `f()` takes on the steady clock.
template <class F>
[[nodiscard]] double seconds_of(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    std::forward<F>(f)();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace nvmeio::support

#pragma once
/// \file perf.hpp
/// What a transfer measured: latency statistics and times (in microseconds), throughput.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Summary of a set of latency samples, in microseconds.
struct latency_stats {
    std::uint64_t count = 0;  ///< Number of samples.
    double min_us = 0;        ///< Smallest sample.
    double avg_us = 0;        ///< Arithmetic mean.
    double max_us = 0;        ///< Largest sample.
    double p50_us = 0;        ///< Median (nearest rank).
    double p99_us = 0;        ///< 99th percentile (nearest rank).

    /// Summarises `samples_us`, which it sorts in place.
    [[nodiscard]] static latency_stats from_samples(std::vector<double>& samples_us) {
        latency_stats s;
        if (samples_us.empty()) return s;
        std::sort(samples_us.begin(), samples_us.end());
        s.count = samples_us.size();
        s.min_us = samples_us.front();
        s.max_us = samples_us.back();
        double sum = 0;
        for (double v : samples_us)
            sum += v;
        s.avg_us = sum / static_cast<double>(s.count);
        s.p50_us = percentile(samples_us, 50);
        s.p99_us = percentile(samples_us, 99);
        return s;
    }

  private:
    // Nearest-rank percentile of sorted, non-empty samples.
    static double percentile(const std::vector<double>& sorted, unsigned pct) {
        std::size_t rank = (sorted.size() * pct + 99) / 100;  // ceil(n * p / 100), 1-based
        if (rank == 0) rank = 1;
        return sorted[rank - 1];
    }
};

/// What one transfer measured. `submit` has one sample per submission call: the call's duration.
/// `completion` has one sample per request: from the start of the call that submitted it to the
/// moment it was reaped.
struct transfer_perf {
    latency_stats submit;             ///< Submission-call latency.
    latency_stats completion;         ///< Per-request completion latency.
    double elapsed_us = 0;            ///< End to end, validation and setup excluded.
    std::uint64_t bytes = 0;          ///< Bytes moved.
    std::uint64_t requests = 0;       ///< Requests completed, resubmissions included.
    std::uint64_t resubmissions = 0;  ///< Requests sent again for the rest of a short result.

    /// Throughput in GB/s, GB = 10^9 bytes.
    [[nodiscard]] double gb_per_s() const noexcept {
        return elapsed_us > 0 ? static_cast<double>(bytes) / elapsed_us / 1e3 : 0.0;
    }
    /// Throughput in GiB/s, GiB = 2^30 bytes.
    [[nodiscard]] double gib_per_s() const noexcept {
        return elapsed_us > 0 ? static_cast<double>(bytes) / (elapsed_us * 1e-6) / 1073741824.0
                              : 0.0;
    }
};

/// One labelled row of a perf table.
struct perf_row {
    std::string label;   ///< What was measured, e.g. "overlapped/block qd=32 bs=1M".
    transfer_perf perf;  ///< The measurement.
};

namespace detail {
inline std::string format(const char* pattern, double a) {
    char text[64];
    std::snprintf(text, sizeof text, pattern, a);
    return text;
}
inline std::string json_latency(const latency_stats& s) {
    return "{\"count\": " + std::to_string(s.count) + ", \"min_us\": " + format("%.3f", s.min_us) +
           ", \"avg_us\": " + format("%.3f", s.avg_us) +
           ", \"max_us\": " + format("%.3f", s.max_us) +
           ", \"p50_us\": " + format("%.3f", s.p50_us) +
           ", \"p99_us\": " + format("%.3f", s.p99_us) + "}";
}
// Latency statistics of several parts taken together: exact count, min, max and mean; the
// percentiles are the largest of the parts' (the samples themselves are gone).
inline latency_stats merge_latency(const std::vector<const latency_stats*>& parts) {
    latency_stats out;
    double sum = 0;
    for (const latency_stats* s : parts) {
        if (s->count == 0) continue;
        out.min_us = out.count == 0 ? s->min_us : std::min(out.min_us, s->min_us);
        out.max_us = std::max(out.max_us, s->max_us);
        out.p50_us = std::max(out.p50_us, s->p50_us);
        out.p99_us = std::max(out.p99_us, s->p99_us);
        sum += s->avg_us * static_cast<double>(s->count);
        out.count += s->count;
    }
    if (out.count != 0) out.avg_us = sum / static_cast<double>(out.count);
    return out;
}

}  // namespace detail

/// The measurement as a JSON object (GB = 10^9 bytes).
[[nodiscard]] inline std::string to_json(const transfer_perf& p) {
    return "{\"bytes\": " + std::to_string(p.bytes) +
           ", \"elapsed_us\": " + detail::format("%.3f", p.elapsed_us) +
           ", \"gb_per_s\": " + detail::format("%.4f", p.gb_per_s()) +
           ", \"gib_per_s\": " + detail::format("%.4f", p.gib_per_s()) +
           ", \"requests\": " + std::to_string(p.requests) +
           ", \"resubmissions\": " + std::to_string(p.resubmissions) +
           ", \"submit\": " + detail::json_latency(p.submit) +
           ", \"completion\": " + detail::json_latency(p.completion) + "}";
}

/// Writes rows as an aligned human-readable table: one line per row, latencies in microseconds.
inline std::ostream& print_table(std::ostream& out, const std::vector<perf_row>& rows) {
    std::size_t width = 5;
    for (const perf_row& r : rows)
        width = std::max(width, r.label.size());
    char line[512];
    std::snprintf(line, sizeof line, "%-*s %10s %9s %8s | %-33s | %-33s\n", static_cast<int>(width),
                  "label", "MiB", "GB/s", "ms", "submit us  min/avg/max p99",
                  "complete us  min/avg/max p99");
    out << line;
    for (const perf_row& r : rows) {
        const transfer_perf& p = r.perf;
        std::snprintf(
            line, sizeof line,
            "%-*s %10.1f %9.3f %8.1f | %7.1f %7.1f %8.1f %8.1f | %7.1f %7.1f %8.1f %8.1f\n",
            static_cast<int>(width), r.label.c_str(), static_cast<double>(p.bytes) / 1048576.0,
            p.gb_per_s(), p.elapsed_us / 1e3, p.submit.min_us, p.submit.avg_us, p.submit.max_us,
            p.submit.p99_us, p.completion.min_us, p.completion.avg_us, p.completion.max_us,
            p.completion.p99_us);
        out << line;
    }
    out << "(GB/s: 10^9 bytes per second)\n";
    return out;
}

/// Writes one measurement as a one-row table.
inline std::ostream& operator<<(std::ostream& out, const transfer_perf& p) {
    return print_table(out, {perf_row{"transfer", p}});
}

NVMEIO_END_NAMESPACE

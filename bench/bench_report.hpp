#pragma once
/// \file bench_report.hpp
/// nvmeio-bench's plan and outcome, and its report: a table or JSON.

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "run.hpp"
#include "support/json.hpp"
#include "support/machine.hpp"
#include "support/stats.hpp"

namespace nvmeio::bench {

/// Everything nvmeio-bench was asked to do.
struct bench_plan {
    run_config config;            ///< The configuration measured.
    common_flags flags;           ///< Target, cache, buffer, device guard.
    support::target_info target;  ///< What is at the path.
    unsigned loops = 3;           ///< Measured passes.
    unsigned warmup = 1;          ///< Unmeasured passes.
    bool validate = false;        ///< verify_read after each read pass.
    bool json = false;            ///< JSON instead of a table.
};

/// What it measured.
struct bench_outcome {
    bool created = false;            ///< The file was created with the pattern.
    std::string cache;               ///< cold, warm or n/a.
    std::string validation;          ///< passed, not requested, or failed: ...
    std::vector<run_result> passes;  ///< One per measured pass.
};

/// Every parameter of a configuration.
[[nodiscard]] inline nlohmann::json config_json(const run_config& c) {
    return {{"op", to_string(c.op)},
            {"file", c.path},
            {"size", c.size},
            {"block_size", c.block_size},
            {"queue_depth", c.queue_depth},
            {"strategy", to_string(c.strategy)},
            {"overlap_events", c.strategy == strategy_kind::overlapped},
            {"submit", support::name_of(support::submit_names(), c.submit)},
            {"single_submit", c.submit == submit_mode::single},
            {"threads", c.threads},
            {"backend", support::name_of(support::backend_names(), c.backend)},
            {"spin_us", c.spin.count()},
            {"pin_once", c.pin_once},
            {"single_issuer", c.single_issuer},
            {"direct_io", c.direct == direct_io::on},
            {"io", to_string(c.direct)}};
}

inline void report_json(std::ostream& out, const bench_plan& p, const bench_outcome& o,
                        const support::summary_stats& rate, const support::summary_stats& cpu) {
    nlohmann::json doc;
    doc["tool"] = "nvmeio-bench";
    doc["nvmeio_version"] = support::nvmeio_version();
    doc["machine"] = support::describe_machine(p.config.path);
    doc["config"] = config_json(p.config);
    doc["target_kind"] = to_string(p.target.kind);
    doc["file_created"] = o.created;
    doc["cache"] = o.cache;
    doc["buffer"] = {{"fresh", p.flags.buffer().fresh},
                     {"huge_pages", p.flags.buffer().huge_pages},
                     {"ring", p.flags.ring}};
    doc["process"] = {{"peak_rss_bytes", support::peak_resident_bytes()}};
    doc["warmup"] = p.warmup;
    doc["loops"] = nlohmann::json::array();
    for (const run_result& r : o.passes) {
        nlohmann::json pass = support::perf_json(r.perf);
        pass["cpu_seconds"] = r.cpu_seconds;
        pass["cpu_seconds_per_gib"] = r.cpu_seconds_per_gib();
        doc["loops"].push_back(pass);
    }
    doc["gb_per_s"] = support::stats_json(rate);
    doc["cpu_seconds_per_gib"] = support::stats_json(cpu);
    doc["validation"] = o.validation;
    out << doc.dump(2) << "\n";
}

inline void report_table(std::ostream& out, const bench_plan& p, const bench_outcome& o,
                         const support::summary_stats& rate, const support::summary_stats& cpu) {
    const run_config& c = p.config;
    const buffer_choice buffer = p.flags.buffer();
    char line[512];
    out << "nvmeio-bench  machine: " << support::describe_machine(c.path) << "\n";
    std::snprintf(
        line, sizeof line,
        "%s %s (%s), %s %llu bytes per pass, block %s, queue depth %u, %s/%s, %u "
        "thread(s), backend %s, spin %lld us, direct_io %s, %u warm-up + %u measured passes, "
        "cache %s%s\n",
        to_string(p.target.kind), c.path.c_str(), o.created ? "created" : "existing",
        to_string(c.op), static_cast<unsigned long long>(c.size),
        support::format_size(c.block_size).c_str(), c.queue_depth, to_string(c.strategy),
        support::name_of(support::submit_names(), c.submit).c_str(), c.threads,
        support::name_of(support::backend_names(), c.backend).c_str(),
        static_cast<long long>(c.spin.count()), to_string(c.direct), p.warmup, p.loops,
        o.cache.c_str(), o.cache == "cold" ? " (page cache dropped before every pass)" : "");
    out << line << "buffer: "
        << (p.flags.ring   ? "a ring of threads x queue depth x block size bytes (--ring)"
            : buffer.fresh ? "fresh (first pass faults its pages in)"
                           : "pre-touched")
        << ", huge pages " << (buffer.huge_pages && !p.flags.ring ? "on" : "off") << "\n";
    std::snprintf(line, sizeof line, "%-6s %9s %9s %10s | %12s %12s | %12s %12s\n", "pass", "GB/s",
                  "ms", "CPU s/GiB", "submit avg", "submit p99", "complete avg", "complete p99");
    out << line;
    for (std::size_t i = 0; i < o.passes.size(); ++i) {
        const transfer_perf& f = o.passes[i].perf;
        std::snprintf(line, sizeof line,
                      "%-6zu %9.3f %9.1f %10.4f | %12.1f %12.1f | %12.1f %12.1f\n", i + 1,
                      f.gb_per_s(), f.elapsed_us / 1e3, o.passes[i].cpu_seconds_per_gib(),
                      f.submit.avg_us, f.submit.p99_us, f.completion.avg_us, f.completion.p99_us);
        out << line;
    }
    std::snprintf(line, sizeof line,
                  "median %9.3f GB/s (min %.3f, max %.3f, spread %.1f%%), CPU %.4f s/GiB\n",
                  rate.median, rate.min, rate.max, 100 * rate.spread(), cpu.median);
    out << line << "validation: " << o.validation
        << "\n(GB/s: 10^9 bytes per second; latencies in microseconds, percentiles the largest "
           "of the threads')\n";
}

/// Prints the outcome as `p.json` asks.
inline void report(std::ostream& out, const bench_plan& p, const bench_outcome& o) {
    std::vector<double> rates, cpus;
    for (const run_result& r : o.passes) {
        rates.push_back(r.perf.gb_per_s());
        cpus.push_back(r.cpu_seconds_per_gib());
    }
    const support::summary_stats rate = support::summarize(rates);
    const support::summary_stats cpu = support::summarize(cpus);
    if (p.json) {
        report_json(out, p, o, rate, cpu);
    } else {
        report_table(out, p, o, rate, cpu);
    }
}

}  // namespace nvmeio::bench

#pragma once
/// \file bench_json.hpp
/// JSON views of the tools' configurations and results (nlohmann::json).

#include <nlohmann/json.hpp>

#include "bench_common.hpp"

namespace nvmeio::bench {

/// Every parameter of a configuration.
[[nodiscard]] inline nlohmann::json config_json(const run_config& c) {
    return {{"op", to_string(c.op)},
            {"file", c.path},
            {"size", c.size},
            {"block_size", c.block_size},
            {"queue_depth", c.queue_depth},
            {"strategy", to_string(c.strategy)},
            {"overlap_events", c.strategy == strategy_kind::overlapped},
            {"submit", to_string(c.submit)},
            {"single_submit", c.submit == submit_mode::single},
            {"threads", c.threads},
            {"backend", c.backend},
            {"direct_io", true}};
}

/// One pass: the library's perf record plus the CPU figures.
[[nodiscard]] inline nlohmann::json result_json(const run_result& r) {
    nlohmann::json j = nlohmann::json::parse(to_json(r.perf));
    j["cpu_seconds"] = r.cpu_seconds;
    j["cpu_seconds_per_gib"] = r.cpu_seconds_per_gib();
    return j;
}

/// Median, extremes and spread.
[[nodiscard]] inline nlohmann::json stats_json(const summary_stats& s) {
    return {{"count", s.count},
            {"median", s.median},
            {"min", s.min},
            {"max", s.max},
            {"spread", s.spread()}};
}

}  // namespace nvmeio::bench

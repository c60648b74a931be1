#pragma once
/// \file support/json.hpp
/// JSON (nlohmann-json) views of what the tools report: statistics and the library's perf
/// record. Every JSON a tool writes or reads goes through nlohmann-json.

#include <nlohmann/json.hpp>
#include <nvmeio/perf.hpp>

#include "support/stats.hpp"

namespace nvmeio::support {

/// {"count", "median", "min", "max", "spread"}.
[[nodiscard]] inline nlohmann::json stats_json(const summary_stats& s) {
    return {{"count", s.count},
            {"median", s.median},
            {"min", s.min},
            {"max", s.max},
            {"spread", s.spread()}};
}

/// The library's perf record (nvmeio::to_json) as a JSON value.
[[nodiscard]] inline nlohmann::json perf_json(const transfer_perf& perf) {
    return nlohmann::json::parse(to_json(perf));
}

}  // namespace nvmeio::support

#pragma once
/// \file tune_report.hpp
/// nvmeio-tune's report: runs.csv (every run), summary.json (medians per point, fio ratios, the
/// best points with DeepSpeed "aio" blocks), a heat map per operation and a table on stdout.

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "fio.hpp"
#include "heatmap_svg.hpp"
#include "support/json.hpp"
#include "support/machine.hpp"
#include "support/stats.hpp"
#include "tune_plan.hpp"
#include "tune_run.hpp"

namespace nvmeio::bench {

/// What identifies a point of the sweep (without the repeat).
using point_key =
    std::tuple<int, std::string, std::size_t, unsigned, int, int, unsigned, long long, int, int>;

/// The medians of one point.
struct point_summary {
    run_record first;                    ///< Its first run: the parameters.
    support::summary_stats rate, cpu;    ///< GB/s and CPU s/GiB over its runs.
    support::summary_stats process_cpu;  ///< The whole process's CPU s/GiB (run_record).
};

/// Points and their summaries, in key order.
using point_map = std::map<point_key, point_summary>;

[[nodiscard]] inline point_key key_of(const run_record& r) {
    const bool nvmeio = r.method == "nvmeio";
    return {static_cast<int>(r.config.op),
            r.method,
            r.config.block_size,
            r.config.queue_depth,
            nvmeio ? r.config.strategy == strategy_kind::overlapped : -1,
            nvmeio ? r.config.submit == submit_mode::single : -1,
            r.config.threads,
            nvmeio ? static_cast<long long>(r.config.spin.count()) : -1,
            nvmeio ? int{r.config.pin_once} : -1,
            nvmeio ? int{r.config.single_issuer} : -1};
}

[[nodiscard]] inline point_map summarize_points(const std::vector<run_record>& records) {
    std::map<point_key, std::vector<const run_record*>> by_point;
    for (const run_record& r : records)
        by_point[key_of(r)].push_back(&r);
    point_map points;
    for (const auto& [key, runs] : by_point) {
        std::vector<double> rates, cpus, process_cpus;
        for (const run_record* r : runs) {
            rates.push_back(r->gb_per_s);
            cpus.push_back(r->cpu_per_gib);
            if (r->process_cpu_per_gib >= 0) process_cpus.push_back(r->process_cpu_per_gib);
        }
        points[key] = {*runs.front(), support::summarize(rates), support::summarize(cpus),
                       support::summarize(process_cpus)};
    }
    return points;
}

/// True for the runs of fio, as it comes or at its best.
[[nodiscard]] inline bool is_fio(const std::string& method) {
    return method == "fio" || method == "fio-best";
}

/// fio's summary (`setup`) at an nvmeio point's block size, depth and threads, or null.
[[nodiscard]] inline const point_summary* fio_of(const point_map& points, const run_record& r,
                                                 fio_setup setup = fio_setup::plain) {
    point_key key = key_of(r);
    std::get<1>(key) = fio_method(setup);
    std::get<4>(key) = -1;
    std::get<5>(key) = -1;
    std::get<7>(key) = -1;
    std::get<8>(key) = -1;
    std::get<9>(key) = -1;
    const auto it = points.find(key);
    return it == points.end() ? nullptr : &it->second;
}

inline void write_csv(const std::string& path, const std::vector<run_record>& records) {
    std::ofstream csv(path);
    csv << "index,repeat,op,method,backend,block_size,queue_depth,overlap_events,single_submit,"
           "threads,cache,bytes,elapsed_us,gb_per_s,cpu_seconds_per_gib,submit_avg_us,"
           "submit_p99_us,complete_avg_us,complete_p99_us,spin_us,process_cpu_seconds_per_gib,"
           "pin_once,single_issuer\n";
    for (const run_record& r : records) {
        const bool nvmeio = r.method == "nvmeio";
        const bool queued = nvmeio || is_fio(r.method);
        char numbers[256];
        std::snprintf(numbers, sizeof numbers, "%.1f,%.4f,%.5f,%.2f,%.2f,%.2f,%.2f", r.elapsed_us,
                      r.gb_per_s, r.cpu_per_gib, r.submit.avg_us, r.submit.p99_us,
                      r.completion.avg_us, r.completion.p99_us);
        char process_cpu[32] = "";  // empty when unknown
        if (r.process_cpu_per_gib >= 0)
            std::snprintf(process_cpu, sizeof process_cpu, "%.5f", r.process_cpu_per_gib);
        csv << r.index << "," << r.repeat << "," << to_string(r.config.op) << "," << r.method << ","
            << (queued ? support::name_of(support::backend_names(), r.config.backend) : "") << ","
            << r.config.block_size << "," << (queued ? std::to_string(r.config.queue_depth) : "")
            << ","
            << (nvmeio ? r.config.strategy == strategy_kind::overlapped ? "true" : "false" : "")
            << "," << (nvmeio ? r.config.submit == submit_mode::single ? "true" : "false" : "")
            << "," << r.config.threads << "," << r.cache << "," << r.bytes << "," << numbers << ","
            << (nvmeio ? std::to_string(r.config.spin.count()) : "") << "," << process_cpu << ","
            << (nvmeio ? r.config.pin_once ? "true" : "false" : "") << ","
            << (nvmeio ? r.config.single_issuer ? "true" : "false" : "") << "\n";
    }
    if (!csv) throw std::runtime_error("cannot write '" + path + "'");
}

/// DeepSpeed's "aio" block for a point.
[[nodiscard]] inline nlohmann::json aio_block(const run_record& r) {
    return {{"block_size", r.config.block_size},
            {"queue_depth", r.config.queue_depth},
            {"intra_op_parallelism", r.config.threads},
            {"single_submit", r.config.submit == submit_mode::single},
            {"overlap_events", r.config.strategy == strategy_kind::overlapped}};
}

[[nodiscard]] inline nlohmann::json point_json(const point_map& points, const point_summary& s) {
    const run_record& r = s.first;
    nlohmann::json j{{"op", to_string(r.config.op)},
                     {"method", r.method},
                     {"block_size", r.config.block_size},
                     {"threads", r.config.threads},
                     {"cache", r.cache},
                     {"gb_per_s", support::stats_json(s.rate)},
                     {"cpu_seconds_per_gib", support::stats_json(s.cpu)}};
    if (r.method != "nvmeio") return j;
    j["queue_depth"] = r.config.queue_depth;
    j["backend"] = support::name_of(support::backend_names(), r.config.backend);
    j["overlap_events"] = r.config.strategy == strategy_kind::overlapped;
    j["single_submit"] = r.config.submit == submit_mode::single;
    j["spin_us"] = r.config.spin.count();
    j["pin_once"] = r.config.pin_once;
    j["single_issuer"] = r.config.single_issuer;
    // Beside each fio setup that ran at this point: its figures and nvmeio's ratios to them
    // ("fio_..." and "..._to_fio", or "fio_best_..." and "..._to_fio_best").
    for (const fio_setup setup : {fio_setup::plain, fio_setup::best}) {
        const point_summary* f = fio_of(points, r, setup);
        if (f == nullptr) continue;
        const std::string fio = setup == fio_setup::best ? "fio_best" : "fio";
        j[fio + "_gb_per_s"] = support::stats_json(f->rate);
        j[fio + "_cpu_seconds_per_gib"] = support::stats_json(f->cpu);
        j["ratio_to_" + fio] = f->rate.median > 0 ? s.rate.median / f->rate.median : 0;
        j["cpu_ratio_to_" + fio] = f->cpu.median > 0 ? s.cpu.median / f->cpu.median : 0;
        if (f->process_cpu.count > 0) {
            j[fio + "_process_cpu_seconds_per_gib"] = support::stats_json(f->process_cpu);
            j["process_cpu_ratio_to_" + fio] =
                f->process_cpu.median > 0 ? s.process_cpu.median / f->process_cpu.median : 0;
        }
    }
    return j;
}

/// The best nvmeio point per operation (highest median; lower CPU breaks ties), and for both
/// together the configuration with the best harmonic mean of its read and write medians.
[[nodiscard]] inline nlohmann::json best_json(const point_map& points) {
    std::map<std::string, const point_summary*> best;
    for (const auto& [key, s] : points) {
        if (s.first.method != "nvmeio") continue;
        const point_summary*& b = best[to_string(s.first.config.op)];
        if (b == nullptr || b->rate.median < s.rate.median ||
            (b->rate.median == s.rate.median && s.cpu.median < b->cpu.median))
            b = &s;
    }
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [op, s] : best) {
        out[op] = {{"gb_per_s", s->rate.median},
                   {"cpu_seconds_per_gib", s->cpu.median},
                   {"repeats", s->rate.count},
                   {"spread", s->rate.spread()},
                   {"spin_us", s->first.config.spin.count()},
                   {"pin_once", s->first.config.pin_once},
                   {"single_issuer", s->first.config.single_issuer},
                   {"aio", aio_block(s->first)}};
    }
    const point_summary* read = nullptr;
    const point_summary* write = nullptr;
    double winner = -1;
    for (const auto& [key, s] : points) {
        if (s.first.method != "nvmeio" || s.first.config.op != operation::read) continue;
        point_key other = key;
        std::get<0>(other) = static_cast<int>(operation::write);
        const auto it = points.find(other);
        if (it == points.end()) continue;
        const double r = s.rate.median, w = it->second.rate.median;
        const double combined = r > 0 && w > 0 ? 2 / (1 / r + 1 / w) : 0;
        if (combined > winner) {
            winner = combined;
            read = &s;
            write = &it->second;
        }
    }
    if (read != nullptr) {
        out["both"] = {{"combined_gb_per_s", winner},
                       {"read_gb_per_s", read->rate.median},
                       {"write_gb_per_s", write->rate.median},
                       {"combined_is", "harmonic mean of read and write medians"},
                       {"spin_us", read->first.config.spin.count()},
                       {"pin_once", read->first.config.pin_once},
                       {"single_issuer", read->first.config.single_issuer},
                       {"aio", aio_block(read->first)}};
    }
    return out;
}

[[nodiscard]] inline nlohmann::json parameters_json(const tune_plan& p, const tune_outcome& o) {
    std::vector<std::string> ops;
    for (const operation op : p.ops)
        ops.emplace_back(to_string(op));
    const buffer_choice buffer = p.flags.buffer();
    return {{"file", p.flags.path},
            {"target_kind", to_string(p.target.kind)},
            {"file_created", o.created},
            {"size", p.size},
            {"ops", ops},
            {"block_sizes", p.block_sizes},
            {"queue_depths", p.depths},
            {"overlap_events", support::name_of(switch_axis_names(), p.overlap)},
            {"single_submit", support::name_of(switch_axis_names(), p.single_submit)},
            {"threads", p.threads},
            {"spins_us", p.spins},
            {"pin_once", support::name_of(switch_axis_names(), p.pin_once)},
            {"single_issuer", support::name_of(switch_axis_names(), p.single_issuer)},
            {"repeats", p.repeats},
            {"budget_seconds", p.budget},
            {"pause_seconds", p.pause},
            {"backend", support::name_of(support::backend_names(), p.backend)},
            {"direct_io", true},
            {"fresh_buffer", buffer.fresh},
            {"huge_pages", buffer.huge_pages},
            {"ring", p.flags.ring},
            {"vs_fio", p.vs_fio},
            {"references", p.references},
            {"seed", p.seed}};
}

inline nlohmann::json summary_json(const tune_plan& p, const tune_outcome& o,
                                   const point_map& points) {
    const bool any_read = std::find(p.ops.begin(), p.ops.end(), operation::read) != p.ops.end();
    nlohmann::json doc;
    doc["tool"] = "nvmeio-tune";
    doc["nvmeio_version"] = support::nvmeio_version();
    doc["started_utc"] = o.started_utc;
    doc["machine"] = support::describe_machine(p.flags.path);
    doc["parameters"] = parameters_json(p, o);
    doc["method"] =
        std::string(
            "each run moves the whole --size bytes once, P threads on one "
            "parallel context; per repeat the groups of runs sharing op, "
            "block size, depth and threads are shuffled, and so are the runs "
            "inside each group (nvmeio variants and fio); reads: ") +
        (p.flags.warm ? "page cache NOT dropped (warm)"
                      : "sync + drop_caches before every read run (cold)") +
        "; writes: fdatasync of the file before each run, none inside the timed part "
        "(as fio's default); GB/s = 10^9 bytes/s; CPU s/GiB from getrusage (nvmeio's "
        "process) and fio's usr+sys (its job threads); process CPU: fio's whole "
        "process (io_uring's io-wq workers among its threads) less a run of the same "
        "shape moving one ring (start-up and exit), left out where a ring holds more than a "
        "quarter of the bytes";
    doc["cache"] = any_read ? (p.flags.warm ? "warm" : "cold") : "n/a";
    doc["runs_planned"] = o.planned;
    doc["runs_done"] = o.records.size();
    doc["budget_exhausted"] = o.budget_exhausted;
    doc["elapsed_seconds"] = o.elapsed_seconds;
    doc["points"] = nlohmann::json::array();
    doc["references"] = nlohmann::json::array();
    for (const auto& [key, s] : points) {
        if (is_fio(s.first.method)) continue;  // reported beside its nvmeio points
        doc[s.first.method == "nvmeio" ? "points" : "references"].push_back(point_json(points, s));
    }
    doc["best"] = best_json(points);
    // The block to paste into a DeepSpeed config: the best for both when both were swept.
    if (doc["best"].contains("both")) {
        doc["aio"] = doc["best"]["both"]["aio"];
    } else if (!doc["best"].empty()) {
        doc["aio"] = doc["best"].begin().value()["aio"];
    }
    return doc;
}

/// Block size x queue depth, each cell the best median over the other axes.
inline void write_heatmap(const std::string& path, const tune_plan& p, operation op,
                          const point_map& points) {
    heatmap map;
    const std::string name = to_string(op);
    map.title = "nvmeio " + name + " throughput (GB/s = 10^9 B/s)";
    map.subtitle = "median of " + std::to_string(p.repeats) + " run(s) per point; " +
                   (op == operation::read ? std::string(p.flags.warm ? "warm" : "cold") + " reads"
                                          : std::string("writes")) +
                   "; each cell: best over overlap x submit x threads; " +
                   support::format_size(p.size) + " O_DIRECT, " +
                   support::name_of(support::backend_names(), p.backend);
    map.row_label = "block size";
    map.column_label = "queue depth";
    for (const unsigned q : p.depths)
        map.columns.push_back(std::to_string(q));
    for (const std::uint64_t b : p.block_sizes) {
        map.rows.push_back(support::format_size(b));
        std::vector<std::optional<double>> row;
        for (const unsigned q : p.depths) {
            std::optional<double> cell;
            for (const auto& [key, s] : points) {
                const run_config& c = s.first.config;
                if (s.first.method == "nvmeio" && c.op == op && c.block_size == b &&
                    c.queue_depth == q)
                    cell = std::max(cell.value_or(0.0), s.rate.median);
            }
            row.push_back(cell);
        }
        map.values.push_back(row);
    }
    std::ofstream out(path);
    write_svg(out, map);
}

/// The table on stdout.
inline void print_table(const tune_plan& p, const tune_outcome& o, const nlohmann::json& doc,
                        const point_map& points) {
    std::printf("nvmeio-tune  %s\nmachine: %s\n", o.started_utc.c_str(),
                doc["machine"].get<std::string>().c_str());
    std::printf(
        "%s %s, %s per run, O_DIRECT, backend %s, %u repeat(s), reads %s, %zu of %zu "
        "runs%s\n",
        to_string(p.target.kind), p.flags.path.c_str(), support::format_size(p.size).c_str(),
        support::name_of(support::backend_names(), p.backend).c_str(), p.repeats,
        doc["cache"].get<std::string>().c_str(), o.records.size(), o.planned,
        o.budget_exhausted ? " (budget exhausted)" : "");
    std::printf("%-5s %-26s %9s %7s %9s %9s %7s %9s%s\n", "op", "point", "GB/s", "spread",
                "CPU s/GiB", "fio GB/s", "ratio", "fio CPU",
                p.vs_fio && p.backend == support::backend_kind::io_uring
                    ? " | fio at its best (--fixedbufs --registerfiles): GB/s ratio CPU"
                    : "");
    for (const auto& [key, s] : points) {
        if (is_fio(s.first.method)) continue;
        const bool nvmeio = s.first.method == "nvmeio";
        char fio_text[128] = "";
        int used = 0;
        for (const fio_setup setup : {fio_setup::plain, fio_setup::best}) {
            const point_summary* f = nvmeio ? fio_of(points, s.first, setup) : nullptr;
            if (f == nullptr || f->rate.median <= 0) continue;
            used += std::snprintf(fio_text + used, sizeof fio_text - static_cast<std::size_t>(used),
                                  "%s%9.3f %6.2fx %9.4f", used != 0 ? " | best " : "",
                                  f->rate.median, s.rate.median / f->rate.median, f->cpu.median);
        }
        std::printf("%-5s %-26s %9.3f %6.1f%% %9.4f %s\n", to_string(s.first.config.op),
                    (nvmeio ? describe_point(s.first) : s.first.method).c_str(), s.rate.median,
                    100 * s.rate.spread(), s.cpu.median, fio_text);
    }
    for (const auto& [op, b] : doc["best"].items())
        std::printf("best %-5s %s\n", op.c_str(), b.dump().c_str());
    std::printf("wrote %s/runs.csv, %s/summary.json, %s/heatmap_<op>.svg\n", p.out_dir.c_str(),
                p.out_dir.c_str(), p.out_dir.c_str());
}

/// Writes every output of the sweep.
inline void report(const tune_plan& p, const tune_outcome& o) {
    write_csv(p.out_dir + "/runs.csv", o.records);
    const point_map points = summarize_points(o.records);
    const nlohmann::json doc = summary_json(p, o, points);
    {
        std::ofstream out(p.out_dir + "/summary.json");
        out << doc.dump(2) << "\n";
        if (!out) throw std::runtime_error("cannot write '" + p.out_dir + "/summary.json'");
    }
    for (const operation op : p.ops)
        write_heatmap(p.out_dir + "/heatmap_" + to_string(op) + ".svg", p, op, points);
    if (!p.quiet) print_table(p, o, doc, points);
}

}  // namespace nvmeio::bench

// nvmeio-tune: the combinatorial sweep. Every combination of block size x queue depth x
// overlap x single submit x threads, for reads and writes separately, repeated, interleaved in a
// shuffled order, optionally point by point against fio; cold reads (page cache dropped before
// each) or an explicit --warm. Writes a CSV of every run, a JSON summary with the best
// configurations and a DeepSpeed "aio" block, and an SVG heat map per operation.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "bench_json.hpp"
#include "fio_runner.hpp"
#include "heatmap_svg.hpp"

namespace bench = nvmeio::bench;
using nvmeio::operation;
using nvmeio::strategy_kind;
using nvmeio::submit_mode;

namespace {

// One measured run of anything: nvmeio, fio or a reference reader.
struct run_record {
    std::size_t index = 0;
    unsigned repeat = 0;
    operation op = operation::read;
    std::string method;  // "nvmeio", "fio", "buffered", "mmap"
    std::size_t block_size = 0;
    unsigned queue_depth = 0;
    int overlap = -1;  // -1: not applicable
    int single = -1;
    unsigned threads = 1;
    std::string cache;
    std::uint64_t bytes = 0;
    double elapsed_us = 0;
    double gb_per_s = 0;
    double cpu_per_gib = 0;
    nvmeio::latency_stats submit, completion;
};

// What identifies a point of the sweep (without the repeat).
using point_key = std::tuple<int, std::string, std::size_t, unsigned, int, int, unsigned>;

point_key key_of(const run_record& r) {
    return {static_cast<int>(r.op),
            r.method,
            r.block_size,
            r.queue_depth,
            r.overlap,
            r.single,
            r.threads};
}

// A unit of work in the schedule.
struct task {
    std::string method;
    bench::run_config config;
};

std::string tristate(int v) {
    return v < 0 ? "" : v ? "true" : "false";
}

std::string clock_text(double seconds) {
    const long s = static_cast<long>(seconds + 0.5);
    char text[32];
    if (s >= 3600) {
        std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    } else {
        std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
    }
    return text;
}

std::string describe_point(const run_record& r) {
    std::string text = bench::format_size(r.block_size) + " qd" + std::to_string(r.queue_depth);
    if (r.overlap >= 0) text += r.overlap ? " overlap" : " seq";
    if (r.single >= 0) text += r.single ? "/single" : "/block";
    return text + " P" + std::to_string(r.threads);
}

std::vector<std::uint64_t> parse_sizes(const std::vector<std::string>& texts) {
    std::vector<std::uint64_t> out;
    for (const std::string& t : texts)
        out.push_back(bench::parse_size(t));
    return out;
}

std::vector<int> parse_both(const std::string& text) {
    if (text == "both") return {1, 0};
    return {text == "on" ? 1 : 0};
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    char text[64];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return text;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "nvmeio-tune: sweep block size x queue depth x overlap x single submit x threads, for "
        "reads and writes, and report the best configuration (with a DeepSpeed \"aio\" block)."};
    std::string path = "nvmeio-tune.bin";
    std::string size_text = "1G";
    std::vector<std::string> ops{"read", "write"};
    std::vector<std::string> block_texts{"128K", "256K", "512K", "1M", "2M", "4M", "8M"};
    std::vector<unsigned> depths{4, 8, 16, 32, 64, 128};
    std::string overlap_text = "both";
    std::string single_text = "both";
    std::vector<unsigned> thread_counts{1, 2, 4, 8};
    unsigned repeats = 3;
    double budget = 0;
    double pause = 0;
    bool warm = false;
    bool vs_fio = false;
    bool references = false;
    bool huge_pages = false;
    std::string backend = "libaio";
    std::string out_dir = "nvmeio-tune-out";
    unsigned seed = 1;
    bool quiet = false;
    app.add_option("-f,--file", path,
                   "The file; created with a test pattern when missing or shorter than --size. "
                   "Write runs overwrite its first --size bytes")
        ->capture_default_str();
    app.add_option("-s,--size", size_text,
                   "Bytes per run (a multiple of every block size x "
                   "thread count)")
        ->capture_default_str();
    app.add_option("--ops", ops, "read, write or both")
        ->check(CLI::IsMember({"read", "write"}))
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("-b,--block-sizes", block_texts, "Block sizes, comma separated")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("-q,--queue-depths", depths, "Queue depths, comma separated")
        ->delimiter(',')
        ->check(CLI::Range(1u, 65536u))
        ->capture_default_str();
    app.add_option("--overlap", overlap_text, "overlap_events: on, off or both")
        ->check(CLI::IsMember({"on", "off", "both"}))
        ->capture_default_str();
    app.add_option("--single-submit", single_text, "single_submit: on, off or both")
        ->check(CLI::IsMember({"on", "off", "both"}))
        ->capture_default_str();
    app.add_option("-p,--threads", thread_counts,
                   "Thread counts (intra_op_parallelism), comma separated")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1024u))
        ->capture_default_str();
    app.add_option("-r,--repeats", repeats, "Runs per point; the median is reported")
        ->check(CLI::Range(1u, 1000u))
        ->capture_default_str();
    app.add_option("--budget", budget,
                   "Seconds: start no new run after this (0 = no limit); every point gets its "
                   "first run before any gets a second")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--pause", pause,
                   "Seconds to sleep before each run (after the cache drop), so that the "
                   "device finishes what the previous run left behind")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--warm", warm,
                 "Do not drop the page cache before reads; the runs are labelled warm. Needed "
                 "when not root");
    app.add_flag("--vs-fio", vs_fio,
                 "Run fio (libaio, O_DIRECT, same file, block size, queue depth, threads) "
                 "interleaved with nvmeio point by point and report the ratio");
    app.add_flag("--references", references,
                 "Also time a buffered read and an mmap read of the same file (one thread) each "
                 "repeat");
    app.add_flag("--huge-pages", huge_pages, "Ask for transparent huge pages for the buffer");
    app.add_option("--backend", backend, "I/O backend")
        ->check(CLI::IsMember(bench::known_backends()))
        ->capture_default_str();
    app.add_option("-o,--out-dir", out_dir, "Where runs.csv, summary.json and the heat maps go")
        ->capture_default_str();
    app.add_option("--seed", seed, "Seed of the shuffled run order")->capture_default_str();
    app.add_flag("--quiet", quiet, "Print nothing but errors");
    CLI11_PARSE(app, argc, argv);

    try {
        const std::uint64_t size = bench::parse_size(size_text);
        const std::vector<std::uint64_t> block_sizes = parse_sizes(block_texts);
        for (std::uint64_t b : block_sizes) {
            for (unsigned p : thread_counts) {
                if (b == 0 || size % (b * p) != 0) {
                    std::cerr << "nvmeio-tune: --size " << size_text
                              << " is not a multiple of block size " << bench::format_size(b)
                              << " x " << p << " threads; choose a size that every point "
                              << "splits evenly (e.g. 1G)\n";
                    return 2;
                }
            }
        }
        const bool any_read = std::find(ops.begin(), ops.end(), "read") != ops.end();
        const bool any_write = std::find(ops.begin(), ops.end(), "write") != ops.end();
        ops.clear();  // reads first, each operation once
        if (any_read) ops.push_back("read");
        if (any_write) ops.push_back("write");

        std::string fio;
        if (vs_fio) {
            fio = bench::find_program("fio");
            if (fio.empty()) {
                std::cerr << "nvmeio-tune: " << bench::fio_missing_message << "\n";
                return 3;
            }
        }
        const std::string read_cache = warm ? "warm" : "cold";
        if (any_read && !warm) {
            std::string why;
            if (!bench::drop_page_cache(why)) {
                std::cerr << "nvmeio-tune: " << why
                          << "\nReads after a failed drop may come from the page cache, so they "
                             "will not be labelled cold. Run as root, or pass --warm to measure "
                             "warm reads and label them so.\n";
                return 4;
            }
        }
        ::mkdir(out_dir.c_str(), 0755);
        const bool created = bench::prepare_file(path, size);
        bench::runner runner(size, huge_pages);
        if (any_write) runner.load(path);  // write runs write the file's own bytes back

        // The schedule: per repeat, groups of (op, block size, depth, threads) in a shuffled
        // order; inside a group, the nvmeio variants and fio next to each other.
        std::vector<std::vector<task>> groups;
        for (const std::string& op_name : ops) {
            const operation op = op_name == "read" ? operation::read : operation::write;
            for (std::uint64_t b : block_sizes) {
                for (unsigned q : depths) {
                    for (unsigned p : thread_counts) {
                        std::vector<task> group;
                        bench::run_config c;
                        c.op = op;
                        c.path = path;
                        c.size = size;
                        c.block_size = static_cast<std::size_t>(b);
                        c.queue_depth = q;
                        c.threads = p;
                        c.backend = backend;
                        for (int overlap : parse_both(overlap_text)) {
                            for (int single : parse_both(single_text)) {
                                c.strategy =
                                    overlap ? strategy_kind::overlapped : strategy_kind::sequential;
                                c.submit = single ? submit_mode::single : submit_mode::block;
                                group.push_back({"nvmeio", c});
                            }
                        }
                        if (vs_fio) group.push_back({"fio", c});
                        groups.push_back(group);
                    }
                }
            }
            if (references && op == operation::read) {
                bench::run_config c;
                c.op = op;
                c.path = path;
                c.size = size;
                c.block_size = std::size_t{1} << 20;
                groups.push_back({{"buffered", c}});
                groups.push_back({{"mmap", c}});
            }
        }
        std::size_t planned = 0;
        for (const auto& g : groups)
            planned += g.size();
        planned *= repeats;

        const bool progress = !quiet && ::isatty(STDERR_FILENO) != 0;
        const std::string started_utc = utc_now();
        const auto started = std::chrono::steady_clock::now();
        auto seconds_since_start = [&] {
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                .count();
        };
        std::vector<run_record> records;
        std::map<std::string, run_record> best_so_far;  // by op, nvmeio only (single runs)
        bool budget_exhausted = false;
        std::mt19937 shuffle_engine(seed);

        for (unsigned repeat = 0; repeat < repeats && !budget_exhausted; ++repeat) {
            std::vector<std::vector<task>> order = groups;
            std::shuffle(order.begin(), order.end(), shuffle_engine);
            for (auto& group : order) {
                // The order inside a group is shuffled too: a run is slowed by what ran just
                // before it (the device is still writing back, a process just exited), and a
                // fixed position would hand that cost to one method more than to the other.
                std::shuffle(group.begin(), group.end(), shuffle_engine);
                for (const task& t : group) {
                    if (budget > 0 && !records.empty() && seconds_since_start() >= budget) {
                        budget_exhausted = true;
                        break;
                    }
                    const bool is_read = t.config.op == operation::read;
                    if (is_read && !warm) {
                        std::string why;
                        if (!bench::drop_page_cache(why)) {
                            throw std::runtime_error("the page cache drop failed mid-sweep (" +
                                                     why + "); no run is labelled cold after it");
                        }
                    } else if (!is_read) {
                        bench::flush_file(path);
                    }
                    if (pause > 0) {
                        std::this_thread::sleep_for(std::chrono::duration<double>(pause));
                    }
                    run_record r;
                    r.index = records.size();
                    r.repeat = repeat;
                    r.op = t.config.op;
                    r.method = t.method;
                    r.block_size = t.config.block_size;
                    r.queue_depth = t.config.queue_depth;
                    r.threads = t.config.threads;
                    r.cache = is_read ? read_cache : "n/a";
                    if (t.method == "nvmeio") {
                        r.overlap = t.config.strategy == strategy_kind::overlapped;
                        r.single = t.config.submit == submit_mode::single;
                        const bench::run_result m = runner.run(t.config);
                        r.bytes = m.perf.bytes;
                        r.elapsed_us = m.perf.elapsed_us;
                        r.gb_per_s = m.perf.gb_per_s();
                        r.cpu_per_gib = m.cpu_seconds_per_gib();
                        r.submit = m.perf.submit;
                        r.completion = m.perf.completion;
                    } else if (t.method == "fio") {
                        const bench::fio_result m = bench::run_fio(fio, t.config, size);
                        if (!m.ok) throw std::runtime_error("fio failed: " + m.error);
                        r.bytes = m.bytes;
                        r.elapsed_us = m.elapsed_ms * 1e3;
                        r.gb_per_s = m.gb_per_s();
                        r.cpu_per_gib = m.cpu_seconds_per_gib();
                    } else {
                        r.queue_depth = 0;
                        const bench::run_result m =
                            t.method == "buffered"
                                ? bench::buffered_read(path, runner.data(), size, r.block_size)
                                : bench::mmap_read(path, runner.data(), size);
                        r.bytes = m.perf.bytes;
                        r.elapsed_us = m.perf.elapsed_us;
                        r.gb_per_s = m.perf.gb_per_s();
                        r.cpu_per_gib = m.cpu_seconds_per_gib();
                    }
                    records.push_back(r);
                    const std::string op_name = to_string(r.op);
                    if (r.method == "nvmeio" && (best_so_far.count(op_name) == 0 ||
                                                 best_so_far[op_name].gb_per_s < r.gb_per_s)) {
                        best_so_far[op_name] = r;
                    }
                    if (progress) {
                        const double elapsed = seconds_since_start();
                        const double eta = elapsed / static_cast<double>(records.size()) *
                                           static_cast<double>(planned - records.size());
                        std::string line = "\r[" + std::to_string(records.size()) + "/" +
                                           std::to_string(planned) + "] " + clock_text(elapsed) +
                                           " ETA " + clock_text(eta);
                        for (const auto& [name, b] : best_so_far) {
                            char text[128];
                            std::snprintf(text, sizeof text, " | best %s %.2f GB/s %s",
                                          name.c_str(), b.gb_per_s, describe_point(b).c_str());
                            line += text;
                        }
                        std::fprintf(stderr, "%s\x1b[K", line.c_str());
                        std::fflush(stderr);
                    }
                }
                if (budget_exhausted) break;
            }
        }
        if (progress) std::fprintf(stderr, "\n");

        // ---- every run, as CSV
        {
            std::ofstream csv(out_dir + "/runs.csv");
            csv << "index,repeat,op,method,block_size,queue_depth,overlap_events,single_submit,"
                   "threads,cache,bytes,elapsed_us,gb_per_s,cpu_seconds_per_gib,submit_avg_us,"
                   "submit_p99_us,complete_avg_us,complete_p99_us\n";
            for (const run_record& r : records) {
                char numbers[256];
                std::snprintf(numbers, sizeof numbers, "%.1f,%.4f,%.5f,%.2f,%.2f,%.2f,%.2f",
                              r.elapsed_us, r.gb_per_s, r.cpu_per_gib, r.submit.avg_us,
                              r.submit.p99_us, r.completion.avg_us, r.completion.p99_us);
                csv << r.index << "," << r.repeat << "," << to_string(r.op) << "," << r.method
                    << "," << r.block_size << ","
                    << (r.queue_depth ? std::to_string(r.queue_depth) : "") << ","
                    << tristate(r.overlap) << "," << tristate(r.single) << "," << r.threads << ","
                    << r.cache << "," << r.bytes << "," << numbers << "\n";
            }
        }

        // ---- medians per point
        struct point_summary {
            run_record first;
            bench::summary_stats rate, cpu;
        };
        std::map<point_key, std::vector<const run_record*>> by_point;
        for (const run_record& r : records)
            by_point[key_of(r)].push_back(&r);
        std::map<point_key, point_summary> points;
        for (const auto& [key, runs] : by_point) {
            std::vector<double> rates, cpus;
            for (const run_record* r : runs) {
                rates.push_back(r->gb_per_s);
                cpus.push_back(r->cpu_per_gib);
            }
            points[key] = {*runs.front(), bench::summarize(rates), bench::summarize(cpus)};
        }
        auto fio_of = [&](const run_record& r) -> const point_summary* {
            run_record f = r;
            f.method = "fio";
            f.overlap = -1;
            f.single = -1;
            const auto it = points.find(key_of(f));
            return it == points.end() ? nullptr : &it->second;
        };
        auto aio_block = [](const run_record& r) {
            return nlohmann::json{{"block_size", r.block_size},
                                  {"queue_depth", r.queue_depth},
                                  {"intra_op_parallelism", r.threads},
                                  {"single_submit", r.single == 1},
                                  {"overlap_events", r.overlap == 1}};
        };

        nlohmann::json doc;
        doc["tool"] = "nvmeio-tune";
        doc["nvmeio_version"] = std::to_string(NVMEIO_VERSION_MAJOR) + "." +
                                std::to_string(NVMEIO_VERSION_MINOR) + "." +
                                std::to_string(NVMEIO_VERSION_PATCH);
        doc["started_utc"] = started_utc;
        doc["machine"] = bench::describe_machine(path);
        doc["parameters"] = {{"file", path},
                             {"file_created", created},
                             {"size", size},
                             {"ops", ops},
                             {"block_sizes", block_sizes},
                             {"queue_depths", depths},
                             {"overlap_events", overlap_text},
                             {"single_submit", single_text},
                             {"threads", thread_counts},
                             {"repeats", repeats},
                             {"budget_seconds", budget},
                             {"pause_seconds", pause},
                             {"backend", backend},
                             {"direct_io", true},
                             {"huge_pages", huge_pages},
                             {"vs_fio", vs_fio},
                             {"references", references},
                             {"seed", seed}};
        doc["method"] = std::string(
                            "each run moves the whole --size bytes once; per repeat the groups of "
                            "runs sharing op, block size, depth and threads are shuffled, and so "
                            "are the runs inside each group (nvmeio variants and fio); reads: ") +
                        (warm ? "page cache NOT dropped (warm)"
                              : "sync + drop_caches before every read run (cold)") +
                        "; writes: fdatasync of the file before each run, none inside the timed "
                        "part (as fio's default); "
                        "GB/s = 10^9 bytes/s; CPU s/GiB from getrusage (nvmeio) and fio's usr+sys";
        doc["cache"] = any_read ? read_cache : "n/a";
        doc["runs_planned"] = planned;
        doc["runs_done"] = records.size();
        doc["budget_exhausted"] = budget_exhausted;
        doc["elapsed_seconds"] = seconds_since_start();
        doc["points"] = nlohmann::json::array();
        doc["references"] = nlohmann::json::array();
        std::map<std::string, const point_summary*> best;
        for (const auto& [key, s] : points) {
            const run_record& r = s.first;
            nlohmann::json j{{"op", to_string(r.op)},
                             {"method", r.method},
                             {"block_size", r.block_size},
                             {"threads", r.threads},
                             {"cache", r.cache},
                             {"gb_per_s", bench::stats_json(s.rate)},
                             {"cpu_seconds_per_gib", bench::stats_json(s.cpu)}};
            if (r.method == "buffered" || r.method == "mmap") {
                doc["references"].push_back(j);
                continue;
            }
            j["queue_depth"] = r.queue_depth;
            if (r.method == "fio") continue;  // reported beside its nvmeio points
            j["overlap_events"] = r.overlap == 1;
            j["single_submit"] = r.single == 1;
            if (const point_summary* f = fio_of(r)) {
                j["fio_gb_per_s"] = bench::stats_json(f->rate);
                j["fio_cpu_seconds_per_gib"] = bench::stats_json(f->cpu);
                j["ratio_to_fio"] = f->rate.median > 0 ? s.rate.median / f->rate.median : 0;
                j["cpu_ratio_to_fio"] = f->cpu.median > 0 ? s.cpu.median / f->cpu.median : 0;
            }
            doc["points"].push_back(j);
            const std::string op_name = to_string(r.op);
            const auto it = best.find(op_name);
            if (it == best.end() || it->second->rate.median < s.rate.median ||
                (it->second->rate.median == s.rate.median &&
                 s.cpu.median < it->second->cpu.median)) {
                best[op_name] = &s;
            }
        }
        nlohmann::json best_json = nlohmann::json::object();
        for (const auto& [op_name, s] : best) {
            best_json[op_name] = {{"gb_per_s", s->rate.median},
                                  {"cpu_seconds_per_gib", s->cpu.median},
                                  {"repeats", s->rate.count},
                                  {"spread", s->rate.spread()},
                                  {"aio", aio_block(s->first)}};
        }
        // Both together: the configuration with the best harmonic mean of its read and write
        // medians, i.e. the highest throughput for a workload that writes and reads the same
        // bytes.
        if (best.size() == 2) {
            const point_summary* winner_read = nullptr;
            const point_summary* winner_write = nullptr;
            double winner = -1;
            for (const auto& [key, s] : points) {
                if (s.first.method != "nvmeio" || s.first.op != operation::read) continue;
                point_key other = key;
                std::get<0>(other) = static_cast<int>(operation::write);
                const auto it = points.find(other);
                if (it == points.end()) continue;
                const double r = s.rate.median, w = it->second.rate.median;
                const double combined = r > 0 && w > 0 ? 2 / (1 / r + 1 / w) : 0;
                if (combined > winner) {
                    winner = combined;
                    winner_read = &s;
                    winner_write = &it->second;
                }
            }
            if (winner_read != nullptr) {
                best_json["both"] = {{"combined_gb_per_s", winner},
                                     {"read_gb_per_s", winner_read->rate.median},
                                     {"write_gb_per_s", winner_write->rate.median},
                                     {"combined_is", "harmonic mean of read and write medians"},
                                     {"aio", aio_block(winner_read->first)}};
            }
        }
        doc["best"] = best_json;
        // The block to paste into a DeepSpeed config: the best for both when both were swept.
        if (best_json.contains("both")) {
            doc["aio"] = best_json["both"]["aio"];
        } else if (!best_json.empty()) {
            doc["aio"] = best_json.begin().value()["aio"];
        }
        {
            std::ofstream out(out_dir + "/summary.json");
            out << doc.dump(2) << "\n";
        }

        // ---- heat maps: block size x queue depth, best median over the other axes
        for (const std::string& op_name : ops) {
            bench::heatmap map;
            map.title = "nvmeio " + op_name + " throughput (GB/s = 10^9 B/s)";
            map.subtitle = "median of " + std::to_string(repeats) + " run(s) per point; " +
                           (op_name == "read" ? read_cache + " reads" : std::string("writes")) +
                           "; each cell: best over overlap x submit x threads; " +
                           bench::format_size(size) + " O_DIRECT, " + backend;
            map.row_label = "block size";
            map.column_label = "queue depth";
            for (unsigned q : depths)
                map.columns.push_back(std::to_string(q));
            for (std::uint64_t b : block_sizes) {
                map.rows.push_back(bench::format_size(b));
                std::vector<std::optional<double>> row;
                for (unsigned q : depths) {
                    std::optional<double> cell;
                    for (const auto& [key, s] : points) {
                        const run_record& r = s.first;
                        if (r.method == "nvmeio" && to_string(r.op) == op_name &&
                            r.block_size == b && r.queue_depth == q) {
                            cell = std::max(cell.value_or(0.0), s.rate.median);
                        }
                    }
                    row.push_back(cell);
                }
                map.values.push_back(row);
            }
            std::ofstream out(out_dir + "/heatmap_" + op_name + ".svg");
            bench::write_svg(out, map);
        }

        if (!quiet) {
            std::printf("nvmeio-tune  %s\nmachine: %s\n",
                        doc["started_utc"].get<std::string>().c_str(),
                        doc["machine"].get<std::string>().c_str());
            std::printf(
                "file %s, %s per run, O_DIRECT, backend %s, %u repeat(s), reads %s, "
                "%zu of %zu runs%s\n",
                path.c_str(), bench::format_size(size).c_str(), backend.c_str(), repeats,
                any_read ? (warm ? "warm (page cache not dropped)"
                                 : "cold (page cache dropped before each)")
                         : "n/a",
                records.size(), planned, budget_exhausted ? " (budget exhausted)" : "");
            std::printf("%-5s %-26s %9s %7s %9s %9s %7s %9s\n", "op", "point", "GB/s", "spread",
                        "CPU s/GiB", "fio GB/s", "ratio", "fio CPU");
            for (const auto& [key, s] : points) {
                if (s.first.method == "fio") continue;
                const point_summary* f = s.first.method == "nvmeio" ? fio_of(s.first) : nullptr;
                const std::string name =
                    s.first.method == "nvmeio" ? describe_point(s.first) : s.first.method;
                char fio_text[64] = "";
                if (f != nullptr) {
                    std::snprintf(fio_text, sizeof fio_text, "%9.3f %6.2fx %9.4f", f->rate.median,
                                  s.rate.median / f->rate.median, f->cpu.median);
                }
                std::printf("%-5s %-26s %9.3f %6.1f%% %9.4f %s\n", to_string(s.first.op),
                            name.c_str(), s.rate.median, 100 * s.rate.spread(), s.cpu.median,
                            fio_text);
            }
            for (const auto& [op_name, b] : best_json.items()) {
                std::printf("best %-5s %s\n", op_name.c_str(), b.dump().c_str());
            }
            std::printf("wrote %s/runs.csv, %s/summary.json, %s/heatmap_<op>.svg\n",
                        out_dir.c_str(), out_dir.c_str(), out_dir.c_str());
        }
        return 0;
    } catch (const std::exception& e) {
        if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
        std::cerr << "nvmeio-tune: " << e.what() << "\n";
        return 1;
    }
}

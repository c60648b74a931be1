// nvmeio-bench: measure one configuration of nvmeio (read or write, block size, queue depth,
// strategy, submit mode, threads) over a file, with warm-up passes, several measured passes and
// the median, as a table or as JSON.

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "bench_json.hpp"

namespace bench = nvmeio::bench;

int main(int argc, char** argv) {
    CLI::App app{"nvmeio-bench: measure one nvmeio configuration on one file (O_DIRECT)."};
    std::string op_name = "read";
    std::string path;
    std::string size_text;
    std::string block_text = "1M";
    unsigned queue_depth = 32;
    std::string strategy_name = "overlapped";
    std::string submit_name = "block";
    unsigned threads = 1;
    std::string backend = "libaio";
    unsigned loops = 3;
    unsigned warmup = 1;
    bool validate = false;
    bool json = false;
    bool warm = false;
    bool huge_pages = false;
    app.add_option("--op", op_name, "read or write")
        ->check(CLI::IsMember({"read", "write"}))
        ->capture_default_str();
    app.add_option("-f,--file", path,
                   "The file; created with a test pattern when missing or "
                   "shorter than --size")
        ->required();
    app.add_option("-s,--size", size_text, "Bytes per pass (e.g. 1G); default: the file's size");
    app.add_option("-b,--block-size", block_text, "Bytes per request (e.g. 1M)")
        ->capture_default_str();
    app.add_option("-q,--queue-depth", queue_depth, "Requests in flight per thread")
        ->check(CLI::Range(1u, 65536u))
        ->capture_default_str();
    app.add_option("--strategy", strategy_name,
                   "overlapped (refill as requests complete) or sequential (submit a batch, "
                   "reap it whole)")
        ->check(CLI::IsMember({"overlapped", "sequential"}))
        ->capture_default_str();
    app.add_option("--submit", submit_name, "single (one request per io_submit) or block")
        ->check(CLI::IsMember({"single", "block"}))
        ->capture_default_str();
    app.add_option("-p,--threads", threads,
                   "Threads, each with its own context moving a contiguous slice")
        ->check(CLI::Range(1u, 1024u))
        ->capture_default_str();
    app.add_option("--backend", backend, "I/O backend")
        ->check(CLI::IsMember(bench::known_backends()))
        ->capture_default_str();
    app.add_option("-n,--loops", loops, "Measured passes")
        ->check(CLI::Range(1u, 100000u))
        ->capture_default_str();
    app.add_option("-w,--warmup", warmup, "Unmeasured passes before them")->capture_default_str();
    app.add_flag("--validate", validate,
                 "After each read pass, compare the bytes read with the file read through the "
                 "page cache");
    app.add_flag("--json", json, "Print JSON instead of a table");
    app.add_flag("--warm", warm,
                 "Do not drop the page cache before reads (label them warm); needed when not "
                 "root");
    app.add_flag("--huge-pages", huge_pages, "Ask for transparent huge pages for the buffer");
    CLI11_PARSE(app, argc, argv);

    try {
        bench::run_config config;
        config.op = op_name == "read" ? nvmeio::operation::read : nvmeio::operation::write;
        config.path = path;
        config.block_size = static_cast<std::size_t>(bench::parse_size(block_text));
        config.queue_depth = queue_depth;
        config.strategy = strategy_name == "overlapped" ? nvmeio::strategy_kind::overlapped
                                                        : nvmeio::strategy_kind::sequential;
        config.submit =
            submit_name == "single" ? nvmeio::submit_mode::single : nvmeio::submit_mode::block;
        config.threads = threads;
        config.backend = backend;
        if (!size_text.empty()) {
            config.size = bench::parse_size(size_text);
        } else {
            struct stat st {};
            if (::stat(path.c_str(), &st) != 0 || st.st_size == 0) {
                std::cerr << "nvmeio-bench: '" << path
                          << "' does not exist or is empty: give --size to create it\n";
                return 2;
            }
            config.size = static_cast<std::uint64_t>(st.st_size);
        }
        if (config.size == 0 || config.block_size == 0) {
            std::cerr << "nvmeio-bench: --size and --block-size must be positive\n";
            return 2;
        }
        const bool created = bench::prepare_file(path, config.size);
        const bool is_read = config.op == nvmeio::operation::read;

        std::string cache = is_read ? "cold" : "n/a";
        if (is_read && warm) cache = "warm";
        auto before_pass = [&] {
            if (!is_read) {
                bench::flush_file(path);
                return;
            }
            if (warm) return;
            std::string why;
            if (!bench::drop_page_cache(why)) {
                throw std::runtime_error(
                    "cannot drop the page cache, so these reads cannot be called cold: " + why +
                    ". Run as root, or pass --warm to measure (and label) warm reads.");
            }
        };

        bench::runner runner(config.size, huge_pages);
        // Writes write back the file's own bytes, so the file keeps its content.
        if (!is_read) runner.load(path);
        for (unsigned i = 0; i < warmup; ++i) {
            before_pass();
            (void)runner.run(config);
        }
        std::vector<bench::run_result> results;
        std::vector<double> rates;
        std::string validation = validate && is_read ? "passed" : "not requested";
        for (unsigned i = 0; i < loops; ++i) {
            before_pass();
            results.push_back(runner.run(config));
            rates.push_back(results.back().perf.gb_per_s());
            if (validate && is_read) {
                const auto bad = bench::first_mismatch(path, runner.data(), config.size, 0);
                if (bad) {
                    validation = "failed: first differing byte at offset " + std::to_string(*bad);
                    break;
                }
            }
        }
        const bench::summary_stats rate = bench::summarize(rates);
        std::vector<double> cpus;
        for (const auto& r : results)
            cpus.push_back(r.cpu_seconds_per_gib());
        const bench::summary_stats cpu = bench::summarize(cpus);
        const std::string machine = bench::describe_machine(path);

        if (json) {
            nlohmann::json doc;
            doc["tool"] = "nvmeio-bench";
            doc["nvmeio_version"] = std::to_string(NVMEIO_VERSION_MAJOR) + "." +
                                    std::to_string(NVMEIO_VERSION_MINOR) + "." +
                                    std::to_string(NVMEIO_VERSION_PATCH);
            doc["machine"] = machine;
            doc["config"] = bench::config_json(config);
            doc["file_created"] = created;
            doc["cache"] = cache;
            doc["warmup"] = warmup;
            doc["loops"] = nlohmann::json::array();
            for (const auto& r : results)
                doc["loops"].push_back(bench::result_json(r));
            doc["gb_per_s"] = bench::stats_json(rate);
            doc["cpu_seconds_per_gib"] = bench::stats_json(cpu);
            doc["validation"] = validation;
            std::cout << doc.dump(2) << "\n";
        } else {
            std::printf("nvmeio-bench  machine: %s\n", machine.c_str());
            std::printf(
                "file %s (%s), %s %s bytes per pass, block %s, queue depth %u, %s/%s, "
                "%u thread(s), backend %s, O_DIRECT, %u warm-up + %u measured passes, "
                "cache %s%s\n",
                path.c_str(), created ? "created" : "existing", op_name.c_str(),
                std::to_string(config.size).c_str(), bench::format_size(config.block_size).c_str(),
                config.queue_depth, strategy_name.c_str(), submit_name.c_str(), config.threads,
                backend.c_str(), warmup, loops, cache.c_str(),
                cache == "cold" ? " (page cache dropped before every pass)" : "");
            std::printf("%-6s %9s %9s %10s | %12s %12s | %12s %12s\n", "pass", "GB/s", "ms",
                        "CPU s/GiB", "submit avg", "submit p99", "complete avg", "complete p99");
            for (std::size_t i = 0; i < results.size(); ++i) {
                const auto& p = results[i].perf;
                std::printf("%-6zu %9.3f %9.1f %10.4f | %12.1f %12.1f | %12.1f %12.1f\n", i + 1,
                            p.gb_per_s(), p.elapsed_us / 1e3, results[i].cpu_seconds_per_gib(),
                            p.submit.avg_us, p.submit.p99_us, p.completion.avg_us,
                            p.completion.p99_us);
            }
            std::printf("median %9.3f GB/s (min %.3f, max %.3f, spread %.1f%%), CPU %.4f s/GiB\n",
                        rate.median, rate.min, rate.max, 100 * rate.spread(), cpu.median);
            std::printf(
                "validation: %s\n(GB/s: 10^9 bytes per second; latencies in microseconds, "
                "percentiles "
                "of the worst thread)\n",
                validation.c_str());
        }
        return validation.rfind("failed", 0) == 0 ? 1 : 0;
    } catch (const std::exception& e) {
        std::cerr << "nvmeio-bench: " << e.what() << "\n";
        return 1;
    }
}

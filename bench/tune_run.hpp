#pragma once
/// \file tune_run.hpp
/// nvmeio-tune's run: the schedule executed in a shuffled, interleaved order within a time
/// budget, one record per run, with a progress line on a terminal.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fio.hpp"
#include "options.hpp"
#include "run.hpp"
#include "support/reference_read.hpp"
#include "tune_plan.hpp"

namespace nvmeio::bench {

/// One measured run of anything: nvmeio, fio or a reference reader.
struct run_record {
    std::size_t index = 0;  ///< Order of execution.
    unsigned repeat = 0;    ///< Which repeat.
    std::string method;     ///< nvmeio, fio, buffered, mmap.
    run_config config;      ///< What ran (strategy and submit matter for nvmeio only).
    std::string cache;      ///< cold, warm or n/a.
    std::uint64_t bytes = 0;
    double elapsed_us = 0;
    double gb_per_s = 0;
    double cpu_per_gib = 0;
    /// The whole process's CPU per GiB: as cpu_per_gib, but for fio its process (see
    /// fio_result::process_cpu_seconds; negative when unknown) where cpu_per_gib is its job
    /// threads' own figure.
    double process_cpu_per_gib = 0;
    latency_stats submit, completion;  ///< nvmeio only.
};

/// What the sweep did.
struct tune_outcome {
    bool created = false;             ///< The file was created with the pattern.
    std::string started_utc;          ///< When it started.
    std::size_t planned = 0;          ///< Runs planned.
    bool budget_exhausted = false;    ///< Stopped by --budget.
    double elapsed_seconds = 0;       ///< Wall time of the sweep.
    std::vector<run_record> records;  ///< Every run, in order.
};

/// "1M qd32 overlap/block P2" (nvmeio) or "1M qd32 P2" (fio).
[[nodiscard]] inline std::string describe_point(const run_record& r) {
    std::string text =
        support::format_size(r.config.block_size) + " qd" + std::to_string(r.config.queue_depth);
    if (r.method == "nvmeio") {
        text += r.config.strategy == strategy_kind::overlapped ? " overlap" : " seq";
        text += r.config.submit == submit_mode::single ? "/single" : "/block";
        if (r.config.spin.count() != 0)
            text += " spin" + std::to_string(r.config.spin.count()) + "us";
        if (!r.config.pin_once) text += " unpinned";
        if (!r.config.single_issuer) text += " shared-ring";
    }
    return text + " P" + std::to_string(r.config.threads);
}

/// Runs the tasks of the plan; see nvmeio-tune's --help for the order.
class tune_runner {
  public:
    tune_runner(const tune_plan& plan, runner& engine, std::string fio)
        : plan_(plan), engine_(engine), fio_(std::move(fio)) {}

    /// Executes `groups` `repeats` times, shuffled per repeat, within the budget.
    void run(std::vector<std::vector<task>> groups, tune_outcome& out) {
        for (const auto& g : groups)
            out.planned += g.size() * plan_.repeats;
        out.started_utc = support::utc_now();
        start_ = std::chrono::steady_clock::now();
        std::mt19937 shuffle(plan_.seed);
        for (unsigned repeat = 0; repeat < plan_.repeats && !out.budget_exhausted; ++repeat) {
            std::shuffle(groups.begin(), groups.end(), shuffle);
            for (auto& group : groups) {
                // The order inside a group is shuffled too: a run is slowed by what ran just
                // before it, and a fixed position would hand that cost to one method.
                std::shuffle(group.begin(), group.end(), shuffle);
                for (const task& t : group) {
                    if (plan_.budget > 0 && !out.records.empty() && seconds() >= plan_.budget) {
                        out.budget_exhausted = true;
                        break;
                    }
                    out.records.push_back(run_one(t, repeat, out.records.size()));
                    progress(out);
                }
                if (out.budget_exhausted) break;
            }
        }
        out.elapsed_seconds = seconds();
        if (show_progress()) std::fprintf(stderr, "\n");
    }

  private:
    run_record run_one(const task& t, unsigned repeat, std::size_t index) {
        prepare_pass(t.config.op, plan_.flags.warm, t.config.path);
        if (plan_.pause > 0)
            std::this_thread::sleep_for(std::chrono::duration<double>(plan_.pause));
        run_record r;
        r.index = index;
        r.repeat = repeat;
        r.method = t.method;
        r.config = t.config;
        r.cache = t.config.op == operation::read ? (plan_.flags.warm ? "warm" : "cold") : "n/a";
        if (t.method == "nvmeio") {
            const run_result m = engine_.run(t.config);
            r.submit = m.perf.submit;
            r.completion = m.perf.completion;
            set_rates(r, m.perf, m.cpu_seconds);
        } else if (t.method == "fio" || t.method == "fio-best") {
            const fio_result m = run_fio(fio_, t.config, plan_.size,
                                         t.method == "fio" ? fio_setup::plain : fio_setup::best);
            if (!m.ok) throw std::runtime_error("fio failed: " + m.error);
            transfer_perf perf;
            perf.bytes = m.bytes;
            perf.elapsed_us = m.elapsed_ms * 1e3;
            set_rates(r, perf, m.cpu_seconds);
            r.process_cpu_per_gib =
                m.process_cpu_seconds < 0 ? -1 : per_gib(m.process_cpu_seconds, perf.bytes);
            // fio wrote its own bytes: the file gets its own back (--help promises it), before a
            // read pass would take fio's into the buffer that nvmeio's write passes write.
            if (t.config.op == operation::write) engine_.write_back(t.config.path);
        } else {
            const support::reference_result m =
                t.method == "buffered"
                    ? support::buffered_read(t.config.path, engine_.data(), plan_.size)
                    : support::mmap_read(t.config.path, engine_.data(), plan_.size);
            set_rates(r, m.perf, m.cpu_seconds);
        }
        return r;
    }

    static void set_rates(run_record& r, const transfer_perf& perf, double cpu_seconds) {
        r.bytes = perf.bytes;
        r.elapsed_us = perf.elapsed_us;
        r.gb_per_s = perf.gb_per_s();
        r.cpu_per_gib = per_gib(cpu_seconds, perf.bytes);
        r.process_cpu_per_gib = r.cpu_per_gib;
    }

    static double per_gib(double cpu_seconds, std::uint64_t bytes) {
        return bytes > 0 ? cpu_seconds / (static_cast<double>(bytes) / gib) : 0.0;
    }

    [[nodiscard]] bool show_progress() const { return !plan_.quiet && ::isatty(STDERR_FILENO); }

    [[nodiscard]] double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }

    static std::string clock_text(double seconds) {
        const long s = static_cast<long>(seconds + 0.5);
        char text[32];
        std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
        return text;
    }

    // "[done/total] elapsed ETA | best read ... | best write ..." on one terminal line.
    void progress(const tune_outcome& out) {
        const run_record& r = out.records.back();
        const std::string op = to_string(r.config.op);
        if (r.method == "nvmeio" && (best_.count(op) == 0 || best_[op].gb_per_s < r.gb_per_s))
            best_[op] = r;
        if (!show_progress()) return;
        const double elapsed = seconds();
        const double eta = elapsed / static_cast<double>(out.records.size()) *
                           static_cast<double>(out.planned - out.records.size());
        std::string line = "\r[" + std::to_string(out.records.size()) + "/" +
                           std::to_string(out.planned) + "] " + clock_text(elapsed) + " ETA " +
                           clock_text(eta);
        for (const auto& [name, b] : best_) {
            char text[128];
            std::snprintf(text, sizeof text, " | best %s %.2f GB/s %s", name.c_str(), b.gb_per_s,
                          describe_point(b).c_str());
            line += text;
        }
        std::fprintf(stderr, "%s\x1b[K", line.c_str());
        std::fflush(stderr);
    }

    const tune_plan& plan_;
    runner& engine_;
    std::string fio_;
    std::chrono::steady_clock::time_point start_;
    std::map<std::string, run_record> best_;  // by op, nvmeio only (single runs)
};

}  // namespace nvmeio::bench

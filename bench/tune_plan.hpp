#pragma once
/// \file tune_plan.hpp
/// nvmeio-tune's plan: its command line, checked, and the schedule of runs it makes of it.

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"
#include "run.hpp"
#include "support/cli.hpp"

namespace nvmeio::bench {

/// on, off or both, for DeepSpeed's two switches and io_uring's two.
enum class switch_axis { on, off, both };

/// on, off, both.
[[nodiscard]] inline const support::enum_names<switch_axis>& switch_axis_names() {
    static const support::enum_names<switch_axis> names{
        {"on", switch_axis::on}, {"off", switch_axis::off}, {"both", switch_axis::both}};
    return names;
}

/// The values a switch takes: {true, false}, {true} or {false}.
[[nodiscard]] inline std::vector<bool> switch_values(switch_axis axis) {
    if (axis == switch_axis::both) return {true, false};
    return {axis == switch_axis::on};
}

/// A unit of work in the schedule: nvmeio, fio, buffered or mmap with a configuration.
struct task {
    std::string method;  ///< "nvmeio", "fio", "fio-best", "buffered", "mmap".
    run_config config;   ///< What to run.
};

/// Everything nvmeio-tune was asked to do.
struct tune_plan {
    common_flags flags;                                             ///< Target, cache, buffer.
    std::uint64_t size = std::uint64_t{1} << 30;                    ///< Bytes per run.
    std::vector<operation> ops{operation::read, operation::write};  ///< Reads first.
    std::vector<std::uint64_t> block_sizes{128u << 10, 256u << 10, 512u << 10, 1u << 20,
                                           2u << 20,   4u << 20,   8u << 20};  ///< -b
    std::vector<unsigned> depths{4, 8, 16, 32, 64, 128};                       ///< -q
    switch_axis overlap = switch_axis::both;                                   ///< --overlap
    switch_axis single_submit = switch_axis::both;                             ///< --single-submit
    std::vector<unsigned> threads{1, 2, 4, 8};                                 ///< -p
    std::vector<unsigned> spins{0};  ///< --spins: context_options::spin values, microseconds
    switch_axis pin_once = switch_axis::on;       ///< --pin-once (io_uring)
    switch_axis single_issuer = switch_axis::on;  ///< --single-issuer (io_uring)
    unsigned repeats = 3;                         ///< -r
    double budget = 0;                            ///< --budget seconds, 0: none
    double pause = 0;                             ///< --pause seconds before each run
    bool vs_fio = false;                          ///< --vs-fio
    bool references = false;                      ///< --references
    support::backend_kind backend = support::backend_kind::libaio;  ///< --backend
    std::string out_dir = "nvmeio-tune-out";                        ///< -o
    unsigned seed = 1;                                              ///< --seed
    bool quiet = false;                                             ///< --quiet
    support::target_info target;                                    ///< What is at --file.
};

inline void add_tune_options(CLI::App& app, tune_plan& p) {
    p.flags.path = "nvmeio-tune.bin";
    p.flags.add_to(app,
                   "the file or block device; a missing file is created with the test "
                   "pattern. Write runs write its first --size bytes back unchanged");
    support::add_size_option(app, "-s,--size", p.size,
                             "bytes per run, a multiple of every block size x thread count");
    support::add_enum_list_option(app, "--ops", p.ops, support::operation_names(),
                                  "read, write or both (comma separated)");
    support::add_size_list_option(app, "-b,--block-sizes", p.block_sizes,
                                  "block sizes, comma separated", 1,
                                  support::transfer_flags::max_block_size,
                                  support::transfer_flags::smallest_direct_alignment);
    support::add_count_list_option(app, "-q,--queue-depths", p.depths,
                                   "queue depths, comma separated", 1u, 65536u);
    support::add_enum_option(app, "--overlap", p.overlap, switch_axis_names(),
                             "overlap_events (overlapped strategy): on, off or both");
    support::add_enum_option(app, "--single-submit", p.single_submit, switch_axis_names(),
                             "single_submit (one request per submit call): on, off or both");
    support::add_count_list_option(app, "-p,--threads", p.threads,
                                   "thread counts (intra_op_parallelism), comma separated", 1u,
                                   1024u);
    support::add_count_list_option(app, "--spins", p.spins,
                                   "microseconds a wait polls the completion ring before it "
                                   "sleeps (context_options::spin; 0: sleep at once), comma "
                                   "separated",
                                   0u, 1000000u);
    support::add_enum_option(app, "--pin-once", p.pin_once, switch_axis_names(),
                             "io_uring: register nvmeio's buffers with each ring on first use "
                             "(context_options::pin_once): on, off or both");
    support::add_enum_option(app, "--single-issuer", p.single_issuer, switch_axis_names(),
                             "io_uring: each ring set up for the one thread that uses it "
                             "(context_options::single_issuer): on, off or both");
    support::add_count_option(app, "-r,--repeats", p.repeats,
                              "runs per point; the median is reported", 1u, 1000u);
    support::add_seconds_option(app, "--budget", p.budget,
                                "start no new run after this many seconds (0: no limit); every "
                                "point gets its first run before any gets a second");
    support::add_seconds_option(app, "--pause", p.pause,
                                "seconds to sleep before each run, so that the device finishes "
                                "what the previous run left behind");
    app.add_flag("--vs-fio", p.vs_fio,
                 "run fio (same engine as --backend, O_DIRECT, same file, block size, queue "
                 "depth and threads) interleaved with nvmeio point by point; report the ratio; "
                 "with --backend io_uring also fio at its best (--fixedbufs --registerfiles: "
                 "buffers and file registered with the ring), reported beside it as fio-best");
    app.add_flag("--references", p.references,
                 "also time a buffered read and an mmap read of the same file (one thread)");
    support::add_enum_option(app, "--backend", p.backend, support::backend_names(),
                             "I/O backend of nvmeio (and fio's --ioengine)");
    app.add_option("-o,--out-dir", p.out_dir, "where runs.csv, summary.json and the heat maps go")
        ->capture_default_str();
    support::add_count_option(app, "--seed", p.seed, "seed of the shuffled run order", 0u);
    app.add_flag("--quiet", p.quiet, "print nothing but errors");
}

/// Checks what parsing alone cannot: sizes that split evenly, memory, the device guard.
inline void check_tune_plan(tune_plan& p) {
    p.flags.check();
    for (const std::uint64_t b : p.block_sizes) {
        for (const unsigned t : p.threads) {
            if (p.size % (b * t) != 0) {
                throw support::usage_error(
                    "--size", support::format_size(p.size) + " is not a multiple of block size " +
                                  support::format_size(b) + " x " + std::to_string(t) +
                                  " threads; choose a size every point splits evenly (e.g. 1G)");
            }
        }
    }
    if (p.backend != support::backend_kind::io_uring) {
        for (const auto& [flag, axis] :
             {std::pair{"--pin-once", p.pin_once}, std::pair{"--single-issuer", p.single_issuer}}) {
            if (axis != switch_axis::on)
                throw support::usage_error(flag, "applies to --backend io_uring only");
        }
    }
    check_fits_in_memory(p.size);
    p.target = support::inspect_target(p.flags.path);
    const bool writes = std::find(p.ops.begin(), p.ops.end(), operation::write) != p.ops.end();
    if (writes) support::check_write_allowed(p.target, p.flags.allow_device_write);
    if (::mkdir(p.out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
        throw support::usage_error("--out-dir",
                                   "cannot create '" + p.out_dir + "': " + std::strerror(errno));
    }
}

/// The schedule: per (op, block size, depth, threads) a group of the nvmeio variants (and fio);
/// the reference reads as groups of their own.
[[nodiscard]] inline std::vector<std::vector<task>> make_groups(const tune_plan& p) {
    std::vector<std::vector<task>> groups;
    run_config c;
    c.path = p.flags.path;
    c.size = p.size;
    c.backend = p.backend;
    c.ring = p.flags.ring;
    for (const operation op : p.ops) {
        c.op = op;
        for (const std::uint64_t b : p.block_sizes) {
            for (const unsigned q : p.depths) {
                for (const unsigned t : p.threads) {
                    c.block_size = static_cast<std::size_t>(b);
                    c.queue_depth = q;
                    c.threads = t;
                    std::vector<task> group;
                    for (const bool overlap : switch_values(p.overlap)) {
                        for (const bool single : switch_values(p.single_submit)) {
                            for (const unsigned spin : p.spins) {
                                c.strategy =
                                    overlap ? strategy_kind::overlapped : strategy_kind::sequential;
                                c.submit = single ? submit_mode::single : submit_mode::block;
                                c.spin = std::chrono::microseconds{spin};
                                for (const bool pin : switch_values(p.pin_once)) {
                                    for (const bool issuer : switch_values(p.single_issuer)) {
                                        c.pin_once = pin;
                                        c.single_issuer = issuer;
                                        group.push_back({"nvmeio", c});
                                    }
                                }
                            }
                        }
                    }
                    c.spin = std::chrono::microseconds{0};
                    c.pin_once = c.single_issuer = true;
                    if (p.vs_fio) group.push_back({"fio", c});
                    if (p.vs_fio && p.backend == support::backend_kind::io_uring)
                        group.push_back({"fio-best", c});
                    groups.push_back(group);
                }
            }
        }
        if (p.references && op == operation::read) {
            run_config reference = c;  // one thread, 1 MiB pread calls, no queue
            reference.block_size = std::size_t{1} << 20;
            reference.queue_depth = 0;
            reference.threads = 1;
            groups.push_back({{"buffered", reference}});
            groups.push_back({{"mmap", reference}});
        }
    }
    return groups;
}

}  // namespace nvmeio::bench

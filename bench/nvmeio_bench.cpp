// nvmeio-bench: measure one configuration of nvmeio (read or write, block size, queue depth,
// strategy, submit mode, threads, backend) over a file or block device, with warm-up passes,
// several measured passes and the median, as a table or as JSON. Plan -> run -> report.

#include <iostream>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "options.hpp"
#include "run.hpp"
#include "support/cli.hpp"

namespace bench = nvmeio::bench;
namespace support = nvmeio::support;

namespace {

// ---------------------------------------------------------------------------------------- plan

bench::bench_plan plan(int argc, char** argv) {
    CLI::App app{
        "nvmeio-bench: measure one nvmeio configuration on one file or block device "
        "(O_DIRECT unless --direct says otherwise)."};
    bench::bench_plan p;
    std::uint64_t size = 0;
    support::transfer_flags transfer;
    support::add_enum_option(app, "--op", p.config.op, support::operation_names(), "read or write");
    p.flags.add_to(app,
                   "the file or block device; a missing file is created with the test "
                   "pattern");
    support::add_size_option(app, "-s,--size", size,
                             "bytes per pass (K, M, G suffixes); default: the file's size");
    transfer.add_to(app);
    support::add_count_option(app, "-p,--threads", p.config.threads,
                              "threads of the parallel context, each with its own queue", 1u,
                              1024u);
    support::add_count_option(app, "-n,--loops", p.loops, "measured passes", 1u, 100000u);
    support::add_count_option(app, "-w,--warmup", p.warmup, "unmeasured passes before them", 0u,
                              1000u);
    app.add_flag("--validate", p.validate,
                 "after each read pass, compare the bytes read with the file read through the "
                 "page cache (nvmeio::verify_read)");
    app.add_flag("--json", p.json, "print JSON instead of a table");
    support::parse_command_line(app, argc, argv);
    transfer.check();
    p.flags.check();
    if (p.flags.ring && p.validate)
        throw support::usage_error("--validate",
                                   "cannot check a --ring pass (its bytes are not kept)");

    p.config.path = p.flags.path;
    p.config.block_size = static_cast<std::size_t>(transfer.block_size);
    p.config.queue_depth = transfer.queue_depth;
    p.config.strategy = transfer.strategy;
    p.config.submit = transfer.submit;
    p.config.backend = transfer.backend;
    p.config.ring = p.flags.ring;
    p.config.spin = std::chrono::microseconds{transfer.spin_us};
    p.config.pin_once = transfer.pin_once;
    p.config.single_issuer = transfer.single_issuer;
    p.config.direct = transfer.direct;
    p.target = support::inspect_target(p.flags.path);
    if (p.config.op == nvmeio::operation::write)
        support::check_write_allowed(p.target, p.flags.allow_device_write);
    if (size == 0 && (!p.target.exists || p.target.size == 0)) {
        throw support::usage_error("--size", "'" + p.flags.path +
                                                 "' does not exist or is empty: give --size to "
                                                 "create it");
    }
    p.config.size = size != 0 ? size : p.target.size;
    if (p.flags.ring && p.config.size % p.config.block_size != 0) {
        throw support::usage_error("--size", "with --ring, " + std::to_string(p.config.size) +
                                                 " bytes must be a whole number of blocks of " +
                                                 std::to_string(p.config.block_size));
    }
    bench::check_fits_in_memory(p.config.size);
    return p;
}

// ----------------------------------------------------------------------------------------- run

bench::bench_outcome run(const bench::bench_plan& p) {
    bench::bench_outcome out;
    out.created = bench::prepare_target(p.target, p.config.size);
    if (nvmeio::may_use_o_direct(p.config.direct))
        bench::check_block_sizes(p.config.path, {p.config.block_size}, "--block-size");
    const bool is_read = p.config.op == nvmeio::operation::read;
    out.cache = is_read ? (p.flags.warm ? "warm" : "cold") : "n/a";
    out.validation = p.validate && is_read ? "passed" : "not requested";
    bench::runner runner(p.config.size, p.flags.buffer());
    if (!is_read) runner.load(p.config.path);  // writes write the file's own bytes back
    for (unsigned i = 0; i < p.warmup; ++i) {
        bench::prepare_pass(p.config.op, p.flags.warm, p.config.path);
        (void)runner.run(p.config);
    }
    for (unsigned i = 0; i < p.loops; ++i) {
        bench::prepare_pass(p.config.op, p.flags.warm, p.config.path);
        out.passes.push_back(runner.run(p.config));
        if (!p.validate || !is_read) continue;
        const nvmeio::verify_result check = nvmeio::verify_read(
            p.config.path, nvmeio::memory(runner.data(), static_cast<std::size_t>(p.config.size)),
            0);
        if (!check.equal()) {
            out.validation = "failed: " + std::to_string(check.mismatches.count) +
                             " bytes differ, the first at offset " +
                             std::to_string(check.mismatches.first) + " (file holds " +
                             std::to_string(check.file_bytes) + " of the bytes)";
            break;
        }
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("nvmeio-bench", 1, [&] {
        const bench::bench_plan p = plan(argc, argv);
        const bench::bench_outcome outcome = run(p);
        bench::report(std::cout, p, outcome);
        return outcome.validation.rfind("failed", 0) == 0 ? 1 : 0;
    });
}

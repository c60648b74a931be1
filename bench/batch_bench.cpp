// Batched against one-by-one transfers for nvmeio: many tensors of 64 KiB - 4 MiB (log-uniform),
// laid end to end in one file, each with its own buffer, read (and written) one transfer per
// tensor, as one batch on one context, and as one batch over a parallel context. Rounds
// interleave the variants; the table shows medians and ratios. The page cache is dropped
// before every read.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nvmeio/nvmeio.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"
#include "support/stats.hpp"

using namespace nvmeio;
namespace sb = nvmeio::support;

namespace {

struct settings {
    std::string dir = ".";
    unsigned count = 4096;
    std::uint64_t min = 64u << 10, max = 4u << 20;
    std::uint64_t block_size = 1u << 20;
    unsigned queue_depth = 32;
    std::uint64_t max_io = 8u << 20;
    unsigned threads = 4;
    unsigned rounds = 5;
    unsigned seed = 1;
};

settings parse(int argc, char** argv) {
    settings s;
    CLI::App app{
        "batch_bench: many tensors read and written one by one, as one batch, and as "
        "one batch over a parallel context; medians of interleaved rounds."};
    app.add_option("--dir", s.dir, "folder for the scratch file")->capture_default_str();
    sb::add_count_option(app, "--count", s.count, "tensors", 1u, 1000000u);
    sb::add_size_option(app, "--min", s.min, "smallest tensor", 4096);
    sb::add_size_option(app, "--max", s.max, "largest tensor", 4096, std::uint64_t{1} << 30);
    sb::add_size_option(app, "-b,--block-size", s.block_size, "bytes per request", 1,
                        sb::transfer_flags::max_block_size);
    sb::add_count_option(app, "-q,--queue-depth", s.queue_depth, "requests in flight", 1u, 65536u);
    sb::add_size_option(app, "--max-io", s.max_io, "largest coalesced I/O");
    sb::add_count_option(app, "-p,--threads", s.threads, "threads of the parallel context", 1u,
                         1024u);
    sb::add_count_option(app, "--rounds", s.rounds, "interleaved rounds", 1u, 1000u);
    sb::add_count_option(app, "--seed", s.seed, "seed of the tensor sizes", 0u);
    sb::parse_command_line(app, argc, argv);
    if (s.min > s.max) throw sb::usage_error("--min", "is larger than --max");
    // Tensors average at most --max bytes; all of them live in memory at once.
    if (s.max * s.count > sb::physical_memory_bytes() / 2)
        throw sb::usage_error("--count", "x --max does not fit in half of this machine's memory");
    return s;
}

bool drop_page_cache() {
    std::string why;
    return sb::drop_page_cache(why);
}

// Tensor sizes log-uniform between min and max, in 4 KiB multiples, laid end to end, each
// holding the generated pattern of its range; returns the total.
std::uint64_t make_tensors(const settings& s, std::vector<aligned_buffer>& tensors,
                           std::vector<batch_request>& requests) {
    std::mt19937_64 random(s.seed);
    const double lo = std::log(static_cast<double>(s.min));
    const double hi = std::log(static_cast<double>(s.max));
    std::uniform_real_distribution<double> pick(lo, hi);
    std::uint64_t offset = 0;
    tensors.reserve(s.count);
    for (unsigned i = 0; i < s.count; ++i) {
        const auto size = static_cast<std::size_t>(
            align_up(static_cast<std::uint64_t>(std::exp(pick(random))), 4096));
        tensors.emplace_back(size);
        sb::fill_pattern(tensors.back().data(), size, offset);
        requests.push_back({tensors.back(), offset});
        offset += size;
    }
    return offset;
}

int run(int argc, char** argv) {
    const settings s = parse(argc, argv);
    const std::string dir = s.dir;
    std::printf("machine: %s, scratch dir: %s\n", sb::describe_machine(dir).c_str(), dir.c_str());
    std::printf(
        "parameters: --count %u --min %s --max %s --block-size %s --queue-depth %u "
        "--max-io %s --threads %u --rounds %u --seed %u\n",
        s.count, sb::format_size(s.min).c_str(), sb::format_size(s.max).c_str(),
        sb::format_size(s.block_size).c_str(), s.queue_depth, sb::format_size(s.max_io).c_str(),
        s.threads, s.rounds, s.seed);
    const bool cold = drop_page_cache();
    std::printf("page cache: %s\n", cold ? "dropped (sync; echo 1 > drop_caches) before every read"
                                         : "NOT dropped (not root): reads are WARM");

    std::vector<aligned_buffer> tensors;
    std::vector<batch_request> requests;
    const std::uint64_t total = make_tensors(s, tensors, requests);
    std::printf("tensors: %zu, total %.1f MiB, mean %.0f KiB\n", requests.size(),
                static_cast<double>(total) / (1 << 20),
                static_cast<double>(total) / requests.size() / 1024);

    const context_options options{s.queue_depth, static_cast<std::size_t>(s.block_size)};
    aio_context context(options);
    parallel_options po;
    po.threads = s.threads;
    po.context = options;
    parallel_context parallel(po);
    batch_options batch;
    batch.max_io_size = static_cast<std::size_t>(s.max_io);

    const std::string path = dir + "/batch_bench.dat";
    file f(path, open_mode::write);
    const batch_outcome first = write_batch(context, f, requests, batch);
    f.sync();
    std::printf("one batch: %zu coalesced I/Os for %zu requests, %.1f MiB bounced\n", first.ios,
                requests.size(), static_cast<double>(first.bounced_bytes) / (1 << 20));

    auto one_by_one = [&](operation op) {
        for (const batch_request& r : requests)
            (void)transfer(context, f, op, r.memory, r.offset);
    };
    auto batched = [&](operation op) {
        const batch_outcome o = transfer_batch(context, f, op, requests, batch);
        if (o.first_failure() != o.results.size())
            throw std::runtime_error("a batched request failed");
    };
    auto batched_parallel = [&](operation op) {
        const batch_outcome o = transfer_batch(parallel, f, op, requests, batch);
        if (o.first_failure() != o.results.size())
            throw std::runtime_error("a batched request failed");
    };
    struct variant {
        const char* label;
        std::function<void(operation)> run;
        std::vector<double> write_gbs, read_gbs;
    };
    const std::string parallel_label = "batched, " + std::to_string(po.threads) + " threads";
    std::vector<variant> variants = {{"one by one (a transfer per tensor)", one_by_one, {}, {}},
                                     {"batched, one context", batched, {}, {}},
                                     {parallel_label.c_str(), batched_parallel, {}, {}}};
    for (unsigned r = 0; r < s.rounds; ++r) {
        for (std::size_t i = 0; i < variants.size(); ++i) {
            variant& v = variants[(i + r) % variants.size()];
            v.write_gbs.push_back(total / sb::seconds_of([&] { v.run(operation::write); }) / 1e9);
            if (cold && !drop_page_cache())
                throw std::runtime_error("dropping the page cache failed: refusing cold reads");
            v.read_gbs.push_back(total / sb::seconds_of([&] { v.run(operation::read); }) / 1e9);
        }
    }
    std::printf("\n%-36s %12s %8s %16s %8s\n", "variant", "write GB/s", "ratio",
                cold ? "cold read GB/s" : "WARM read GB/s", "ratio");
    const double w0 = sb::median(variants[0].write_gbs);
    const double r0 = sb::median(variants[0].read_gbs);
    for (const variant& v : variants) {
        const double w = sb::median(v.write_gbs);
        const double rd = sb::median(v.read_gbs);
        std::printf("%-36s %12.3f %8.2f %16.3f %8.2f\n", v.label, w, w / w0, rd, rd / r0);
    }
    std::printf(
        "(medians of %u interleaved rounds; ratios against one by one; bs=%zuK qd=%u, "
        "max coalesced I/O %zuK)\n",
        s.rounds, options.block_size >> 10, options.queue_depth, batch.max_io_size >> 10);
    ::unlink(path.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return sb::run_main("batch_bench", 1, [&] { return run(argc, argv); });
}

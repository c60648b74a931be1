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

#include "scaling_support.hpp"

using namespace nvmeio;
namespace sb = scaling_bench;

int main(int argc, char** argv) {
    const sb::arguments args(argc, argv,
                             {{"dir", "."},
                              {"count", "4096"},
                              {"min", "64K"},
                              {"max", "4M"},
                              {"block", "1M"},
                              {"depth", "32"},
                              {"max-io", "8M"},
                              {"threads", "4"},
                              {"rounds", "5"},
                              {"seed", "1"}});
    const std::string dir = args.text("dir");
    sb::print_machine(dir);
    args.print();
    const bool cold = sb::drop_page_cache();
    std::printf("page cache: %s\n", cold ? "dropped (sync; echo 1 > drop_caches) before every read"
                                         : "NOT dropped (not root): reads are WARM");

    // Tensor sizes: log-uniform between min and max, in 4 KiB multiples.
    std::mt19937_64 random(args.number("seed"));
    const double lo = std::log(static_cast<double>(args.bytes("min")));
    const double hi = std::log(static_cast<double>(args.bytes("max")));
    std::uniform_real_distribution<double> pick(lo, hi);
    std::vector<aligned_buffer> tensors;
    std::vector<batch_request> requests;
    std::uint64_t offset = 0;
    for (unsigned i = 0; i < args.number("count"); ++i) {
        const auto size = static_cast<std::size_t>(
            align_up(static_cast<std::uint64_t>(std::exp(pick(random))), 4096));
        tensors.emplace_back(size);
        std::memset(tensors.back().data(), static_cast<int>(i & 0xFF), size);
        requests.push_back({tensors.back().data(), size, offset});
        offset += size;
    }
    const std::uint64_t total = offset;
    std::printf("tensors: %zu, total %.1f MiB, mean %.0f KiB\n", requests.size(),
                static_cast<double>(total) / (1 << 20),
                static_cast<double>(total) / requests.size() / 1024);

    const context_options options{args.number("depth"), args.bytes("block")};
    aio_context context(options);
    parallel_options po;
    po.threads = args.number("threads");
    po.context = options;
    parallel_context parallel(po);
    batch_options batch;
    batch.max_io_size = args.bytes("max-io");

    const std::string path = dir + "/batch_bench.dat";
    file f(path, open_mode::write);
    const batch_outcome first = write_batch(context, f, requests, batch);
    f.sync();
    std::printf("one batch: %zu coalesced I/Os for %zu requests, %.1f MiB bounced\n", first.ios,
                requests.size(), static_cast<double>(first.bounced_bytes) / (1 << 20));

    auto one_by_one = [&](operation op) {
        for (const batch_request& r : requests)
            (void)transfer(context, f, op, r.buffer, r.length, r.offset);
    };
    auto batched = [&](operation op) {
        const batch_outcome o = transfer_batch(context, f, op, requests, batch);
        if (o.first_failure() != o.results.size()) std::exit(3);
    };
    auto batched_parallel = [&](operation op) {
        const batch_outcome o = transfer_batch(parallel, f, op, requests, batch);
        if (o.first_failure() != o.results.size()) std::exit(3);
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
    for (unsigned r = 0; r < args.number("rounds"); ++r) {
        for (std::size_t i = 0; i < variants.size(); ++i) {
            variant& v = variants[(i + r) % variants.size()];
            v.write_gbs.push_back(total / sb::seconds_of([&] { v.run(operation::write); }) / 1e9);
            if (cold && !sb::drop_page_cache()) {
                std::fprintf(stderr, "dropping the page cache failed: refusing cold reads\n");
                return 1;
            }
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
        args.number("rounds"), options.block_size >> 10, options.queue_depth,
        batch.max_io_size >> 10);
    ::unlink(path.c_str());
    return 0;
}

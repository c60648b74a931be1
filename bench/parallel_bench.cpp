// Scaling benchmark for nvmeio: intra-op parallelism (P = 1, 2, 4), io_uring against libaio at
// the same block size and queue depth, and striping over D files against one file.
// Every configuration runs once per round, rounds interleave the configurations, and the table
// shows medians and ratios. The page cache is dropped before every read.

#include <cstdio>
#include <cstring>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "scaling_support.hpp"

using namespace nvmeio;
namespace sb = scaling_bench;

namespace {

bool cold = false;  // page cache drops work

void before_read() {
    if (cold && !sb::drop_page_cache()) {
        std::fprintf(stderr, "dropping the page cache failed: refusing to report cold reads\n");
        std::exit(1);
    }
}

double gb_per_s(std::uint64_t bytes, double seconds) {
    return bytes / seconds / 1e9;
}

struct series {
    std::string label;
    std::vector<double> write_gbs;
    std::vector<double> read_gbs;
};

void print_table(const char* title, const std::vector<series>& rows) {
    std::printf("\n%s\n%-34s %12s %12s %12s %12s\n", title, "configuration", "write GB/s", "ratio",
                cold ? "cold read GB/s" : "WARM read GB/s", "ratio");
    const double w0 = sb::median(rows.front().write_gbs);
    const double r0 = sb::median(rows.front().read_gbs);
    for (const series& s : rows) {
        const double w = sb::median(s.write_gbs);
        const double r = sb::median(s.read_gbs);
        std::printf("%-34s %12.3f %12.2f %12.3f %12.2f\n", s.label.c_str(), w, w / w0, r, r / r0);
    }
    std::printf("(medians of %zu interleaved rounds; ratios against the first row)\n",
                rows.front().read_gbs.size());
}

void threads_mode(const std::string& dir, std::size_t size, context_options options,
                  unsigned rounds) {
    const std::string path = dir + "/parallel_bench.threads.dat";
    aligned_buffer buffer(size);
    std::memset(buffer.data(), 0x5A, size);
    file f(path, open_mode::write);
    aio_context warmup(options);
    (void)write(warmup, f, buffer.data(), size, 0);  // allocate the blocks once
    f.sync();
    const unsigned counts[] = {1, 2, 4};
    std::vector<std::unique_ptr<parallel_context>> contexts;
    std::vector<series> rows;
    for (unsigned p : counts) {
        parallel_options po;
        po.threads = p;
        po.context = options;
        contexts.push_back(std::make_unique<parallel_context>(po));
        rows.push_back({"P=" + std::to_string(p) + " (qd " + std::to_string(options.queue_depth) +
                            " per thread)",
                        {},
                        {}});
    }
    for (unsigned r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < contexts.size(); ++i) {
            const std::size_t k = (i + r) % contexts.size();  // rotate who goes first
            rows[k].write_gbs.push_back(gb_per_s(
                size,
                sb::seconds_of([&] { (void)write(*contexts[k], f, buffer.data(), size, 0); })));
            before_read();
            rows[k].read_gbs.push_back(gb_per_s(
                size,
                sb::seconds_of([&] { (void)read(*contexts[k], f, buffer.data(), size, 0); })));
        }
    }
    print_table("intra-op parallelism: one transfer split over P threads", rows);
    ::unlink(path.c_str());
}

template <class Backend>
void backend_round(basic_aio_context<Backend>& context, file& f, aligned_buffer& buffer,
                   std::size_t size, series& row) {
    row.write_gbs.push_back(
        gb_per_s(size, sb::seconds_of([&] { (void)write(context, f, buffer.data(), size, 0); })));
    before_read();
    row.read_gbs.push_back(
        gb_per_s(size, sb::seconds_of([&] { (void)read(context, f, buffer.data(), size, 0); })));
}

void backends_mode(const std::string& dir, std::size_t size, context_options options,
                   unsigned rounds) {
#if NVMEIO_HAS_IO_URING
    std::error_code why;
    if (!io_uring_supported(why)) {
        std::printf("\nio_uring vs libaio: SKIPPED, the kernel refuses io_uring (%s)\n",
                    why.message().c_str());
        return;
    }
    const std::string path = dir + "/parallel_bench.backends.dat";
    aligned_buffer buffer(size);
    std::memset(buffer.data(), 0x3C, size);
    file f(path, open_mode::write);
    {
        aio_context warmup(options);
        (void)write(warmup, f, buffer.data(), size, 0);
        f.sync();
    }
    for (std::size_t block : {options.block_size, std::size_t{64} << 10}) {
        context_options o = options;
        o.block_size = block;
        aio_context libaio(o);
        basic_aio_context<io_uring_backend> uring(o);
        const std::string point =
            " bs=" + std::to_string(block >> 10) + "K qd=" + std::to_string(o.queue_depth);
        std::vector<series> rows = {{"libaio" + point, {}, {}}, {"io_uring" + point, {}, {}}};
        for (unsigned r = 0; r < rounds; ++r) {
            if (r % 2 == 0) {
                backend_round(libaio, f, buffer, size, rows[0]);
                backend_round(uring, f, buffer, size, rows[1]);
            } else {
                backend_round(uring, f, buffer, size, rows[1]);
                backend_round(libaio, f, buffer, size, rows[0]);
            }
        }
        print_table(("io_uring vs libaio, one thread," + point).c_str(), rows);
    }
    ::unlink(path.c_str());
#else
    (void)dir, (void)size, (void)options, (void)rounds;
    std::printf("\nio_uring vs libaio: SKIPPED, built without io_uring\n");
#endif
}

void stripe_mode(const std::string& dir, std::size_t size, context_options options, unsigned rounds,
                 unsigned width, std::size_t stripe_unit) {
    std::vector<std::string> paths;
    for (unsigned d = 0; d < width; ++d)
        paths.push_back(dir + "/parallel_bench.stripe" + std::to_string(d) + ".dat");
    const std::string single_path = dir + "/parallel_bench.single.dat";
    aligned_buffer buffer(size);
    std::memset(buffer.data(), 0x77, size);
    parallel_options po;
    po.threads = width;
    po.context = options;
    parallel_context striped_context(po);
    aio_context single_context(options);
    stripe_set set(paths, open_mode::write, stripe_unit);
    file single(single_path, open_mode::write);
    (void)write(striped_context, set, buffer.data(), size, 0);
    (void)write(single_context, single, buffer.data(), size, 0);
    ::sync();
    std::vector<series> rows = {
        {"one file, one thread", {}, {}},
        {std::to_string(width) + " files striped, unit " + std::to_string(stripe_unit >> 10) + "K",
         {},
         {}}};
    for (unsigned r = 0; r < rounds; ++r) {
        for (int i = 0; i < 2; ++i) {
            const int k = (i + static_cast<int>(r)) % 2;
            if (k == 0) {
                rows[0].write_gbs.push_back(gb_per_s(size, sb::seconds_of([&] {
                                                         (void)write(single_context, single,
                                                                     buffer.data(), size, 0);
                                                     })));
                before_read();
                rows[0].read_gbs.push_back(gb_per_s(size, sb::seconds_of([&] {
                                                        (void)read(single_context, single,
                                                                   buffer.data(), size, 0);
                                                    })));
            } else {
                rows[1].write_gbs.push_back(gb_per_s(size, sb::seconds_of([&] {
                                                         (void)write(striped_context, set,
                                                                     buffer.data(), size, 0);
                                                     })));
                before_read();
                rows[1].read_gbs.push_back(gb_per_s(size, sb::seconds_of([&] {
                                                        (void)read(striped_context, set,
                                                                   buffer.data(), size, 0);
                                                    })));
            }
        }
    }
    print_table("striping: aggregate over D files vs one file (same total bytes)", rows);
    for (const std::string& p : paths)
        ::unlink(p.c_str());
    ::unlink(single_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    const sb::arguments args(argc, argv,
                             {{"dir", "."},
                              {"size", "1G"},
                              {"block", "1M"},
                              {"depth", "32"},
                              {"rounds", "5"},
                              {"mode", "all"},
                              {"files", "4"},
                              {"stripe-unit", "1M"}});
    const std::string dir = args.text("dir");
    const std::size_t size = args.bytes("size");
    const context_options options{args.number("depth"), args.bytes("block")};
    const unsigned rounds = args.number("rounds");
    const std::string mode = args.text("mode");
    sb::print_machine(dir);
    args.print();
    cold = sb::drop_page_cache();
    std::printf("page cache: %s\n", cold ? "dropped (sync; echo 1 > drop_caches) before every read"
                                         : "NOT dropped (not root): reads are WARM");
    std::printf("writes: O_DIRECT, no fdatasync inside the timing\n");
    if (mode == "all" || mode == "threads") threads_mode(dir, size, options, rounds);
    if (mode == "all" || mode == "backends") backends_mode(dir, size, options, rounds);
    if (mode == "all" || mode == "stripe") {
        stripe_mode(dir, size, options, rounds, args.number("files"), args.bytes("stripe-unit"));
    }
    return 0;
}

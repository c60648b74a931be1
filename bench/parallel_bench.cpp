// Scaling benchmark for nvmeio: intra-op parallelism (P = 1, 2, 4), io_uring against libaio at
// the same block size and queue depth, and striping over D files against one file.
// Every configuration runs once per round, rounds interleave the configurations, and the table
// shows medians and ratios. The page cache is dropped before every read.

#include <cstdio>
#include <cstring>
#include <memory>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/stats.hpp"

using namespace nvmeio;
namespace sb = nvmeio::support;

namespace {

bool cold = false;  // page cache drops work

void before_read() {
    std::string why;
    if (cold && !sb::drop_page_cache(why))
        throw std::runtime_error("dropping the page cache failed, refusing cold reads: " + why);
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
    (void)write(warmup, f, buffer, 0);  // allocate the blocks once
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
            rows[k].write_gbs.push_back(
                gb_per_s(size, sb::seconds_of([&] { (void)write(*contexts[k], f, buffer, 0); })));
            before_read();
            rows[k].read_gbs.push_back(
                gb_per_s(size, sb::seconds_of([&] { (void)read(*contexts[k], f, buffer, 0); })));
        }
    }
    print_table("intra-op parallelism: one transfer split over P threads", rows);
    ::unlink(path.c_str());
}

template <class Backend>
void backend_round(basic_aio_context<Backend>& context, file& f, aligned_buffer& buffer,
                   std::size_t size, series& row) {
    row.write_gbs.push_back(
        gb_per_s(size, sb::seconds_of([&] { (void)write(context, f, buffer, 0); })));
    before_read();
    row.read_gbs.push_back(
        gb_per_s(size, sb::seconds_of([&] { (void)read(context, f, buffer, 0); })));
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
        (void)write(warmup, f, buffer, 0);
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
    (void)write(striped_context, set, buffer, 0);
    (void)write(single_context, single, buffer, 0);
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
                rows[0].write_gbs.push_back(gb_per_s(
                    size, sb::seconds_of([&] { (void)write(single_context, single, buffer, 0); })));
                before_read();
                rows[0].read_gbs.push_back(gb_per_s(
                    size, sb::seconds_of([&] { (void)read(single_context, single, buffer, 0); })));
            } else {
                rows[1].write_gbs.push_back(gb_per_s(
                    size, sb::seconds_of([&] { (void)write(striped_context, set, buffer, 0); })));
                before_read();
                rows[1].read_gbs.push_back(gb_per_s(
                    size, sb::seconds_of([&] { (void)read(striped_context, set, buffer, 0); })));
            }
        }
    }
    print_table("striping: aggregate over D files vs one file (same total bytes)", rows);
    for (const std::string& p : paths)
        ::unlink(p.c_str());
    ::unlink(single_path.c_str());
}

struct settings {
    std::string dir = ".";
    std::uint64_t size = std::uint64_t{1} << 30;
    std::uint64_t block_size = std::uint64_t{1} << 20;
    unsigned queue_depth = 32;
    unsigned rounds = 5;
    std::string mode = "all";
    unsigned files = 4;
    std::uint64_t stripe_unit = std::uint64_t{1} << 20;
};

settings parse(int argc, char** argv) {
    settings s;
    CLI::App app{
        "parallel_bench: intra-op parallelism, io_uring vs libaio, striping; medians of "
        "interleaved rounds."};
    app.add_option("--dir", s.dir, "folder for the scratch files")->capture_default_str();
    sb::add_size_option(app, "--size", s.size, "bytes per transfer");
    sb::add_size_option(app, "-b,--block-size", s.block_size, "bytes per request", 1,
                        sb::transfer_flags::max_block_size);
    sb::add_count_option(app, "-q,--queue-depth", s.queue_depth, "requests in flight per thread",
                         1u, 65536u);
    sb::add_count_option(app, "--rounds", s.rounds, "interleaved rounds", 1u, 1000u);
    app.add_option("--mode", s.mode, "what to measure")
        ->check(CLI::IsMember({"all", "threads", "backends", "stripe"}))
        ->capture_default_str();
    sb::add_count_option(app, "--files", s.files, "files striped over (D)", 1u, 64u);
    sb::add_size_option(app, "--stripe-unit", s.stripe_unit, "bytes per stripe unit");
    sb::parse_command_line(app, argc, argv);
    if (s.size > sb::physical_memory_bytes() / 2)
        throw sb::usage_error("--size", "does not fit in half of this machine's memory");
    return s;
}

int run(int argc, char** argv) {
    const settings s = parse(argc, argv);
    const auto size = static_cast<std::size_t>(s.size);
    const context_options options{s.queue_depth, static_cast<std::size_t>(s.block_size)};
    std::string why;
    cold = sb::drop_page_cache(why);
    std::printf("machine: %s, scratch dir: %s\n", sb::describe_machine(s.dir).c_str(),
                s.dir.c_str());
    std::printf(
        "parameters: --size %s --block-size %s --queue-depth %u --rounds %u --mode %s "
        "--files %u --stripe-unit %s\n",
        sb::format_size(s.size).c_str(), sb::format_size(s.block_size).c_str(), s.queue_depth,
        s.rounds, s.mode.c_str(), s.files, sb::format_size(s.stripe_unit).c_str());
    std::printf("page cache: %s\n", cold ? "dropped (sync; echo 1 > drop_caches) before every read"
                                         : "NOT dropped (not root): reads are WARM");
    std::printf("writes: O_DIRECT, no fdatasync inside the timing\n");
    if (s.mode == "all" || s.mode == "threads") threads_mode(s.dir, size, options, s.rounds);
    if (s.mode == "all" || s.mode == "backends") backends_mode(s.dir, size, options, s.rounds);
    if (s.mode == "all" || s.mode == "stripe") {
        stripe_mode(s.dir, size, options, s.rounds, s.files,
                    static_cast<std::size_t>(s.stripe_unit));
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return sb::run_main("parallel_bench", 1, [&] { return run(argc, argv); });
}

// nvmeio-demo: the main job. Writes the generated pattern (about 1 GiB by default) with O_DIRECT,
// then reads it back cold, interleaved, with a plain buffered read() loop, the sequential
// strategy and the overlapped strategy; validates every byte of every read; prints the perf
// table and the median GB/s of each next to the buffered read.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"
#include "support/reference_read.hpp"
#include "support/stats.hpp"

namespace support = nvmeio::support;

namespace {

struct settings {
    std::string path = "nvmeio-demo/demo.bin";
    std::uint64_t size = std::uint64_t{1} << 30;
    unsigned queue_depth = 32;
    std::uint64_t block_size = std::uint64_t{1} << 20;
    unsigned rounds = 3;
    bool keep = false;
};

settings parse(int argc, char** argv) {
    settings s;
    CLI::App app{
        "Writes a generated file with O_DIRECT, reads it back cold with a buffered read() loop "
        "and\nwith nvmeio's sequential and overlapped strategies (interleaved; the page cache is "
        "dropped\nbefore each read when run as root), validates every byte and prints the perf "
        "table."};
    app.add_option("--file", s.path, "the file to write and read")->capture_default_str();
    support::add_size_option(app, "--size", s.size, "file size (K, M, G suffixes)");
    support::add_count_option(app, "-q,--queue-depth", s.queue_depth, "requests in flight", 1u,
                              65536u);
    support::add_size_option(app, "-b,--block-size", s.block_size, "bytes per request", 1,
                             support::transfer_flags::max_block_size);
    support::add_count_option(app, "--rounds", s.rounds, "interleaved rounds", 1u, 1000u);
    app.add_flag("--keep", s.keep, "keep the file afterwards");
    support::parse_command_line(app, argc, argv);
    if (s.size > support::physical_memory_bytes() / 2) {
        throw support::usage_error("--size", support::format_size(s.size) +
                                                 " bytes do not fit in half of this machine's "
                                                 "memory");
    }
    return s;
}

bool drop_page_cache() {
    std::string why;
    return support::drop_page_cache(why);
}

struct mode {
    const char* label;
    bool direct;
    nvmeio::strategy_kind strategy;
    std::vector<double> gb_per_s;
};

// Reads the file back once per mode per round, validating every byte; true when all matched.
bool read_rounds(const settings& s, bool cold, nvmeio::aio_context& context,
                 nvmeio::aligned_buffer& buffer, std::vector<mode>& modes,
                 std::vector<nvmeio::perf_row>& rows) {
    const auto size = static_cast<std::size_t>(s.size);
    bool all_valid = true;
    for (unsigned round = 0; round < s.rounds; ++round) {
        for (mode& m : modes) {
            std::memset(buffer.data(), 0, size);
            if (cold && !drop_page_cache())
                throw std::runtime_error("dropping the page cache failed");
            nvmeio::transfer_perf perf;
            if (m.direct) {
                nvmeio::file in(s.path, nvmeio::open_mode::read, nvmeio::direct_io::on);
                perf = nvmeio::read(context, in, buffer, 0,
                                    {m.strategy, nvmeio::submit_mode::block, true})
                           .perf;
            } else {
                perf = support::buffered_read(s.path, buffer.data(), size).perf;
            }
            const nvmeio::mismatch_summary wrong = support::pattern_mismatches(buffer.data(), size);
            if (perf.bytes != size || !wrong.equal()) {
                all_valid = false;
                std::cout << "VALIDATION FAILED: " << m.label << " read " << perf.bytes
                          << " bytes, " << wrong.count << " bytes differ, the first at "
                          << wrong.first << "\n";
            }
            m.gb_per_s.push_back(perf.gb_per_s());
            rows.push_back({std::string(m.label) + " #" + std::to_string(round + 1), perf});
        }
    }
    return all_valid;
}

int run(int argc, char** argv) {
    const settings s = parse(argc, argv);
    const auto size = static_cast<std::size_t>(s.size);
    if (s.path.find('/') != std::string::npos)
        ::mkdir(s.path.substr(0, s.path.find_last_of('/')).c_str(), 0755);

    const bool cold = drop_page_cache();
    std::cout << "nvmeio " << support::nvmeio_version() << " demo\n"
              << "machine: " << support::describe_machine(s.path) << "\n"
              << "file: " << s.path << ", " << support::format_size(s.size)
              << " bytes; queue depth " << s.queue_depth << ", block "
              << support::format_size(s.block_size) << ", " << s.rounds << " interleaved rounds\n"
              << (cold ? "page cache dropped before every read (cold)\n"
                       : "NOT cold: could not drop the page cache (run as root); reads may be "
                         "served from memory\n");

    // Touched up front and reused by every read: huge pages pay off (docs/PERFORMANCE.md, "What a
    // user's first load costs"), as in the tools' --huge-pages auto.
    nvmeio::aligned_buffer buffer(size, 4096, nvmeio::buffer_options{true, true, false});
    nvmeio::aio_context context({s.queue_depth, static_cast<std::size_t>(s.block_size)});
    support::fill_pattern(buffer.data(), size);
    std::vector<nvmeio::perf_row> rows;
    {
        nvmeio::file out(s.path, nvmeio::open_mode::write, nvmeio::direct_io::on);
        const nvmeio::transfer_result written =
            nvmeio::write(context, out, buffer, 0,
                          {nvmeio::strategy_kind::overlapped, nvmeio::submit_mode::block, true});
        out.sync();
        rows.push_back({"write overlapped/block (O_DIRECT)", written.perf});
        std::cout << "alignment: memory " << out.alignment().memory << ", offset "
                  << out.alignment().offset << " (" << out.alignment().source << ")\n";
    }

    std::vector<mode> modes = {
        {"buffered read() loop", false, nvmeio::strategy_kind::sequential, {}},
        {"read sequential/block (O_DIRECT)", true, nvmeio::strategy_kind::sequential, {}},
        {"read overlapped/block (O_DIRECT)", true, nvmeio::strategy_kind::overlapped, {}},
    };
    const bool all_valid = read_rounds(s, cold, context, buffer, modes, rows);
    std::cout << "\n";
    nvmeio::print_table(std::cout, rows);
    const double reference = support::median(modes[0].gb_per_s);
    std::cout << "\nmedian of " << s.rounds << " " << (cold ? "cold" : "WARM") << " reads:\n";
    for (const mode& m : modes) {
        const double rate = support::median(m.gb_per_s);
        std::printf("  %-34s %7.3f GB/s  %5.2fx buffered\n", m.label, rate,
                    reference > 0 ? rate / reference : 0.0);
    }
    std::cout << (all_valid ? "validation: every byte of every read matched the generated pattern\n"
                            : "validation: MISMATCH (see above)\n");
    if (!s.keep) ::unlink(s.path.c_str());
    return all_valid ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("nvmeio-demo", 2, [&] { return run(argc, argv); });
}

// nvmeio-demo: the main job. Writes a generated file (about 1 GiB by default) with O_DIRECT,
// then reads it back cold, interleaved, with a plain buffered read() loop, the sequential
// strategy and the overlapped strategy; validates every byte of every O_DIRECT read; prints the
// perf table and the median GB/s of each next to the buffered read.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "pattern.hpp"

namespace {

struct settings {
    std::string path = "nvmeio-demo/demo.bin";
    std::size_t size_mib = 1024;
    unsigned queue_depth = 32;
    std::size_t block_kib = 1024;
    unsigned rounds = 3;
    bool keep = false;
};

bool drop_page_cache() {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    drop << "1\n";
    drop.flush();
    return static_cast<bool>(drop);
}

// A plain buffered read() loop, the reference every user already has.
nvmeio::transfer_perf buffered_read(const std::string& path, std::byte* buffer, std::size_t n) {
    const auto start = std::chrono::steady_clock::now();
    nvmeio::file f(path, nvmeio::open_mode::read, nvmeio::direct_io::off);
    const std::size_t chunk = std::size_t{1} << 20;
    std::size_t done = 0;
    while (done < n) {
        const std::size_t got = f.read_at(buffer + done, std::min(chunk, n - done), done);
        if (got == 0) break;
        done += got;
    }
    nvmeio::transfer_perf p;
    p.bytes = done;
    p.elapsed_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    return p;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 != 0 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "unknown";
}

}  // namespace

int main(int argc, char** argv) try {
    settings s;
    CLI::App app{
        "Writes a generated file with O_DIRECT, reads it back cold with a buffered read() loop "
        "and\n"
        "with nvmeio's sequential and overlapped strategies (interleaved; the page cache is "
        "dropped\n"
        "before each read when run as root), validates every byte and prints the perf table."};
    app.add_option("--file", s.path, "the file to write and read")->capture_default_str();
    app.add_option("--size-mib", s.size_mib, "file size in MiB")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--queue-depth", s.queue_depth, "requests in flight")->capture_default_str();
    app.add_option("--block-kib", s.block_kib, "request size in KiB")->capture_default_str();
    app.add_option("--rounds", s.rounds, "interleaved rounds")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_flag("--keep", s.keep, "keep the file afterwards");
    CLI11_PARSE(app, argc, argv);
    const std::size_t size = s.size_mib << 20;
    const std::size_t block = s.block_kib << 10;
    const std::string dir = s.path.substr(0, s.path.find_last_of('/'));
    if (s.path.find('/') != std::string::npos) ::mkdir(dir.c_str(), 0755);

    const bool cold = drop_page_cache();
    std::cout << "nvmeio " << NVMEIO_VERSION_MAJOR << "." << NVMEIO_VERSION_MINOR << "."
              << NVMEIO_VERSION_PATCH << " demo\n"
              << "machine: " << cpu_model() << ", " << ::sysconf(_SC_NPROCESSORS_ONLN) << " CPUs\n"
              << "file: " << s.path << ", " << s.size_mib << " MiB; queue depth " << s.queue_depth
              << ", block " << s.block_kib << " KiB, " << s.rounds << " interleaved rounds\n"
              << (cold ? "page cache dropped before every read (cold)\n"
                       : "NOT cold: could not drop the page cache (run as root); reads may be "
                         "served from memory\n");

    nvmeio::aligned_buffer buffer(size, 4096, nvmeio::buffer_options{true, true, false});
    nvmeio::aio_context context({s.queue_depth, block});

    example::generate(buffer.data(), size);
    std::vector<nvmeio::perf_row> rows;
    {
        nvmeio::file out(s.path, nvmeio::open_mode::write, nvmeio::direct_io::on);
        auto written =
            nvmeio::write(context, out, buffer.data(), size, 0,
                          {nvmeio::strategy_kind::overlapped, nvmeio::submit_mode::block, true});
        out.sync();
        rows.push_back({"write overlapped/block (O_DIRECT)", written.perf});
        std::cout << "alignment: memory " << out.alignment().memory << ", offset "
                  << out.alignment().offset << " (" << out.alignment().source << ")\n";
    }

    struct mode {
        const char* label;
        bool direct;
        nvmeio::strategy_kind strategy;
        std::vector<double> gb_per_s;
    };
    std::vector<mode> modes = {
        {"buffered read() loop", false, nvmeio::strategy_kind::sequential, {}},
        {"read sequential/block (O_DIRECT)", true, nvmeio::strategy_kind::sequential, {}},
        {"read overlapped/block (O_DIRECT)", true, nvmeio::strategy_kind::overlapped, {}},
    };
    bool all_valid = true;
    for (unsigned round = 0; round < s.rounds; ++round) {
        for (mode& m : modes) {
            std::memset(buffer.data(), 0, size);
            if (cold && !drop_page_cache())
                throw std::runtime_error("dropping the page cache failed");
            nvmeio::transfer_perf perf;
            if (m.direct) {
                nvmeio::file in(s.path, nvmeio::open_mode::read, nvmeio::direct_io::on);
                perf = nvmeio::read(context, in, buffer.data(), size, 0,
                                    {m.strategy, nvmeio::submit_mode::block, true})
                           .perf;
            } else {
                perf = buffered_read(s.path, buffer.data(), size);
            }
            const std::size_t wrong = example::first_wrong(buffer.data(), size);
            if (perf.bytes != size || wrong != size) {
                all_valid = false;
                std::cout << "VALIDATION FAILED: " << m.label << " read " << perf.bytes
                          << " bytes, first wrong byte at " << wrong << "\n";
            }
            m.gb_per_s.push_back(perf.gb_per_s());
            rows.push_back({std::string(m.label) + " #" + std::to_string(round + 1), perf});
        }
    }
    std::cout << "\n";
    nvmeio::print_table(std::cout, rows);
    const double reference = median(modes[0].gb_per_s);
    std::cout << "\nmedian of " << s.rounds << " " << (cold ? "cold" : "WARM") << " reads:\n";
    for (const mode& m : modes) {
        char line[160];
        std::snprintf(line, sizeof line, "  %-34s %7.3f GB/s  %5.2fx buffered\n", m.label,
                      median(m.gb_per_s), reference > 0 ? median(m.gb_per_s) / reference : 0.0);
        std::cout << line;
    }
    std::cout << (all_valid ? "validation: every byte of every read matched the generated pattern\n"
                            : "validation: MISMATCH (see above)\n");
    if (!s.keep) ::unlink(s.path.c_str());
    return all_valid ? 0 : 1;
} catch (const std::exception& e) {
    std::cerr << "nvmeio-demo: " << e.what() << "\n";
    return 2;
}

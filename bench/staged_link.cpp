// staged_link: one staged transfer of a whole file through a ring to a simulated link
// (support/simulated_link.hpp: copies at a set rate into a stand-in for a GPU's memory), for
// bench/staged_link_compare.py. A read moves file -> ring -> link; a write link -> ring -> file
// (an existing file, rewritten in place), then fdatasync. --context async keeps several
// windows' I/O in flight (up to its threads); aio moves one window at a time. Prints the
// seconds from the run's start to its end (the write's sync included) and the peak RSS growth
// over the process's RSS before the ring and the stand-in were made, in MiB.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "support/cli.hpp"
#include "support/simulated_link.hpp"

using namespace nvmeio;
namespace sb = nvmeio::support;

namespace {

enum class context_kind { aio, async };

struct settings {
    std::string path;
    operation op = operation::read;
    context_kind context = context_kind::async;
    double link_rate = 0;  // bytes per second; 0: unpaced
    std::uint64_t stand_in = 256u << 20;
    unsigned slots = 4;
    std::uint64_t slot_size = 64u << 20;
    unsigned threads = 4;
    unsigned queue_depth = 32;
    std::uint64_t block = 1u << 20;
};

settings parse(int argc, char** argv) {
    settings s;
    CLI::App app{"staged_link: a whole file through a staging ring to a simulated link"};
    app.add_option("--file", s.path,
                   "an existing file (a write replaces its contents with the stand-in's bytes)")->required();
    sb::add_enum_option(app, "--op", s.op, sb::operation_names(), "read or write");
    static const sb::enum_names<context_kind> contexts{{"aio", context_kind::aio},
                                                       {"async", context_kind::async}};
    sb::add_enum_option(app, "--context", s.context, contexts,
                        "aio: one window at a time; async: several in flight");
    app.add_option("--link-rate", s.link_rate, "the link's bytes per second (0: unpaced)")
        ->check(CLI::NonNegativeNumber);
    sb::add_size_option(app, "--stand-in", s.stand_in, "bytes of the device's stand-in", 4096,
                        std::uint64_t{1} << 40);
    sb::add_count_option(app, "--slots", s.slots, "ring slots", 1u, 1024u);
    sb::add_size_option(app, "--slot-size", s.slot_size, "bytes per slot", 4096,
                        std::uint64_t{1} << 32);
    sb::add_count_option(app, "--threads", s.threads, "async workers", 1u, 256u);
    sb::add_count_option(app, "-q,--queue-depth", s.queue_depth, "requests in flight", 1u, 65536u);
    sb::add_size_option(app, "-b,--block-size", s.block, "bytes per request", 4096,
                        sb::transfer_flags::max_block_size);
    sb::parse_command_line(app, argc, argv);
    return s;
}

// The process's resident set ("VmRSS") or its peak ("VmHWM"), in bytes.
double status_bytes(const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind(field, 0) == 0) return std::stod(line.substr(line.find(':') + 1)) * 1024;
    }
    return 0;
}

template <class Context>
double run(const settings& s, Context& context) {
    const double rss_before = status_bytes("VmRSS");
    sb::simulated_link link(s.link_rate, static_cast<std::size_t>(s.stand_in));
    staging_ring<sb::simulated_link> ring(link, {s.slots, static_cast<std::size_t>(s.slot_size)});
    file f(s.path, s.op == operation::read ? open_mode::read : open_mode::read_write);
    const std::uint64_t size = f.size();
    // One range per stand-in's worth, as a model's tensors would be; device addresses start at
    // the stand-in's size (offset 0 of it: a plan refuses address 0).
    std::vector<staged_range> ranges;
    for (std::uint64_t at = 0; at < size; at += s.stand_in) {
        const std::uint64_t n = std::min<std::uint64_t>(s.stand_in, size - at);
        ranges.push_back({0, at, static_cast<std::size_t>(n), s.stand_in, false});
    }
    const auto start = std::chrono::steady_clock::now();
    if (s.op == operation::read) {
        (void)staged_read(context, ring, {&f}, ranges);
    } else {
        (void)staged_write(context, ring, {&f}, ranges);
        if (::fdatasync(f.native_handle()) != 0) {
            throw std::system_error(errno, std::system_category(), "fdatasync " + s.path);
        }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("seconds %.6f\nrss_growth_mib %.1f\nbytes %llu\n", seconds,
                (status_bytes("VmHWM") - rss_before) / (1 << 20),
                static_cast<unsigned long long>(size));
    return seconds;
}

}  // namespace

int main(int argc, char** argv) {
    return sb::run_main("staged_link", 1, [&] {
        const settings s = parse(argc, argv);
        if (s.context == context_kind::async) {
            async_context context({s.threads, {s.queue_depth, static_cast<std::size_t>(s.block)}});
            (void)run(s, context);
        } else {
            aio_context context({s.queue_depth, static_cast<std::size_t>(s.block)});
            (void)run(s, context);
        }
        return 0;
    });
}

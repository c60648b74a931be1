// kv_blocks: one run of the KV-cache pattern for bench/kv_batch_compare.py. N blocks of one size
// at every other block-sized slot of an existing file (a KV store's scattered blocks), moved
// from C++ as one read_batch / write_batch, or one transfer per block, on one context; the
// blocks lie in one slab (a KV cache's layout), 4 KiB-aligned or 64 bytes off (where torch's
// allocator puts a tensor), or share 2 x queue-depth aligned buffers in turn (fio's layout: its
// few buffers stay in the CPU's caches; the bytes are not meaningful). The slab is touched once
// before the clock starts (a KV pool in use), or fresh: mapped anew for each pass and never
// touched (memory a caller has just made, as torch.empty gives). Prints the seconds spent in the
// calls, summed over --loops passes over the blocks (a fresh slab is mapped and unmapped between
// them, off the clock).

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"
#include "support/stats.hpp"

using namespace nvmeio;
namespace sb = nvmeio::support;

namespace {

enum class method { batch, calls };
enum class placement { aligned, unaligned, ring };
enum class destination { touched, fresh };

struct settings {
    std::string path;
    operation op = operation::read;
    method how = method::batch;
    placement memory = placement::aligned;
    destination slab = destination::touched;
    sb::backend_kind backend = sb::backend_kind::libaio;
    unsigned blocks = 1024;
    std::uint64_t block = 64u << 10;
    std::uint64_t request_size = 1u << 20;
    unsigned queue_depth = 32;
    unsigned loops = 1;
};

settings parse(int argc, char** argv) {
    settings s;
    CLI::App app{
        "kv_blocks: scattered KV blocks moved as one batch or one transfer each; prints "
        "seconds"};
    app.add_option("--file", s.path, "an existing file reaching the last block")->required();
    sb::add_enum_option(app, "--op", s.op, sb::operation_names(), "read or write");
    static const sb::enum_names<method> methods{{"batch", method::batch}, {"calls", method::calls}};
    sb::add_enum_option(app, "--method", s.how, methods, "one batch, or one transfer per block");
    static const sb::enum_names<placement> placements{{"aligned", placement::aligned},
                                                      {"unaligned", placement::unaligned},
                                                      {"ring", placement::ring}};
    sb::add_enum_option(app, "--memory", s.memory, placements,
                        "blocks 4 KiB-aligned, 64 bytes off (batch only), or sharing a few "
                        "buffers as fio's do");
    static const sb::enum_names<destination> destinations{{"touched", destination::touched},
                                                          {"fresh", destination::fresh}};
    sb::add_enum_option(app, "--destination", s.slab, destinations,
                        "slab touched before the clock starts, or mapped anew for each pass and "
                        "never touched");
    sb::add_enum_option(app, "--backend", s.backend, sb::backend_names(), "I/O backend");
    sb::add_count_option(app, "--blocks", s.blocks, "blocks", 1u, 1u << 24);
    sb::add_size_option(app, "--block-size", s.block, "bytes per block", 4096, 1u << 30);
    sb::add_size_option(app, "-b,--request-size", s.request_size, "bytes per request", 4096,
                        sb::transfer_flags::max_block_size);
    sb::add_count_option(app, "-q,--queue-depth", s.queue_depth, "requests in flight", 1u, 65536u);
    sb::add_count_option(app, "--loops", s.loops, "passes over the blocks", 1u, 1000000u);
    sb::parse_command_line(app, argc, argv);
    if (s.block % 4096 != 0)  // every block's offset must be one O_DIRECT takes
        throw sb::usage_error("--block-size", "must be a multiple of 4 KiB");
    if (s.how == method::calls && s.memory == placement::unaligned)
        throw sb::usage_error("--memory", "unaligned needs --method batch (a transfer refuses it)");
    if (s.block * s.blocks > sb::physical_memory_bytes() / 2)
        throw sb::usage_error("--blocks", "x --block-size does not fit in half of this memory");
    return s;
}

// Anonymous memory mapped for one pass and never touched before it; unmapped at the end.
class fresh_slab {
  public:
    explicit fresh_slab(std::size_t bytes) : bytes_(bytes) {
        void* p =
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
        data_ = static_cast<std::byte*>(p);
    }
    fresh_slab(const fresh_slab&) = delete;
    fresh_slab& operator=(const fresh_slab&) = delete;
    ~fresh_slab() { ::munmap(data_, bytes_); }
    [[nodiscard]] std::byte* data() const noexcept { return data_; }

  private:
    std::size_t bytes_;
    std::byte* data_;
};

template <class Backend>
double run_on(const settings& s) {
    file f(s.path, s.op == operation::read ? open_mode::read : open_mode::read_write);
    const auto block = static_cast<std::size_t>(s.block);
    if (f.size() < (2 * s.blocks - 1) * s.block)
        throw sb::usage_error("--file", "ends before the last block (2 x --blocks - 1 blocks)");
    const std::size_t skew = s.memory == placement::unaligned ? 64 : 0;
    const std::size_t buffers =
        s.memory == placement::ring ? std::min<std::size_t>(2 * s.queue_depth, s.blocks) : s.blocks;
    const std::size_t slab_bytes = buffers * block + skew;
    aligned_buffer touched(s.slab == destination::touched ? slab_bytes : 0);
    if (s.slab == destination::touched) sb::fill_pattern(touched.data(), touched.size(), 0);
    const auto requests_in = [&](std::byte* slab) {
        std::vector<batch_request> requests;
        for (std::size_t i = 0; i < s.blocks; ++i) {
            requests.push_back({memory(slab + skew + i % buffers * block, block), 2 * i * block});
        }
        return requests;
    };
    basic_aio_context<Backend> context(
        context_options{s.queue_depth, static_cast<std::size_t>(s.request_size)});
    const auto pass = [&](const std::vector<batch_request>& requests) {
        return sb::seconds_of([&] {
            if (s.how == method::batch) {
                (void)transfer_batch(context, f, s.op, requests);
                return;
            }
            for (const batch_request& r : requests)
                (void)transfer(context, f, s.op, r.memory, r.offset);
        });
    };
    double seconds = 0;
    for (unsigned loop = 0; loop < s.loops; ++loop) {
        if (s.slab == destination::touched) {
            seconds += pass(requests_in(touched.data()));
        } else {
            const fresh_slab slab(slab_bytes);
            seconds += pass(requests_in(slab.data()));
        }
    }
    return seconds;
}

int run(int argc, char** argv) {
    const settings s = parse(argc, argv);
    const double seconds = sb::with_backend(
        s.backend, [&](auto tag) { return run_on<typename decltype(tag)::type>(s); });
    std::printf("%.6f\n", seconds);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return sb::run_main("kv_blocks", 1, [&] { return run(argc, argv); });
}

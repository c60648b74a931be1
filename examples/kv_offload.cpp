// kv_offload: dumps the KV blocks of a paged attention cache (layers x {K, V} x sequences x
// blocks of a few dozen KiB, scattered over a block pool in memory) to a file and reloads them,
// layer by layer, with a simulated compute step per layer (the accelerator's time: the CPU
// sleeps), by three methods run cold and interleaved:
//  - per-block: one nvmeio transfer per block;
//  - batch: one write_batch/read_batch per layer, which coalesces the layer's blocks into large
//    I/Os (IO aggregation);
//  - async: each layer's blocks gathered into a staging buffer and moved by one async transfer
//    that overlaps the next layer's compute step (dump) or is prefetched during the previous
//    one (reload).
// The file is truncated and allocated before every dump (untimed, as a store preallocates its
// offload space) and checked byte for byte after it; the pool is wiped before every reload
// and every block checked after it. Exit 0 when every byte was right, 1 otherwise, 2 for a bad
// command line or an I/O error.

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runs.hpp"
#include "support/cli.hpp"
#include "support/pattern.hpp"

namespace support = nvmeio::support;

namespace {

enum class method { per_block, batch, async };

const support::enum_names<method>& method_names() {
    static const support::enum_names<method> names{
        {"per-block", method::per_block}, {"batch", method::batch}, {"async", method::async}};
    return names;
}

struct plan {
    std::string path;
    unsigned layers = 8;
    unsigned sequences = 16;
    unsigned blocks_per_sequence = 16;
    std::uint64_t kv_block = 32 << 10;
    double compute_seconds = 0.002;  // per layer
    std::vector<method> methods{method::per_block, method::batch, method::async};
    unsigned rounds = 3;
    unsigned threads = 2;
    std::uint64_t max_io_size = 8 << 20;
    bool warm = false;
    std::uint64_t seed = 1;
    support::transfer_flags flags;

    [[nodiscard]] std::size_t blocks_per_layer() const {
        return std::size_t{2} * sequences * blocks_per_sequence;
    }
    [[nodiscard]] std::size_t layer_bytes() const { return blocks_per_layer() * kv_block; }
    [[nodiscard]] std::uint64_t total_bytes() const {
        return static_cast<std::uint64_t>(layers) * layer_bytes();
    }
};

plan read_command_line(int argc, char** argv) {
    plan p;
    CLI::App app{
        "Dump and reload the KV blocks of a paged cache: one I/O per block against "
        "batched (aggregated) and async transfers, cold and interleaved."};
    app.add_option("file", p.path, "the file the cache is offloaded to")->required();
    support::add_count_option(app, "--layers", p.layers, "transformer layers", 1u, 4096u);
    support::add_count_option(app, "--sequences", p.sequences, "sequences in the cache", 1u,
                              1u << 20);
    support::add_count_option(app, "--blocks-per-sequence", p.blocks_per_sequence,
                              "KV blocks per sequence and layer", 1u, 1u << 20);
    support::add_size_option(app, "--kv-block", p.kv_block,
                             "bytes per KV block (a multiple of 4K unless --direct off)", 1,
                             std::uint64_t{1} << 30);
    support::add_seconds_option(app, "--compute", p.compute_seconds,
                                "simulated compute step per layer, in seconds (default 0.002)");
    support::add_enum_list_option(app, "--method", p.methods, method_names(),
                                  "methods to compare, comma-separated");
    support::add_count_option(app, "--rounds", p.rounds, "interleaved rounds", 1u, 1000u);
    support::add_count_option(app, "--threads", p.threads, "async: worker threads", 1u, 256u);
    support::add_size_option(app, "--max-io-size", p.max_io_size,
                             "batch: largest coalesced I/O (batch_options::max_io_size)", 4096,
                             std::uint64_t{1} << 30);
    support::add_count_option(app, "--seed", p.seed, "block placement and bytes", std::uint64_t{0});
    app.add_flag("--warm", p.warm, "do not drop the page cache before each run (reported WARM)");
    p.flags.add_to(app);
    support::parse_command_line(app, argc, argv);
    p.flags.check();
    if (nvmeio::may_use_o_direct(p.flags.direct) && p.kv_block % 4096 != 0)
        throw support::usage_error("--kv-block", "must be a multiple of 4K for O_DIRECT");
    const double bytes = static_cast<double>(p.layers) * static_cast<double>(p.blocks_per_layer()) *
                         static_cast<double>(p.kv_block);
    if (bytes * 1.3 > static_cast<double>(support::physical_memory_bytes())) {
        throw support::usage_error("--layers", "a cache of " + std::to_string(bytes / 1e9) +
                                                   " GB does not fit in this machine's memory");
    }
    return p;
}

// The paged cache: every block lives in a slot of one pool, at a random place; block i's file
// offset is i * kv_block (layer-major, then K/V, sequence, block), and its bytes are the
// generated pattern at that offset.
struct kv_cache {
    std::size_t block_bytes = 0;
    std::size_t slot_bytes = 0;
    nvmeio::aligned_buffer pool;
    std::vector<std::size_t> slot_of;  // block -> slot

    kv_cache(const plan& p)
        : block_bytes(static_cast<std::size_t>(p.kv_block)),
          slot_bytes(static_cast<std::size_t>(nvmeio::align_up(p.kv_block, 4096))) {
        const std::size_t blocks = p.layers * p.blocks_per_layer();
        const std::size_t slots = blocks + blocks / 4;  // free slots, as a paged cache has
        pool = nvmeio::aligned_buffer(slots * slot_bytes, 4096, {true, false, false});
        std::vector<std::size_t> order(slots);
        for (std::size_t i = 0; i < slots; ++i)
            order[i] = i;
        std::shuffle(order.begin(), order.end(), std::mt19937_64(p.seed));
        slot_of.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(blocks));
    }
    [[nodiscard]] std::byte* block(std::size_t i) { return pool.data() + slot_of[i] * slot_bytes; }
    // Block i's bytes in the pool, as a transfer's memory.
    [[nodiscard]] nvmeio::mutable_memory block_memory(std::size_t i) {
        return nvmeio::memory(pool).slice(slot_of[i] * slot_bytes, block_bytes);
    }
    [[nodiscard]] std::uint64_t offset(std::size_t i) const {
        return static_cast<std::uint64_t>(i) * block_bytes;
    }
};

// Sleeps for the simulated compute step; returns the seconds it took.
double compute_step(double seconds) {
    const double start = example::now_seconds();
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return example::now_seconds() - start;
}

template <class Backend>
struct engines {
    nvmeio::basic_aio_context<Backend> context;
    nvmeio::basic_async_context<Backend> async;
    std::vector<nvmeio::aligned_buffer> staging;  // two layers, for async
};

std::vector<nvmeio::batch_request> layer_requests(kv_cache& cache, const plan& p,
                                                  std::size_t layer) {
    std::vector<nvmeio::batch_request> requests;
    for (std::size_t k = 0; k < p.blocks_per_layer(); ++k) {
        const std::size_t i = layer * p.blocks_per_layer() + k;
        requests.push_back({cache.block_memory(i), cache.offset(i)});
    }
    return requests;
}

// Copies a layer's blocks between the pool and a staging buffer laid out as the file.
void gather(kv_cache& cache, const plan& p, std::size_t layer, std::byte* staging, bool into) {
    for (std::size_t k = 0; k < p.blocks_per_layer(); ++k) {
        std::byte* block = cache.block(layer * p.blocks_per_layer() + k);
        std::byte* staged = staging + k * cache.block_bytes;
        if (into) {
            std::memcpy(staged, block, cache.block_bytes);
        } else {
            std::memcpy(block, staged, cache.block_bytes);
        }
    }
}

// Writes every layer (compute, then offload); returns the compute seconds.
template <class Backend>
double dump(engines<Backend>& e, kv_cache& cache, const plan& p, method m, nvmeio::file& f) {
    double computed = 0;
    std::vector<nvmeio::transfer_handle> pending(2);
    for (std::size_t layer = 0; layer < p.layers; ++layer) {
        computed += compute_step(p.compute_seconds);
        const std::vector<nvmeio::batch_request> requests = layer_requests(cache, p, layer);
        if (m == method::per_block) {
            for (const nvmeio::batch_request& r : requests)
                (void)nvmeio::write(e.context, f, r.memory, r.offset, p.flags.config(false));
        } else if (m == method::batch) {
            nvmeio::batch_options options;
            options.config = p.flags.config(false);
            options.max_io_size = static_cast<std::size_t>(p.max_io_size);
            (void)nvmeio::write_batch(e.context, f, requests, options);
        } else {
            nvmeio::transfer_handle& slot = pending[layer % 2];
            (void)slot.wait();  // the write two layers back, before its buffer is reused
            gather(cache, p, layer, e.staging[layer % 2].data(), true);
            slot = nvmeio::async_write(e.async, f, e.staging[layer % 2], layer * p.layer_bytes(),
                                       p.flags.config(false));
        }
    }
    for (nvmeio::transfer_handle& h : pending)
        (void)h.wait();
    return computed;
}

// Reads every layer back (reload, then compute); returns the compute seconds.
template <class Backend>
double reload(engines<Backend>& e, kv_cache& cache, const plan& p, method m, nvmeio::file& f) {
    double computed = 0;
    std::vector<nvmeio::transfer_handle> pending(2);
    const auto prefetch = [&](std::size_t layer) {
        pending[layer % 2] = nvmeio::async_read(e.async, f, e.staging[layer % 2],
                                                layer * p.layer_bytes(), p.flags.config(false));
    };
    if (m == method::async) prefetch(0);
    for (std::size_t layer = 0; layer < p.layers; ++layer) {
        const std::vector<nvmeio::batch_request> requests = layer_requests(cache, p, layer);
        std::size_t moved = 0;
        if (m == method::per_block) {
            for (const nvmeio::batch_request& r : requests)
                moved +=
                    nvmeio::read(e.context, f, r.memory, r.offset, p.flags.config(false)).bytes;
        } else if (m == method::batch) {
            nvmeio::batch_options options;
            options.config = p.flags.config(false);
            options.max_io_size = static_cast<std::size_t>(p.max_io_size);
            for (const nvmeio::batch_result& r :
                 nvmeio::read_batch(e.context, f, requests, options).results)
                moved += r.bytes;
        } else {
            if (layer + 1 < p.layers) prefetch(layer + 1);
            moved = pending[layer % 2].wait().bytes;
            gather(cache, p, layer, e.staging[layer % 2].data(), false);
        }
        if (moved != p.layer_bytes()) {
            throw nvmeio::io_error({std::make_error_code(std::errc::io_error),
                                    "read (the file ended early)", p.path, layer * p.layer_bytes(),
                                    p.layer_bytes()});
        }
        computed += compute_step(p.compute_seconds);
    }
    return computed;
}

// Checks the file holds the pattern over exactly total_bytes(), read back with buffered I/O.
std::string check_file(const plan& p) {
    nvmeio::file f(p.path, nvmeio::open_mode::read, nvmeio::direct_io::off);
    if (f.size() != p.total_bytes()) {
        return "the file holds " + std::to_string(f.size()) + " bytes, not " +
               std::to_string(p.total_bytes());
    }
    std::vector<std::byte> chunk(std::size_t{8} << 20);
    for (std::uint64_t at = 0; at < p.total_bytes();) {
        const std::size_t got = f.read_at(chunk, at);
        const nvmeio::mismatch_summary m =
            support::pattern_mismatches(chunk.data(), got, at, p.seed);
        if (m.count != 0) return "file byte " + std::to_string(at + m.first) + " is wrong";
        at += got;
    }
    return {};
}

std::string check_pool(kv_cache& cache, const plan& p) {
    for (std::size_t i = 0; i < cache.slot_of.size(); ++i) {
        const nvmeio::mismatch_summary m =
            support::pattern_mismatches(cache.block(i), cache.block_bytes, cache.offset(i), p.seed);
        if (m.count != 0) return "block " + std::to_string(i) + " is wrong after the reload";
    }
    return {};
}

// An empty file of the cache's size (allocated, reading as zeros), as an offload store keeps:
// every method then overwrites allocated space, and a block a dump misses reads back as zeros.
nvmeio::file fresh_file(const plan& p) {
    nvmeio::file f(p.path, nvmeio::open_mode::write, p.flags.direct);  // truncates
    const int error = ::posix_fallocate(f.native_handle(), 0, static_cast<off_t>(p.total_bytes()));
    if (error != 0 && error != EOPNOTSUPP && error != EINVAL) {
        throw nvmeio::io_error({std::error_code(error, std::generic_category()),
                                "fallocate (preparing the offload file)", p.path, 0,
                                p.total_bytes()});
    }
    return f;
}

struct results {
    std::vector<example::method_samples> dump, reload;
    std::vector<std::vector<double>> dump_exposed, reload_exposed;  // wall minus compute
    std::vector<double> compute;
};

// One dump and one reload by method `m`, timed and checked; false when a byte was wrong.
template <class Backend>
bool run_method(engines<Backend>& e, kv_cache& cache, const plan& p, std::size_t index, results& r,
                const example::run_temperature& temperature) {
    const method m = p.methods[index];
    temperature.before_run();
    double wall = example::now_seconds();
    double cpu = support::process_cpu_times().total();
    nvmeio::file out = fresh_file(p);
    const double dump_compute = dump(e, cache, p, m, out);
    r.dump[index].record(wall, cpu);
    r.dump_exposed[index].push_back(r.dump[index].seconds.back() - dump_compute);
    std::string problem = check_file(p);

    std::memset(cache.pool.data(), 0, cache.pool.size());
    temperature.before_run();
    wall = example::now_seconds();
    cpu = support::process_cpu_times().total();
    nvmeio::file in(p.path, nvmeio::open_mode::read, p.flags.direct);
    const double reload_compute = reload(e, cache, p, m, in);
    r.reload[index].record(wall, cpu);
    r.reload_exposed[index].push_back(r.reload[index].seconds.back() - reload_compute);
    r.compute.push_back(reload_compute);
    if (problem.empty()) problem = check_pool(cache, p);
    if (problem.empty()) return true;
    std::cout << "MISMATCH: " << r.dump[index].name << ": " << problem << "\n";
    for (std::size_t i = 0; i < cache.slot_of.size(); ++i)  // the next method starts clean
        support::fill_pattern(cache.block(i), cache.block_bytes, cache.offset(i), p.seed);
    return false;
}

void report(const plan& p, const results& r) {
    std::cout << "\ndump (compute, then write each layer):";
    example::print_comparison(r.dump, p.total_bytes(), 0);
    std::cout << "\nreload (read each layer, then compute):";
    example::print_comparison(r.reload, p.total_bytes(), 0);
    std::printf("\ncompute step alone: %u layers x %.4f s = median %.4f s per pass (slept)\n",
                p.layers, p.compute_seconds, support::median(r.compute));
    std::printf("%-28s %14s %9s %14s %9s\n", "exposed I/O (wall - compute)", "dump s", "GB/s",
                "reload s", "GB/s");
    for (std::size_t i = 0; i < p.methods.size(); ++i) {
        const double d = support::median(r.dump_exposed[i]);
        const double l = support::median(r.reload_exposed[i]);
        const auto rate = [&](double s) {
            return s > 0 ? static_cast<double>(p.total_bytes()) / s / 1e9 : 0.0;
        };
        std::printf("%-28s %14.4f %9.3f %14.4f %9.3f\n", r.dump[i].name.c_str(), d, rate(d), l,
                    rate(l));
    }
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("kv_offload", 2, [&] {
        const plan p = read_command_line(argc, argv);
        const example::run_temperature temperature(p.warm);
        example::print_setting("kv_offload", p.path, temperature);
        std::cout << "cache: " << p.layers << " layers x 2 (K, V) x " << p.sequences
                  << " sequences x " << p.blocks_per_sequence << " blocks of "
                  << support::format_size(p.kv_block) << " = " << p.total_bytes()
                  << " bytes, scattered over a pool with 25% free slots; compute step "
                  << p.compute_seconds << " s per layer; " << p.flags.label("transfers")
                  << ", direct " << support::name_of(support::direct_names(), p.flags.direct)
                  << ", async " << p.threads << " threads, " << p.rounds << " rounds\n";
        kv_cache cache(p);
        for (std::size_t i = 0; i < cache.slot_of.size(); ++i)
            support::fill_pattern(cache.block(i), cache.block_bytes, cache.offset(i), p.seed);
        results r;
        for (method m : p.methods) {
            r.dump.push_back({support::name_of(method_names(), m), {}, {}});
            r.reload.push_back(r.dump.back());
        }
        r.dump_exposed.resize(p.methods.size());
        r.reload_exposed.resize(p.methods.size());
        const bool all_right = support::with_backend(p.flags.backend, [&](auto tag) {
            using backend = typename decltype(tag)::type;
            engines<backend> e{nvmeio::basic_aio_context<backend>(p.flags.context()),
                               nvmeio::basic_async_context<backend>({p.threads, p.flags.context()}),
                               {}};
            if (std::find(p.methods.begin(), p.methods.end(), method::async) != p.methods.end()) {
                e.staging.emplace_back(p.layer_bytes());
                e.staging.emplace_back(p.layer_bytes());
            }
            bool right = true;
            for (unsigned round = 0; round < p.rounds; ++round) {
                for (std::size_t i = 0; i < p.methods.size(); ++i)
                    right = run_method(e, cache, p, i, r, temperature) && right;
            }
            return right;
        });
        report(p, r);
        std::cout << (all_right ? "validation: every byte of every dump and reload was right\n"
                                : "validation: MISMATCH (see above)\n");
        return all_right ? 0 : 1;
    });
}

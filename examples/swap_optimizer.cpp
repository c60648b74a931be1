// swap_optimizer: ZeRO-Infinity's optimizer-state swapping. The fp32 optimizer state (master
// parameters, momentum, variance) is cut into partitions that live in D swap files (partition i
// in file i % D); an optimizer step swaps each partition in, runs a real Adam update on it (the
// compute step, on this thread) and swaps it out, with the I/O done asynchronously by an async
// context of P workers. Four runs, cold and interleaved, show how much of the I/O the compute
// hides:
//  - io: swap every partition in and out, no compute (I/O alone);
//  - compute: the Adam update over every partition held in memory, no I/O (compute alone);
//  - serial: in, update, out, one partition at a time (no overlap);
//  - overlapped: partitions prefetched and written back by the async workers while the next
//    one is updated.
// The swap files are rewritten with the initial state before every run and checked byte for
// byte after it (updated state where the run computed, unchanged state after `io`). Exit 0 when
// every byte was right, 1 otherwise, 2 for a bad command line or an I/O error.

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "runs.hpp"
#include "support/cli.hpp"
#include "support/pattern.hpp"

namespace support = nvmeio::support;

namespace {

enum class method { io, compute, serial, overlapped };

const support::enum_names<method>& method_names() {
    static const support::enum_names<method> names{{"io", method::io},
                                                   {"compute", method::compute},
                                                   {"serial", method::serial},
                                                   {"overlapped", method::overlapped}};
    return names;
}

struct plan {
    std::string dir;
    unsigned files = 2;                 // D
    unsigned workers = 2;               // P
    unsigned partitions = 16;           // N
    std::uint64_t elements = 4u << 20;  // fp32 parameters per partition
    unsigned buffers = 4;               // partitions in memory at once while swapping
    unsigned adam_passes = 1;           // Adam updates per partition per step
    std::vector<method> methods{method::io, method::compute, method::serial, method::overlapped};
    unsigned rounds = 3;
    bool warm = false;
    std::uint64_t seed = 1;
    support::transfer_flags flags;

    // Parameters, momentum and variance of one partition, contiguous.
    [[nodiscard]] std::size_t partition_bytes() const {
        return static_cast<std::size_t>(elements) * 3 * sizeof(float);
    }
    [[nodiscard]] std::uint64_t state_bytes() const {
        return static_cast<std::uint64_t>(partitions) * partition_bytes();
    }
    [[nodiscard]] std::string path(unsigned file) const {
        return dir + "/swap_" + std::to_string(file) + ".bin";
    }
    [[nodiscard]] std::uint64_t offset(unsigned partition) const {
        return static_cast<std::uint64_t>(partition / files) * partition_bytes();
    }
};

plan read_command_line(int argc, char** argv) {
    plan p;
    CLI::App app{
        "Swap fp32 optimizer partitions in and out of D files with P async workers "
        "around a real Adam update, cold and interleaved, and report how much of the "
        "I/O the compute hid."};
    app.add_option("dir", p.dir, "folder for the swap files (created)")->required();
    support::add_count_option(app, "--files", p.files, "swap files D (one per device)", 1u, 256u);
    support::add_count_option(app, "--workers", p.workers, "async workers P", 1u, 256u);
    support::add_count_option(app, "--partitions", p.partitions, "optimizer partitions", 1u,
                              1u << 20);
    support::add_count_option(app, "--elements", p.elements,
                              "fp32 parameters per partition (12 bytes of state each)",
                              std::uint64_t{1}, std::uint64_t{1} << 34);
    support::add_count_option(app, "--buffers", p.buffers,
                              "partitions held in memory while swapping (3 or more overlap)", 1u,
                              1024u);
    support::add_count_option(app, "--adam-passes", p.adam_passes,
                              "Adam updates per partition per step (more compute per byte)", 1u,
                              1000u);
    support::add_enum_list_option(app, "--method", p.methods, method_names(),
                                  "runs to compare, comma-separated");
    support::add_count_option(app, "--rounds", p.rounds, "interleaved rounds", 1u, 1000u);
    support::add_count_option(app, "--seed", p.seed, "initial state", std::uint64_t{0});
    app.add_flag("--warm", p.warm, "do not drop the page cache before each run (reported WARM)");
    p.flags.add_to(app);
    support::parse_command_line(app, argc, argv);
    p.flags.check();
    if (nvmeio::may_use_o_direct(p.flags.direct) && p.elements % 1024 != 0)
        throw support::usage_error("--elements",
                                   "must be a multiple of 1024 for O_DIRECT "
                                   "(a partition's 12-byte states then fill 4K)");
    const double resident = static_cast<double>(p.state_bytes()) * 1.5 +
                            static_cast<double>(p.buffers + 1) * p.partition_bytes();
    if (resident > static_cast<double>(support::physical_memory_bytes()))
        throw support::usage_error("--partitions",
                                   "the state does not fit in memory (the "
                                   "compute run holds it all)");
    return p;
}

// The state at the start of every run: floats made from the pattern (|p| < 1, m small, v > 0).
void initial_state(const plan& p, unsigned partition, float* state) {
    const std::size_t n = static_cast<std::size_t>(p.elements);
    const std::uint64_t first = static_cast<std::uint64_t>(partition) * 3 * n;
    for (std::size_t j = 0; j < 3 * n; ++j) {
        const std::uint64_t word = support::pattern_word(first + j, p.seed);
        const float unit = static_cast<float>(word >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        state[j] =
            j < n ? 2 * unit - 1 : (j < 2 * n ? (unit - 0.5f) * 1e-3f : unit * 1e-4f + 1e-8f);
    }
}

// The gradient every partition is updated with.
std::vector<float> make_gradient(const plan& p) {
    std::vector<float> g(static_cast<std::size_t>(p.elements));
    for (std::size_t j = 0; j < g.size(); ++j)
        g[j] = static_cast<float>(support::pattern_word(j, p.seed + 1) >> 40) * 1e-9f - 8e-3f;
    return g;
}

// Adam on one partition (one machine-code copy, so that every caller gets the same bits).
__attribute__((noinline)) void adam_update(float* state, const float* gradient, std::size_t n,
                                           unsigned passes) {
    float* param = state;
    float* momentum = state + n;
    float* variance = state + 2 * n;
    const float beta1 = 0.9f, beta2 = 0.999f, rate = 1e-3f, epsilon = 1e-8f;
    for (unsigned pass = 0; pass < passes; ++pass) {
        for (std::size_t j = 0; j < n; ++j) {
            const float g = gradient[j];
            momentum[j] = beta1 * momentum[j] + (1 - beta1) * g;
            variance[j] = beta2 * variance[j] + (1 - beta2) * g * g;
            param[j] -= rate * (momentum[j] / (1 - beta1)) /
                        (std::sqrt(variance[j] / (1 - beta2)) + epsilon);
        }
    }
}

template <class Backend>
struct swap_engine {
    const plan& p;
    nvmeio::basic_aio_context<Backend> context;  // setup and checks
    nvmeio::basic_async_context<Backend> async;  // the swapping
    std::vector<nvmeio::file> files;
    std::vector<nvmeio::aligned_buffer> buffers;   // the swap buffers
    std::vector<nvmeio::aligned_buffer> resident;  // the compute run's whole state
    std::vector<float> gradient;
};

// Writes the initial state of every partition into the swap files (untimed).
template <class Backend>
void reset_files(swap_engine<Backend>& e) {
    const plan& p = e.p;
    for (unsigned i = 0; i < p.partitions; ++i) {
        nvmeio::aligned_buffer& b = e.buffers[0];
        initial_state(p, i, reinterpret_cast<float*>(b.data()));
        (void)nvmeio::write(e.context, e.files[i % p.files], b, p.offset(i), p.flags.config(false));
    }
    for (nvmeio::file& f : e.files)
        f.sync();
}

// One optimizer step over every partition through `depth` swap buffers: reads run up to
// depth - 2 partitions ahead, so a buffer is reused only after its write had a whole update to
// finish. depth 1 is the serial run. `update` false moves the bytes without computing.
template <class Backend>
void swap_step(swap_engine<Backend>& e, unsigned depth, bool update) {
    const plan& p = e.p;
    const unsigned ahead = depth >= 2 ? depth - 2 : 0;
    std::vector<nvmeio::transfer_handle> reads(depth), writes(depth);
    const nvmeio::transfer_config config = p.flags.config(false);
    unsigned next_read = 0;
    for (unsigned i = 0; i < p.partitions; ++i) {
        for (; next_read < p.partitions && next_read <= i + ahead; ++next_read) {
            const unsigned b = next_read % depth;
            (void)writes[b].wait();  // the buffer's previous partition is on disk
            reads[b] = nvmeio::async_read(e.async, e.files[next_read % p.files], e.buffers[b],
                                          p.offset(next_read), config);
        }
        const unsigned b = i % depth;
        if (reads[b].wait().bytes != p.partition_bytes()) {
            throw nvmeio::io_error({std::make_error_code(std::errc::io_error),
                                    "read (the swap file ended early)", p.path(i % p.files),
                                    p.offset(i), p.partition_bytes()});
        }
        if (update) {
            adam_update(reinterpret_cast<float*>(e.buffers[b].data()), e.gradient.data(),
                        static_cast<std::size_t>(p.elements), p.adam_passes);
        }
        writes[b] =
            nvmeio::async_write(e.async, e.files[i % p.files], e.buffers[b], p.offset(i), config);
        if (depth == 1) (void)writes[b].wait();
    }
    for (nvmeio::transfer_handle& w : writes)
        (void)w.wait();
}

// Checks every partition against the initial state, updated when `updated`: the swap files,
// or the resident state after the compute run.
template <class Backend>
std::string check_state(swap_engine<Backend>& e, bool updated, bool in_memory) {
    const plan& p = e.p;
    std::vector<float> expected(static_cast<std::size_t>(p.elements) * 3);
    nvmeio::aligned_buffer got(p.partition_bytes());
    for (unsigned i = 0; i < p.partitions; ++i) {
        initial_state(p, i, expected.data());
        if (updated) adam_update(expected.data(), e.gradient.data(), p.elements, p.adam_passes);
        const std::byte* actual = e.resident.empty() ? got.data() : e.resident[i].data();
        if (!in_memory) {
            nvmeio::file f(p.path(i % p.files), nvmeio::open_mode::read, nvmeio::direct_io::off);
            if (f.read_at(got, p.offset(i)) != got.size())
                return "partition " + std::to_string(i) + " is missing from its swap file";
            actual = got.data();
        }
        if (!nvmeio::equal(actual, expected.data(), p.partition_bytes()))
            return "partition " + std::to_string(i) + " holds the wrong bytes";
    }
    return {};
}

// One timed run of `m` between its untimed setup and check; false when a byte was wrong.
template <class Backend>
bool run_method(swap_engine<Backend>& e, method m, example::method_samples& samples,
                const example::run_temperature& temperature) {
    const plan& p = e.p;
    e.resident.clear();
    if (m == method::compute) {
        for (unsigned i = 0; i < p.partitions; ++i) {
            e.resident.emplace_back(p.partition_bytes(), 4096,
                                    nvmeio::buffer_options{true, false, false});
            initial_state(p, i, reinterpret_cast<float*>(e.resident.back().data()));
        }
    } else {
        reset_files(e);
    }
    temperature.before_run();
    const double wall = example::now_seconds();
    const double cpu = support::process_cpu_times().total();
    if (m == method::compute) {
        for (nvmeio::aligned_buffer& state : e.resident)
            adam_update(reinterpret_cast<float*>(state.data()), e.gradient.data(),
                        static_cast<std::size_t>(p.elements), p.adam_passes);
    } else {
        swap_step(e, m == method::serial ? 1 : p.buffers, m != method::io);
    }
    samples.record(wall, cpu);
    const std::string problem = check_state(e, m != method::io, m == method::compute);
    if (problem.empty()) return true;
    std::cout << "MISMATCH: " << samples.name << ": " << problem << "\n";
    return false;
}

void report(const plan& p, const std::vector<method>& methods,
            const std::vector<example::method_samples>& samples) {
    std::cout << "\none optimizer step (GB/s counts the bytes swapped in and out):";
    example::print_comparison(samples, 2 * p.state_bytes(), 0);
    double io = 0, compute = 0, overlapped = 0;
    for (std::size_t i = 0; i < methods.size(); ++i) {
        const double t = support::median(samples[i].seconds);
        if (methods[i] == method::io) io = t;
        if (methods[i] == method::compute) compute = t;
        if (methods[i] == method::overlapped) overlapped = t;
    }
    if (io > 0 && compute > 0 && overlapped > 0) {
        // What the overlap saved against doing both one after the other, as a share of the I/O
        // and of the most any overlap could save (the shorter of the two).
        const double saved = io + compute - overlapped;
        std::printf(
            "\nI/O alone %.4f s, compute alone %.4f s, overlapped %.4f s: the overlap hid "
            "%.4f s, %.0f%% of the I/O time (at most %.0f%% here: compute / I/O) and %.0f%% "
            "of the most any overlap could hide (the shorter of the two)\n",
            io, compute, overlapped, saved, 100 * saved / io, 100 * std::min(1.0, compute / io),
            100 * saved / std::min(io, compute));
    }
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("swap_optimizer", 2, [&] {
        const plan p = read_command_line(argc, argv);
        // The swap files go in the folder: say why it cannot be made, not later that a file in
        // it does not exist.
        if (::mkdir(p.dir.c_str(), 0755) != 0 && errno != EEXIST) {
            throw nvmeio::io_error(
                {std::error_code(errno, std::generic_category()), "mkdir", p.dir, 0, 0});
        }
        const example::run_temperature temperature(p.warm);
        example::print_setting("swap_optimizer", p.dir, temperature);
        std::cout << "state: " << p.partitions << " partitions x " << p.elements
                  << " fp32 parameters x 3 (parameter, momentum, variance) = " << p.state_bytes()
                  << " bytes in " << p.files << " swap files; " << p.workers << " async workers, "
                  << p.buffers << " swap buffers, " << p.adam_passes << " Adam pass(es); "
                  << p.flags.label("swaps") << ", direct "
                  << support::name_of(support::direct_names(), p.flags.direct) << ", " << p.rounds
                  << " rounds\n";
        std::vector<example::method_samples> samples;
        for (method m : p.methods)
            samples.push_back({support::name_of(method_names(), m), {}, {}});
        const bool all_right = support::with_backend(p.flags.backend, [&](auto tag) {
            using backend = typename decltype(tag)::type;
            swap_engine<backend> e{
                p,
                nvmeio::basic_aio_context<backend>(p.flags.context()),
                nvmeio::basic_async_context<backend>({p.workers, p.flags.context()}),
                {},
                {},
                {},
                make_gradient(p)};
            for (unsigned d = 0; d < p.files; ++d)
                e.files.emplace_back(p.path(d), nvmeio::open_mode::write, p.flags.direct);
            for (unsigned b = 0; b < p.buffers; ++b)
                e.buffers.emplace_back(p.partition_bytes(), 4096,
                                       nvmeio::buffer_options{true, false, false});
            bool right = true;
            for (unsigned round = 0; round < p.rounds; ++round) {
                for (std::size_t i = 0; i < p.methods.size(); ++i)
                    right = run_method(e, p.methods[i], samples[i], temperature) && right;
            }
            return right;
        });
        report(p, p.methods, samples);
        std::cout << (all_right
                          ? "validation: every byte of every partition after every run was right\n"
                          : "validation: MISMATCH (see above)\n");
        return all_right ? 0 : 1;
    });
}

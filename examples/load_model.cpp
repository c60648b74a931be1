// load_model: loads every tensor of a GGUF (versions 2 and 3) or safetensors file into host
// memory with several methods, cold and interleaved (A B C ... A B C ...), checks every byte of
// every tensor after every run, and prints medians and ratios. The methods: nvmeio (one
// parallel transfer into an aligned arena), nvmeio-batch (one batch, a buffer per tensor), mmap
// (map and touch every page: llama.cpp's default), read (a buffered pread per tensor) and staged
// (O_DIRECT into rotating 64 MiB staging buffers plus memcpy: llama.cpp's direct-I/O loader).
// Each run parses the header too, as a loader must. --generate writes the file first.
//
// Exit status: 0 when every byte of every run was right, 1 on a wrong byte, 2 for a malformed
// file (naming the file, the field and the rule), a bad command line or an I/O error.

#include <cstdio>
#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/load.hpp"
#include "model/options.hpp"
#include "model/parse.hpp"
#include "runs.hpp"
#include "support/cli.hpp"

namespace support = nvmeio::support;
namespace model = example::model;

namespace {

enum class method { nvmeio, nvmeio_batch, mmap, read, staged };

const support::enum_names<method>& method_names() {
    static const support::enum_names<method> names{{"nvmeio", method::nvmeio},
                                                   {"nvmeio-batch", method::nvmeio_batch},
                                                   {"mmap", method::mmap},
                                                   {"read", method::read},
                                                   {"staged", method::staged}};
    return names;
}

struct plan {
    std::string path;
    std::vector<method> methods{method::nvmeio, method::nvmeio_batch, method::mmap, method::read,
                                method::staged};
    unsigned rounds = 3;
    bool warm = false;
    bool list = false;
    unsigned threads = 2;
    support::transfer_flags flags;
    std::uint64_t staging_size = std::uint64_t{64} << 20;
    std::size_t staging_buffers = 4;
    bool generate = false;
    model::model_spec spec;
};

plan read_command_line(int argc, char** argv) {
    plan p;
    CLI::App app{
        "Load every tensor of a GGUF or safetensors file into memory with nvmeio, mmap, buffered "
        "read and O_DIRECT staging, cold and interleaved; check every byte; print medians and "
        "ratios."};
    app.add_option("file", p.path, "the .gguf or .safetensors file (written first with --generate)")
        ->required();
    support::add_enum_list_option(app, "--method", p.methods, method_names(),
                                  "methods to compare, comma-separated");
    support::add_count_option(app, "--rounds", p.rounds, "interleaved rounds", 1u, 1000u);
    app.add_flag("--warm", p.warm, "do not drop the page cache before each run (reported WARM)");
    app.add_flag("--list", p.list, "print every tensor: name, type, shape, offset, bytes");
    support::add_count_option(app, "--threads", p.threads,
                              "threads of the nvmeio parallel and async contexts", 1u, 256u);
    support::add_size_option(app, "--staging-size", p.staging_size,
                             "staged: bytes per staging buffer (a multiple of 4K)", 4096,
                             std::uint64_t{1} << 32);
    support::add_count_option(app, "--staging-buffers", p.staging_buffers,
                              "staged: buffers in rotation", std::size_t{1}, std::size_t{64});
    p.flags.add_to(app);
    auto* generate = model::add_spec_options(
        app, p.spec, "--generate", "first write FILE: generated tensors of odd sizes, every type",
        "--generate: ");
    support::parse_command_line(app, argc, argv);
    p.flags.check();
    p.generate = generate->count() != 0;
    if (p.staging_size % 4096 != 0)
        throw support::usage_error("--staging-size", "must be a multiple of 4K");
    model::check_spec(p.spec);
    return p;
}

void print_layout(const model::model_layout& layout, bool list) {
    std::cout << "model: " << model::to_string(layout.kind);
    if (layout.kind == model::format::gguf)
        std::cout << " v" << layout.version << ", alignment " << layout.alignment;
    std::cout << ", " << layout.metadata_count << " metadata keys, " << layout.tensors.size()
              << " tensors, " << layout.tensor_bytes() << " tensor bytes, data at "
              << layout.data_offset << ", file " << layout.file_size << " bytes; checked against "
              << (layout.pattern_seed ? "its generated pattern" : "a buffered read") << "\n";
    if (!list) return;
    std::printf("%-40s %-6s %-24s %14s %14s\n", "tensor", "type", "shape", "offset", "bytes");
    for (const model::tensor_info& t : layout.tensors) {
        std::printf("%-40s %-6s %-24s %14llu %14llu\n", t.name.c_str(), t.type.c_str(),
                    model::shape_text(t.shape).c_str(), static_cast<unsigned long long>(t.offset),
                    static_cast<unsigned long long>(t.size));
    }
}

// Runs every method in every round; returns false when some byte was wrong.
template <class Backend>
bool run_rounds(const plan& p, std::vector<example::method_samples>& samples) {
    nvmeio::basic_parallel_context<Backend> parallel(
        nvmeio::parallel_options{p.threads, p.flags.context(), 0});
    nvmeio::basic_async_context<Backend> async(nvmeio::async_options{p.threads, p.flags.context()});
    const model::load_settings settings{p.path, p.flags.direct, p.flags.config(false),
                                        p.staging_buffers,
                                        static_cast<std::size_t>(p.staging_size)};
    const example::run_temperature temperature(p.warm);
    bool all_right = true;
    for (unsigned round = 0; round < p.rounds; ++round) {
        for (std::size_t m = 0; m < p.methods.size(); ++m) {
            temperature.before_run();
            const double wall = example::now_seconds();
            const double cpu = support::process_cpu_times().total();
            const model::model_layout layout = model::read_layout(p.path);
            model::loaded_model loaded;
            switch (p.methods[m]) {
                case method::nvmeio:
                    loaded = model::load_arena(parallel, layout, settings);
                    break;
                case method::nvmeio_batch:
                    loaded = model::load_per_tensor(parallel, layout, settings);
                    break;
                case method::mmap:
                    loaded = model::load_mmap(layout, settings);
                    break;
                case method::read:
                    loaded = model::load_read(layout, settings);
                    break;
                case method::staged:
                    loaded = model::load_staged(async, layout, settings);
                    break;
            }
            samples[m].record(wall, cpu);
            const model::load_check check = model::check_load(layout, loaded, p.path);
            if (check.bad_tensors != 0) {
                all_right = false;
                std::cout << "MISMATCH: " << samples[m].name << " round " << round + 1 << ": "
                          << check.bad_tensors << " tensors wrong; " << check.first_problem << "\n";
            }
        }
    }
    return all_right;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("load_model", 2, [&] {
        const plan p = read_command_line(argc, argv);
        if (p.generate) {
            const model::planned_model planned = model::plan_model(p.spec);
            support::with_backend(p.flags.backend, [&](auto tag) {
                nvmeio::basic_aio_context<typename decltype(tag)::type> context(p.flags.context());
                model::write_model(context, p.path, planned);
            });
            std::cout << "generated " << p.path << "\n";
        }
        p.flags.check_against(nvmeio::file(p.path, nvmeio::open_mode::read, p.flags.direct));
        const model::model_layout layout = model::read_layout(p.path);
        if (layout.file_size > support::physical_memory_bytes()) {
            throw support::usage_error("file", "'" + p.path + "' (" +
                                                   std::to_string(layout.file_size) +
                                                   " bytes) does not fit in this machine's memory");
        }
        const example::run_temperature temperature(p.warm);
        example::print_setting("load_model", p.path, temperature);
        std::cout
            << "parameters: " << p.flags.label("read") << ", direct "
            << support::name_of(support::direct_names(), p.flags.direct) << ", " << p.threads
            << " threads, staging " << p.staging_buffers << " x "
            << support::format_size(p.staging_size) << ", " << p.rounds
            << " interleaved rounds; each run parses the header and loads into fresh memory\n";
        print_layout(layout, p.list);

        std::vector<example::method_samples> samples;
        for (method m : p.methods)
            samples.push_back({support::name_of(method_names(), m), {}, {}});
        const bool all_right = support::with_backend(p.flags.backend, [&](auto tag) {
            return run_rounds<typename decltype(tag)::type>(p, samples);
        });
        example::print_comparison(samples, layout.tensor_bytes(), 0);
        std::cout << (all_right ? "validation: every byte of every tensor of every run was right\n"
                                : "validation: MISMATCH (see above)\n");
        return all_right ? 0 : 1;
    });
}

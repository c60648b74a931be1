// gpu_load: loads every tensor of a GGUF or safetensors file into one GPU's memory through
// nvmeio's staging ring (staged.hpp: O_DIRECT reads into K page-locked slots, each slot copied to
// the GPU while the next is read; cuda.hpp opens NVIDIA's driver at run time), then copies every
// tensor back and checks every byte against the file. Cold runs (page cache dropped), medians.
// It builds without CUDA; where there is no driver or no device it says so and exits 77.
//
// Exit status: 0 when every byte was right, 1 on a wrong byte, 2 for a malformed file, a bad
// command line or an I/O error, 77 when there is no GPU to load to.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nvmeio/cuda.hpp>
#include <nvmeio/nvmeio.hpp>
#include <nvmeio/staged.hpp>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/options.hpp"
#include "model/parse.hpp"
#include "runs.hpp"
#include "support/cli.hpp"
#include "support/pattern.hpp"

namespace support = nvmeio::support;
namespace model = example::model;

namespace {

struct plan {
    std::string path;
    int device = 0;
    unsigned rounds = 3;
    bool warm = false;
    unsigned threads = 4;
    unsigned slots = 4;
    std::uint64_t slot_size = std::uint64_t{64} << 20;
    support::transfer_flags flags;
    bool generate = false;
    model::model_spec spec;
};

plan read_command_line(int argc, char** argv) {
    plan p;
    CLI::App app{
        "Load every tensor of a GGUF or safetensors file into a GPU's memory through nvmeio's "
        "staging ring (O_DIRECT reads overlapped with copies to the GPU), cold; check every byte."};
    app.add_option("file", p.path, "the .gguf or .safetensors file (written first with --generate)")
        ->required();
    support::add_count_option(app, "--device", p.device, "CUDA device index", 0, 1023);
    support::add_count_option(app, "--rounds", p.rounds, "runs", 1u, 1000u);
    app.add_flag("--warm", p.warm, "do not drop the page cache before each run (reported WARM)");
    support::add_count_option(app, "--threads", p.threads, "threads reading the slots", 1u, 256u);
    support::add_count_option(app, "--slots", p.slots, "slots in the ring", 1u, 1024u);
    support::add_size_option(app, "--slot-size", p.slot_size, "bytes per slot (a multiple of 4K)",
                             4096, std::uint64_t{1} << 32);
    p.flags.add_to(app);
    auto* generate = model::add_spec_options(
        app, p.spec, "--generate", "first write FILE: generated tensors of odd sizes, every type",
        "--generate: ");
    support::parse_command_line(app, argc, argv);
    p.flags.check();
    p.generate = generate->count() != 0;
    model::check_spec(p.spec);
    if (p.slot_size % 4096 != 0)
        throw support::usage_error("--slot-size", "must be a multiple of 4K");
    return p;
}

// Every tensor copied back from the device and compared with the file: its generated pattern
// where it has one, else a buffered read. Returns the number of wrong tensors.
std::size_t check_on_device(nvmeio::cuda_copy_engine& engine, const model::model_layout& layout,
                            const std::vector<nvmeio::staged_range>& ranges,
                            const std::string& path) {
    std::size_t wrong = 0;
    std::vector<unsigned char> back;
    for (std::size_t i = 0; i < layout.tensors.size(); ++i) {
        const model::tensor_info& t = layout.tensors[i];
        back.resize(static_cast<std::size_t>(t.size));
        if (t.size != 0) engine.copy_back(back.data(), ranges[i].address, back.size());
        const bool right = layout.pattern_seed
                               ? support::pattern_mismatches(back.data(), back.size(), t.offset,
                                                             *layout.pattern_seed)
                                         .count == 0
                               : nvmeio::verify_read(path, back, t.offset).equal();
        if (!right) {
            if (wrong == 0) std::cout << "MISMATCH: tensor '" << t.name << "'\n";
            ++wrong;
        }
    }
    return wrong;
}

int run(const plan& p) {
    if (p.generate) {
        const model::planned_model planned = model::plan_model(p.spec);
        support::with_backend(p.flags.backend, [&](auto tag) {
            nvmeio::basic_aio_context<typename decltype(tag)::type> context(p.flags.context());
            model::write_model(context, p.path, planned);
        });
        std::cout << "generated " << p.path << "\n";
    }
    const model::model_layout layout = model::read_layout(p.path);
    std::unique_ptr<nvmeio::cuda_copy_engine> engine;
    try {
        engine = std::make_unique<nvmeio::cuda_copy_engine>(p.device);
    } catch (const std::system_error& e) {
        std::cout << "gpu_load: SKIPPED, no GPU to load to: " << e.what() << "\n";
        return 77;
    }
    const example::run_temperature temperature(p.warm);
    example::print_setting("gpu_load", p.path, temperature);
    std::cout << "parameters: cuda:" << p.device << ", ring " << p.slots << " x "
              << support::format_size(p.slot_size) << ", " << p.threads << " threads, "
              << p.flags.label("read") << ", " << p.rounds << " runs\n";
    std::cout << "model: " << model::to_string(layout.kind) << ", " << layout.tensors.size()
              << " tensors, " << layout.tensor_bytes() << " tensor bytes\n";

    // One device allocation holds every tensor, each at a 256-byte boundary.
    std::vector<nvmeio::staged_range> ranges;
    std::uint64_t device_bytes = 0;
    for (const model::tensor_info& t : layout.tensors) {
        ranges.push_back({0, t.offset, static_cast<std::size_t>(t.size), 0, false});
        device_bytes += nvmeio::align_up(t.size, 256);
    }
    const std::uintptr_t memory = engine->allocate_device(static_cast<std::size_t>(device_bytes));
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        ranges[i].address = ranges[i].length == 0 ? 0 : memory + at;
        at += nvmeio::align_up(layout.tensors[i].size, 256);
    }
    nvmeio::staging_ring<nvmeio::cuda_copy_engine> ring(
        *engine, {p.slots, static_cast<std::size_t>(p.slot_size)});
    nvmeio::parallel_context context({p.threads, p.flags.context(), 0});
    const nvmeio::file f(p.path, nvmeio::open_mode::read, p.flags.direct);
    std::vector<double> seconds;
    std::size_t wrong = 0;
    for (unsigned round = 0; round < p.rounds && wrong == 0; ++round) {
        temperature.before_run();
        const double start = example::now_seconds();
        (void)nvmeio::staged_read(context, ring, {&f}, ranges, {}, p.flags.config(false));
        seconds.push_back(example::now_seconds() - start);
        wrong = check_on_device(*engine, layout, ranges, p.path);
    }
    engine->free_device(memory);
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("load to cuda:%d: median %.3f s, %.2f GB/s (%zu runs)\n", p.device, median,
                static_cast<double>(layout.tensor_bytes()) / median / 1e9, seconds.size());
    std::cout << (wrong == 0 ? "validation: every byte of every tensor on the device was right\n"
                             : "validation: MISMATCH (see above)\n");
    return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("gpu_load", 2, [&] { return run(read_command_line(argc, argv)); });
}

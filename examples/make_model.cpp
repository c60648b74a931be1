// make_model: writes a GGUF or safetensors file of generated tensors (odd sizes, every element
// type the parser knows, GGUF metadata of every value type) to try load_model on. Every data
// byte is the generated pattern at its file offset, and the seed is in the file, so load_model
// checks every tensor without a second read. The same generator as `load_model --generate`.

#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>

#include "model/generate.hpp"
#include "support/cli.hpp"

namespace support = nvmeio::support;
namespace model = example::model;

int main(int argc, char** argv) {
    return support::run_main("make_model", 2, [&] {
        CLI::App app{"Write a GGUF or safetensors file of generated tensors."};
        std::string path;
        model::model_spec spec;
        support::transfer_flags flags;
        app.add_option("file", path, "the file to write (replaced)")->required();
        support::add_enum_option(
            app, "--format", spec.kind,
            {{"gguf", model::format::gguf}, {"safetensors", model::format::safetensors}},
            "file format");
        support::add_size_option(app, "--size", spec.bytes, "about this many tensor bytes", 1,
                                 std::uint64_t{1} << 46);
        support::add_count_option(app, "--tensors", spec.tensors, "number of tensors",
                                  std::uint64_t{1}, std::uint64_t{1} << 20);
        support::add_count_option(app, "--seed", spec.seed, "picks sizes, types and bytes",
                                  std::uint64_t{0});
        support::add_count_option(app, "--gguf-version", spec.version, "GGUF version", 2u, 3u);
        support::add_count_option(app, "--alignment", spec.alignment,
                                  "GGUF general.alignment (a power of two)", 1u, 1u << 30);
        flags.add_to(app);
        support::parse_command_line(app, argc, argv);
        flags.check();
        if ((spec.alignment & (spec.alignment - 1)) != 0)
            throw support::usage_error("--alignment", "must be a power of two");

        const model::planned_model plan = model::plan_model(spec);
        support::with_backend(flags.backend, [&](auto tag) {
            nvmeio::basic_aio_context<typename decltype(tag)::type> context(flags.context());
            model::write_model(context, path, plan);
        });
        std::cout << "wrote " << path << ": " << model::to_string(spec.kind) << ", "
                  << plan.layout.tensors.size() << " tensors, " << plan.layout.tensor_bytes()
                  << " tensor bytes, " << plan.layout.file_size << " bytes\n";
        return 0;
    });
}

// make_model: writes a GGUF or safetensors file of generated tensors (odd sizes, every element
// type the parser knows, GGUF metadata of every value type) to try load_model on. Every data
// byte is the generated pattern at its file offset, and the seed is in the file, so load_model
// checks every tensor without a second read. The same generator as `load_model --generate`.

#include <iostream>
#include <nvmeio/nvmeio.hpp>
#include <string>

#include "model/generate.hpp"
#include "model/options.hpp"
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
        model::add_spec_options(app, spec, "--format", "file format", "");
        flags.add_to(app);
        support::parse_command_line(app, argc, argv);
        flags.check();
        model::check_spec(spec);

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

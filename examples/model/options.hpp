#pragma once
// The command-line options of a generated model (model_spec), one set for every example that
// writes one: make_model (--format), load_model and gpu_load (--generate).

#include <string>

#include "model/generate.hpp"
#include "support/cli.hpp"

namespace example::model {

/// "gguf" and "safetensors".
inline const nvmeio::support::enum_names<format>& format_names() {
    static const nvmeio::support::enum_names<format> names{{"gguf", format::gguf},
                                                           {"safetensors", format::safetensors}};
    return names;
}

/// Adds `format_flag` (the format; its count says whether it was given) and --size, --tensors,
/// --seed, --gguf-version, --alignment, each help text after `prefix`; returns the format's
/// option. Call `check_spec` once the command line is parsed.
inline CLI::Option* add_spec_options(CLI::App& app, model_spec& spec,
                                     const std::string& format_flag, const std::string& format_help,
                                     const std::string& prefix) {
    namespace support = nvmeio::support;
    CLI::Option* chosen =
        support::add_enum_option(app, format_flag, spec.kind, format_names(), format_help);
    support::add_size_option(app, "--size", spec.bytes, prefix + "about this many tensor bytes", 1,
                             std::uint64_t{1} << 46);
    support::add_count_option(app, "--tensors", spec.tensors, prefix + "number of tensors",
                              std::uint64_t{1}, std::uint64_t{1} << 20);
    support::add_count_option(app, "--seed", spec.seed, prefix + "picks sizes, types and bytes",
                              std::uint64_t{0});
    support::add_count_option(app, "--gguf-version", spec.version, prefix + "GGUF version", 2u, 3u);
    support::add_count_option(app, "--alignment", spec.alignment,
                              prefix + "GGUF general.alignment (a power of two)", 1u, 1u << 30);
    return chosen;
}

/// The rule the option types cannot say: the alignment is a power of two.
inline void check_spec(const model_spec& spec) {
    if ((spec.alignment & (spec.alignment - 1)) != 0)
        throw nvmeio::support::usage_error("--alignment", "must be a power of two");
}

}  // namespace example::model

// load_tensors: loads every tensor of a safetensors file into one aligned arena with a single
// nvmeio transfer, validates each tensor against a buffered read of its range, and prints a table
// of names, dtypes, shapes, sizes and the load's GB/s. Exit 0 when every tensor matches, 1 on a
// mismatch, 2 on a malformed file or an I/O error.
//
// safetensors layout: an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// that follows the header), optionally "__metadata__", then the data.

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <nvmeio/nvmeio.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/cli.hpp"

namespace support = nvmeio::support;

namespace {

struct tensor {
    std::string name;
    std::string dtype;
    std::vector<std::uint64_t> shape;
    std::uint64_t begin = 0;  // within the data section
    std::uint64_t end = 0;
};

std::size_t dtype_size(const std::string& dtype) {
    static const std::map<std::string, std::size_t> sizes = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
        {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
        {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
    const auto it = sizes.find(dtype);
    if (it == sizes.end()) throw std::invalid_argument("unknown dtype '" + dtype + "'");
    return it->second;
}

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
    throw std::invalid_argument("'" + path + "' is not a valid safetensors file: " + why);
}

// Parses and checks the header; returns the tensors and the data section's file offset.
std::vector<tensor> parse_header(const std::string& path, nvmeio::file& f, std::uint64_t file_size,
                                 std::uint64_t& data_start) {
    if (file_size < 8) malformed(path, "shorter than the 8-byte header length");
    unsigned char length_bytes[8];
    if (f.read_at(length_bytes, 8, 0) != 8) malformed(path, "cannot read the header length");
    std::uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i)
        header_length = header_length << 8 | length_bytes[i];
    if (header_length > file_size - 8) {
        malformed(path, "header length " + std::to_string(header_length) +
                            " passes the end of the file (" + std::to_string(file_size) +
                            " bytes)");
    }
    std::string text(header_length, '\0');
    f.read_at(text.data(), header_length, 8);
    data_start = 8 + header_length;
    const nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
    if (header.is_discarded() || !header.is_object())
        malformed(path, "the header is not a JSON object");

    std::vector<tensor> tensors;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        tensor t;
        t.name = name;
        try {
            t.dtype = entry.at("dtype").get<std::string>();
            t.shape = entry.at("shape").get<std::vector<std::uint64_t>>();
            const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
            if (offsets.size() != 2)
                malformed(path, "tensor '" + name + "': data_offsets needs 2 numbers");
            t.begin = offsets[0];
            t.end = offsets[1];
        } catch (const nlohmann::json::exception& e) {
            malformed(path, "tensor '" + name + "': " + e.what());
        }
        std::uint64_t elements = 1;
        for (std::uint64_t d : t.shape)
            elements *= d;
        if (t.end < t.begin || t.end - t.begin != elements * dtype_size(t.dtype)) {
            malformed(path, "tensor '" + name + "': data_offsets [" + std::to_string(t.begin) +
                                ", " + std::to_string(t.end) + ") do not hold its shape and dtype");
        }
        if (data_start + t.end > file_size) {
            malformed(path, "tensor '" + name + "' ends at " + std::to_string(data_start + t.end) +
                                ", past the end of the file (" + std::to_string(file_size) +
                                " bytes)");
        }
        tensors.push_back(std::move(t));
    }
    std::sort(tensors.begin(), tensors.end(),
              [](const tensor& a, const tensor& b) { return a.begin < b.begin; });
    return tensors;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("load_tensors", 2, [&] {
        CLI::App app{
            "Load every tensor of a safetensors file with one nvmeio transfer and validate each."};
        std::string path;
        support::transfer_flags flags;
        app.add_option("file", path, "a .safetensors file")->required();
        flags.add_to(app);
        support::parse_command_line(app, argc, argv);
        flags.check();

        nvmeio::file in(path, nvmeio::open_mode::read, flags.direct);
        flags.check_against(in);
        const std::uint64_t file_size = in.size();
        std::uint64_t data_start = 0;
        const std::vector<tensor> tensors = parse_header(path, in, file_size, data_start);

        // One transfer of the whole file: the tensors are contiguous after the header, and
        // starting at offset 0 keeps O_DIRECT's offset rule whatever the header's length.
        nvmeio::aligned_buffer arena(file_size, 4096, {true, false, false});
        const nvmeio::transfer_result loaded =
            support::with_backend(flags.backend, [&](auto backend) {
                nvmeio::basic_aio_context<typename decltype(backend)::type> context(
                    flags.context());
                return nvmeio::read(context, in, arena.data(), file_size, 0, flags.config());
            });
        if (loaded.bytes != file_size) malformed(path, "the file shrank while it was read");

        std::printf("%-32s %-8s %-20s %14s  %s\n", "tensor", "dtype", "shape", "bytes", "check");
        bool all_equal = true;
        for (const tensor& t : tensors) {
            const std::uint64_t at = data_start + t.begin;
            const nvmeio::verify_result check =
                nvmeio::verify_read(path, arena.data() + at, t.end - t.begin, at);
            all_equal = all_equal && check.equal();
            std::printf("%-32s %-8s %-20s %14llu  %s\n", t.name.c_str(), t.dtype.c_str(),
                        shape_text(t.shape).c_str(),
                        static_cast<unsigned long long>(t.end - t.begin),
                        check.equal() ? "ok" : "MISMATCH");
        }
        std::printf("%zu tensors, %llu bytes loaded in %.3f ms: %.3f GB/s (10^9 B/s), %s\n",
                    tensors.size(), static_cast<unsigned long long>(file_size),
                    loaded.perf.elapsed_us / 1e3, loaded.perf.gb_per_s(),
                    in.is_direct() ? "O_DIRECT" : "buffered");
        return all_equal ? 0 : 1;
    });
}

// make_safetensors: writes a safetensors file of tensors with odd sizes (and a header whose
// length keeps the data unaligned), for trying load_tensors. The tensor data is the generated
// pattern (support/pattern.hpp) for SEED; shapes and dtypes come from SEED too.

#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/pattern.hpp"

namespace support = nvmeio::support;

int main(int argc, char** argv) {
    return support::run_main("make_safetensors", 2, [&] {
        CLI::App app{"Write a safetensors file of generated tensors with odd sizes."};
        std::string path;
        unsigned count = 24;
        std::uint64_t seed = 1;
        app.add_option("file", path, "the file to write (truncated if it exists)")->required();
        support::add_count_option(app, "tensors", count, "number of tensors (1 to 10000)", 1u,
                                  10000u);
        support::add_count_option(app, "seed", seed, "seed of shapes, dtypes and data",
                                  std::uint64_t{0});
        support::parse_command_line(app, argc, argv);

        std::mt19937_64 random(seed);
        const char* dtypes[] = {"F32", "F16", "BF16", "I64", "U8", "F64"};
        const std::uint64_t sizes[] = {4, 2, 2, 8, 1, 8};
        std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
        std::uint64_t data_length = 0;
        for (unsigned i = 0; i < count; ++i) {
            const auto kind = static_cast<std::size_t>(random() % 6);
            const std::uint64_t rows = 1 + random() % 257, cols = 1 + random() % 1031;
            const std::uint64_t bytes = rows * cols * sizes[kind];
            header += ",\"layer." + std::to_string(i) + ".weight\":{\"dtype\":\"" + dtypes[kind] +
                      "\",\"shape\":[" + std::to_string(rows) + "," + std::to_string(cols) +
                      "],\"data_offsets\":[" + std::to_string(data_length) + "," +
                      std::to_string(data_length + bytes) + "]}";
            data_length += bytes;
        }
        header += "}";
        if (header.size() % 8 == 0) header += " ";  // keep the data start off any alignment

        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        unsigned char length[8];
        for (int i = 0; i < 8; ++i)
            length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
        out.write(reinterpret_cast<const char*>(length), 8);
        out << header;
        const std::vector<unsigned char> data =
            support::pattern(static_cast<std::size_t>(data_length), seed);
        out.write(reinterpret_cast<const char*>(data.data()),
                  static_cast<std::streamsize>(data.size()));
        out.close();
        if (!out) throw std::runtime_error("cannot write '" + path + "'");
        std::cout << "wrote " << path << ": " << count << " tensors, "
                  << 8 + header.size() + data_length << " bytes\n";
        return 0;
    });
}

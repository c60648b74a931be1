// make_safetensors: writes a safetensors file of generated tensors with odd sizes (and a header
// whose length keeps the data unaligned), for trying load_tensors. Usage:
//   make_safetensors FILE [TENSORS] [SEED]

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "--help") {
        std::cout << "usage: make_safetensors FILE [TENSORS=24] [SEED=1]\n";
        return argc < 2 ? 2 : 0;
    }
    const int count = argc > 2 ? std::stoi(argv[2]) : 24;
    std::mt19937_64 random(argc > 3 ? std::stoull(argv[3]) : 1);
    const char* dtypes[] = {"F32", "F16", "BF16", "I64", "U8", "F64"};
    const std::size_t sizes[] = {4, 2, 2, 8, 1, 8};

    std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
    std::uint64_t data_length = 0;
    for (int i = 0; i < count; ++i) {
        const int kind = static_cast<int>(random() % 6);
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

    std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i)
        length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out << header;
    std::vector<char> data(data_length);
    for (char& c : data)
        c = static_cast<char>(random());
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
        std::cerr << "make_safetensors: cannot write " << argv[1] << "\n";
        return 2;
    }
    std::cout << "wrote " << argv[1] << ": " << count << " tensors, "
              << 8 + header.size() + data_length << " bytes\n";
    return 0;
}

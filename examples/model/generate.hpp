#pragma once
/// \file model/generate.hpp
/// Writes GGUF and safetensors files of generated tensors to try loaders on: many tensors of odd
/// sizes and of every element type the parser knows, GGUF metadata of every value type (nested
/// arrays too), any size. Every byte of the data section is the generated pattern
/// (support/pattern.hpp) at its file offset, and the seed is stored in the file
/// (`nvmeio.pattern_seed`), so a loader can check any tensor without a second read.

#include <nlohmann/json.hpp>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/format.hpp"
#include "model/parse.hpp"
#include "support/pattern.hpp"

namespace example::model {

/// What to generate.
struct model_spec {
    format kind = format::gguf;
    std::uint32_t version = 3;      ///< GGUF version: 2 or 3.
    std::uint32_t alignment = 32;   ///< GGUF general.alignment (a power of two).
    std::uint64_t tensors = 48;     ///< Number of tensors (>= 1).
    std::uint64_t bytes = 8 << 20;  ///< About this many tensor bytes in all.
    std::uint64_t seed = 1;         ///< Picks sizes and types, and seeds the pattern.
};

/// A generated file before its data is written: the bytes up to the data section (header and
/// padding) and the layout the parser must find.
struct planned_model {
    std::vector<std::byte> header;
    model_layout layout;
};

namespace detail {

// Appends little-endian integers and GGUF strings.
struct byte_writer {
    std::vector<std::byte>& out;
    std::uint64_t keys = 0;  // GGUF key/values written

    template <class T>
    void put(T value) {
        for (std::size_t i = 0; i < sizeof(T); ++i)
            out.push_back(static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * i)));
    }
    void put_string(const std::string& s) {
        put<std::uint64_t>(s.size());
        for (char c : s)
            out.push_back(static_cast<std::byte>(c));
    }
    void put_key(const std::string& key, std::uint32_t type) {
        ++keys;
        put_string(key);
        put<std::uint32_t>(type);
    }
};

// Key/values of every GGUF value type, nested arrays included.
inline void put_gguf_metadata(byte_writer& w, const model_spec& spec) {
    w.put_key("general.architecture", gguf_string);
    w.put_string("nvmeio-generated");
    w.put_key("general.alignment", gguf_uint32);
    w.put<std::uint32_t>(spec.alignment);
    w.put_key(pattern_seed_key, gguf_uint64);
    w.put<std::uint64_t>(spec.seed);
    w.put_key("test.uint8", gguf_uint8);
    w.put<std::uint8_t>(200);
    w.put_key("test.int8", gguf_int8);
    w.put<std::int8_t>(-100);
    w.put_key("test.uint16", gguf_uint16);
    w.put<std::uint16_t>(60000);
    w.put_key("test.int16", gguf_int16);
    w.put<std::int16_t>(-30000);
    w.put_key("test.int32", gguf_int32);
    w.put<std::int32_t>(-2000000000);
    w.put_key("test.float32", gguf_float32);
    w.put<std::uint32_t>(0x3FC00000u);  // 1.5f
    w.put_key("test.bool", gguf_bool);
    w.put<std::uint8_t>(1);
    w.put_key("test.int64", gguf_int64);
    w.put<std::int64_t>(-(std::int64_t{1} << 40));
    w.put_key("test.float64", gguf_float64);
    w.put<std::uint64_t>(0x3FF8000000000000ull);  // 1.5
    w.put_key("tokenizer.ggml.tokens", gguf_array);
    w.put<std::uint32_t>(gguf_string);
    w.put<std::uint64_t>(300);
    for (int i = 0; i < 300; ++i)
        w.put_string("tok" + std::to_string(i * 7919 % 1000));
    w.put_key("test.nested", gguf_array);  // [[0], [0, 1], [0, 1, 2]] of int16
    w.put<std::uint32_t>(gguf_array);
    w.put<std::uint64_t>(3);
    for (std::uint64_t n = 1; n <= 3; ++n) {
        w.put<std::uint32_t>(gguf_int16);
        w.put<std::uint64_t>(n);
        for (std::uint64_t k = 0; k < n; ++k)
            w.put<std::int16_t>(static_cast<std::int16_t>(k));
    }
}

// Odd shapes of about `target` bytes: the first dimension a whole number of blocks.
inline std::vector<std::uint64_t> pick_shape(std::mt19937_64& random, std::uint64_t target,
                                             std::uint32_t block_elements,
                                             std::uint32_t block_bytes) {
    const std::uint64_t rows = 1 + random() % 13;
    const std::uint64_t blocks = std::max<std::uint64_t>(1, target / (rows * block_bytes)) +
                                 random() % 3;  // + 0..2 keeps sizes off round numbers
    const std::uint64_t first = blocks * block_elements;
    switch (random() % 4) {
        case 0:
            return {first * rows};
        case 1:
            return {first, rows, 1};
        default:
            return {first, rows};
    }
}

}  // namespace detail

namespace detail {

// Tensors of about spec.bytes in all, cycling through the element types, at offsets relative
// to the data section; returns the data section's length.
inline std::uint64_t plan_tensors(const model_spec& spec, std::vector<tensor_info>& tensors) {
    std::mt19937_64 random(spec.seed);
    const std::uint64_t average = std::max<std::uint64_t>(1, spec.bytes / spec.tensors);
    std::uint64_t data_length = 0;
    for (std::uint64_t i = 0; i < spec.tensors; ++i) {
        tensor_info t;
        const std::uint64_t target = average / 4 + random() % (average * 3 / 2 + 1);
        if (spec.kind == format::gguf) {
            const ggml_type_info& type = ggml_types[i % std::size(ggml_types)];
            t.type = type.name;
            t.shape = pick_shape(random, target, type.block_elements, type.block_bytes);
            t.size = *element_count(t.shape) / type.block_elements * type.block_bytes;
            data_length = (data_length + spec.alignment - 1) / spec.alignment * spec.alignment;
        } else {
            const dtype_info& type = safetensors_dtypes[i % std::size(safetensors_dtypes)];
            t.type = type.name;
            t.shape = pick_shape(random, target, 1, type.bytes);
            t.size = *element_count(t.shape) * type.bytes;
        }
        t.name = "blk." + std::to_string(i / 7) + ".tensor_" + std::to_string(i % 7);
        t.offset = data_length;
        data_length += t.size;
        tensors.push_back(std::move(t));
    }
    return data_length;
}

// The GGUF header: magic, version, counts, key/values, tensor infos (offsets still relative).
inline void put_gguf_header(const model_spec& spec, planned_model& plan) {
    model_layout& layout = plan.layout;
    byte_writer w{plan.header};
    layout.version = spec.version;
    layout.alignment = spec.alignment;
    layout.architecture = "nvmeio-generated";
    w.put<std::uint32_t>(0x46554747u);
    w.put<std::uint32_t>(spec.version);
    w.put<std::uint64_t>(layout.tensors.size());
    const std::size_t count_at = plan.header.size();
    w.put<std::uint64_t>(0);  // the key/value count, written once known
    put_gguf_metadata(w, spec);
    layout.metadata_count = w.keys;
    for (std::size_t i = 0; i < 8; ++i)
        plan.header[count_at + i] = static_cast<std::byte>(layout.metadata_count >> (8 * i));
    for (const tensor_info& t : layout.tensors) {
        w.put_string(t.name);
        w.put<std::uint32_t>(static_cast<std::uint32_t>(t.shape.size()));
        for (std::uint64_t d : t.shape)
            w.put<std::uint64_t>(d);
        w.put<std::uint32_t>(find_ggml_type(t.type)->id);
        w.put<std::uint64_t>(t.offset);
    }
    layout.data_offset =
        (plan.header.size() + spec.alignment - 1) / spec.alignment * spec.alignment;
}

// The safetensors header: length, then the JSON, padded so that the data starts unaligned.
inline void put_safetensors_header(const model_spec& spec, planned_model& plan) {
    model_layout& layout = plan.layout;
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}, {pattern_seed_key, std::to_string(spec.seed)}};
    layout.metadata_count = 2;
    for (const tensor_info& t : layout.tensors) {
        header[t.name] = {
            {"dtype", t.type}, {"shape", t.shape}, {"data_offsets", {t.offset, t.offset + t.size}}};
    }
    std::string text = header.dump();
    if ((8 + text.size()) % 8 == 0) text += ' ';  // keep the data start off any alignment
    byte_writer w{plan.header};
    w.put<std::uint64_t>(text.size());
    for (char c : text)
        plan.header.push_back(static_cast<std::byte>(c));
    layout.data_offset = plan.header.size();
}

}  // namespace detail

/// Plans a file: its header bytes and the layout. Throws std::invalid_argument for a bad spec.
inline planned_model plan_model(const model_spec& spec) {
    if (spec.tensors == 0) throw std::invalid_argument("a model needs at least one tensor");
    if (spec.kind == format::gguf && spec.version != 2 && spec.version != 3)
        throw std::invalid_argument("GGUF version must be 2 or 3");
    if (spec.alignment == 0 || (spec.alignment & (spec.alignment - 1)) != 0)
        throw std::invalid_argument("GGUF alignment must be a power of two");
    if (spec.tensors > (std::uint64_t{1} << 20) || spec.bytes > (std::uint64_t{1} << 46))
        throw std::invalid_argument("at most 2^20 tensors and 64 TiB");
    planned_model plan;
    model_layout& layout = plan.layout;
    layout.kind = spec.kind;
    layout.pattern_seed = spec.seed;
    const std::uint64_t data_length = detail::plan_tensors(spec, layout.tensors);
    if (spec.kind == format::gguf) {
        detail::put_gguf_header(spec, plan);
    } else {
        detail::put_safetensors_header(spec, plan);
    }
    plan.header.resize(layout.data_offset, std::byte{0});  // GGUF pads with zeros
    for (tensor_info& t : layout.tensors)
        t.offset += layout.data_offset;
    layout.file_size = layout.data_offset + data_length;
    return plan;
}

/// Writes the file `plan` describes with nvmeio (O_DIRECT where the filesystem accepts it):
/// the header, then the pattern over the whole data section.
template <class Backend>
void write_model(nvmeio::basic_aio_context<Backend>& context, const std::string& path,
                 const planned_model& plan) {
    nvmeio::file out(path, nvmeio::open_mode::write, nvmeio::direct_io::automatic);
    const std::size_t chunk = std::size_t{64} << 20;
    const std::uint64_t size = plan.layout.file_size;
    nvmeio::aligned_buffer buffer(static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size)));
    const std::uint64_t seed = *plan.layout.pattern_seed;
    for (std::uint64_t at = 0; at < size; at += chunk) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - at));
        std::size_t filled = 0;
        if (at < plan.header.size()) {
            filled = static_cast<std::size_t>(std::min<std::uint64_t>(n, plan.header.size() - at));
            std::memcpy(buffer.data(), plan.header.data() + at, filled);
        }
        nvmeio::support::fill_pattern(buffer.data() + filled, n - filled, at + filled, seed);
        nvmeio::write(context, out, nvmeio::memory(buffer).first(n), at);
    }
    out.sync();
}

}  // namespace example::model

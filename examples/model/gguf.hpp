#pragma once
/// \file model/gguf.hpp
/// The GGUF parser (versions 2 and 3): "GGUF", uint32 version, uint64 tensor count, uint64
/// key/value count; each key/value is a string key (uint64 length + bytes), a uint32 value type
/// and the value (arrays: uint32 element type, uint64 count, elements; they may nest); each
/// tensor info is a string name, a uint32 dimension count (at most 4), the uint64 dimensions, a
/// uint32 ggml type and a uint64 offset into the data section (a multiple of
/// `general.alignment`, a uint32 that defaults to 32). The data section starts at the end of the
/// infos rounded up to the alignment.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/cursor.hpp"
#include "model/format.hpp"

namespace example::model {

namespace detail {

// Magic, version and the two counts; the counts are checked against the bytes left, since a
// key/value takes at least 13 bytes and a tensor info at least 24.
inline void read_gguf_header(cursor& in, model_layout& layout, std::uint64_t& tensor_count) {
    const auto magic = in.read<std::uint32_t>("magic");
    if (magic != 0x46554747u) in.fail("magic", "the file does not start with \"GGUF\"");
    const auto version = in.read<std::uint32_t>("version");
    if (version == 0x02000000u || version == 0x03000000u) {
        in.fail("version", "a big-endian GGUF file; only little-endian files are supported");
    }
    if (version == 1) {
        in.fail("version", "version 1 (32-bit counts) is not supported; only versions 2 and 3");
    }
    if (version != 2 && version != 3) {
        in.fail("version", std::to_string(version) + " is not supported; only versions 2 and 3");
    }
    layout.version = version;
    tensor_count = in.read<std::uint64_t>("tensor_count");
    layout.metadata_count = in.read<std::uint64_t>("metadata_kv_count");
    if (layout.metadata_count > in.file_left() / 13) {
        in.fail("metadata_kv_count", std::to_string(layout.metadata_count) +
                                         " key/value pairs cannot fit in the file's " +
                                         std::to_string(in.file_left()) + " remaining bytes");
    }
    if (tensor_count > in.file_left() / 24) {
        in.fail("tensor_count", std::to_string(tensor_count) +
                                    " tensor infos cannot fit in the file's " +
                                    std::to_string(in.file_left()) + " remaining bytes");
    }
}

// The key/values: general.alignment checked and kept, the architecture and the generators'
// seed kept, every other value skipped with its counts checked.
inline void read_gguf_metadata(cursor& in, model_layout& layout) {
    layout.alignment = 32;
    std::set<std::string> keys;
    for (std::uint64_t i = 0; i < layout.metadata_count; ++i) {
        const std::string field = "metadata key/value " + std::to_string(i);
        const std::string key = in.read_string(field + " key");
        const std::string named = field + " '" + key + "'";
        if (!keys.insert(key).second) in.fail(named, "the key appears twice");
        const auto type = in.read<std::uint32_t>(named + " type");
        if (key == "general.alignment") {
            if (type != gguf_uint32) {
                in.fail(named, "must be a uint32 (type 4), not type " + std::to_string(type));
            }
            const auto alignment = in.read<std::uint32_t>(named);
            if (!is_power_of_two(alignment)) {
                in.fail(named, std::to_string(alignment) + " is not a power of two");
            }
            layout.alignment = alignment;
        } else if (key == "general.architecture" && type == gguf_string) {
            layout.architecture = in.read_string(named);
        } else if (key == pattern_seed_key && type == gguf_uint64) {
            layout.pattern_seed = in.read<std::uint64_t>(named);
        } else {
            skip_gguf_value(in, type, named, 0);
        }
    }
}

// Tensor info `index`: name, shape, type, the size they give, and the offset relative to the
// data section.
inline tensor_info read_gguf_tensor_info(cursor& in, std::uint64_t index, std::uint64_t alignment) {
    const std::string field = "tensor info " + std::to_string(index);
    tensor_info t;
    t.name = in.read_string(field + " name");
    const std::string named = field + " '" + t.name + "'";
    const auto dims = in.read<std::uint32_t>(named + " n_dims");
    if (dims > 4) in.fail(named + " n_dims", std::to_string(dims) + " is more than 4");
    for (std::uint32_t d = 0; d < dims; ++d)
        t.shape.push_back(in.read<std::uint64_t>(named + " dimension " + std::to_string(d)));
    const auto type_id = in.read<std::uint32_t>(named + " type");
    const ggml_type_info* type = find_ggml_type(type_id);
    if (type == nullptr) {
        in.fail(named + " type", "ggml type " + std::to_string(type_id) +
                                     " is unknown to this loader (known: F32, F16, BF16, "
                                     "Q4_0..Q8_1, Q2_K..Q8_K, I8..I64, F64)");
    }
    t.type = type->name;
    const std::optional<std::uint64_t> elements = element_count(t.shape);
    if (!elements) {
        in.fail(named + " shape", shape_text(t.shape) + " has more than 2^63 - 1 elements");
    }
    const std::uint64_t row = t.shape.empty() ? 1 : t.shape[0];
    if (row % type->block_elements != 0) {
        in.fail(named + " shape", "the first dimension " + std::to_string(row) +
                                      " is not a multiple of " + type->name + "'s " +
                                      std::to_string(type->block_elements) + "-element blocks");
    }
    const std::optional<std::uint64_t> size =
        checked_mul(*elements / type->block_elements, type->block_bytes);
    if (!size) in.fail(named, "its byte size does not fit in 64 bits");
    t.size = *size;
    t.offset = in.read<std::uint64_t>(named + " offset");
    if (t.offset % alignment != 0) {
        in.fail(named + " offset", std::to_string(t.offset) +
                                       " is not a multiple of general.alignment (" +
                                       std::to_string(alignment) + ")");
    }
    return t;
}

}  // namespace detail

/// Parses a GGUF file from its first `available` bytes (`file_size` in all). Throws
/// malformed_model; throws detail::need_more_bytes when `available < file_size` and the header
/// goes on past `available`.
inline model_layout parse_gguf(const std::byte* data, std::size_t available,
                               std::uint64_t file_size, const std::string& path) {
    detail::cursor in(data, available, file_size, path, format::gguf);
    model_layout layout;
    layout.kind = format::gguf;
    layout.file_size = file_size;
    std::uint64_t tensor_count = 0;
    detail::read_gguf_header(in, layout, tensor_count);
    detail::read_gguf_metadata(in, layout);
    std::set<std::string> names;
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
        layout.tensors.push_back(detail::read_gguf_tensor_info(in, i, layout.alignment));
        if (!names.insert(layout.tensors.back().name).second) {
            in.fail("tensor info " + std::to_string(i) + " '" + layout.tensors.back().name + "'",
                    "the name appears twice");
        }
    }
    const std::uint64_t header_end = in.position();
    layout.data_offset = (header_end + layout.alignment - 1) / layout.alignment * layout.alignment;
    for (tensor_info& t : layout.tensors) {
        const std::optional<std::uint64_t> absolute = checked_add(layout.data_offset, t.offset);
        if (!absolute) in.fail("tensor '" + t.name + "' offset", "passes 2^64 bytes");
        t.offset = *absolute;
    }
    detail::check_ranges(layout.tensors, layout.data_offset, file_size, in);
    return layout;
}

}  // namespace example::model

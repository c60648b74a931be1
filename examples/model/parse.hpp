#pragma once
/// \file model/parse.hpp
/// The one model-file parser: GGUF (versions 2 and 3) and safetensors, from the bytes at the
/// start of a file, every size computation overflow-checked. A file that breaks a rule is a
/// `malformed_model` naming the file, the field and the rule; nothing else is thrown for bad
/// bytes, no loop runs longer than the bytes it has, and what is returned satisfies
/// `model_layout`'s promise (every tensor inside the file and the data section, none
/// overlapping).
///
/// GGUF: "GGUF", uint32 version, uint64 tensor count, uint64 key/value count; each key/value is
/// a string key (uint64 length + bytes), a uint32 value type and the value (arrays: uint32
/// element type, uint64 count, elements; they may nest); each tensor info is a string name, a
/// uint32 dimension count (at most 4), the uint64 dimensions, a uint32 ggml type and a uint64
/// offset into the data section (a multiple of `general.alignment`, a uint32 that defaults to
/// 32). The data section starts at the end of the infos rounded up to the alignment.
///
/// safetensors: a uint64 header length N, N bytes of JSON mapping each tensor's name to
/// {"dtype", "shape", "data_offsets": [begin, end]} (relative to the data after the header) and
/// an optional string-to-string "__metadata__"; the tensors cover the data without holes.

#include <nlohmann/json.hpp>
#include <nvmeio/file.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "model/format.hpp"

namespace example::model {

/// Largest header (GGUF metadata and tensor infos, or safetensors JSON) accepted: real models'
/// tokenizer vocabularies take a few MiB; safetensors itself caps its header at 100 MB.
inline constexpr std::uint64_t max_header_bytes = std::uint64_t{256} << 20;

/// The GGUF metadata key the generators store their pattern seed under (a uint64).
inline constexpr const char* pattern_seed_key = "nvmeio.pattern_seed";

namespace detail {

// Thrown when the parse needs more of the file than it was given (never escapes parse_model's
// caller `read_layout`, which then reads more).
struct need_more_bytes {
    std::uint64_t at_least;
};

// Reads little-endian fields from the prefix of a file, checking every length against what is
// there before touching it.
class cursor {
  public:
    cursor(const std::byte* data, std::size_t available, std::uint64_t file_size,
           const std::string& path, format kind)
        : data_(data), available_(available), file_size_(file_size), path_(path), kind_(kind) {}

    [[noreturn]] void fail(const std::string& field, const std::string& rule) const {
        throw malformed_model(path_, kind_, field, rule);
    }

    [[nodiscard]] std::uint64_t position() const noexcept { return position_; }
    // Bytes of the file after the cursor (not only those in memory).
    [[nodiscard]] std::uint64_t file_left() const noexcept { return file_size_ - position_; }

    // Makes sure `n` more bytes are in memory, or says why they cannot be.
    void need(std::uint64_t n, const std::string& field) const {
        if (n > file_left()) {
            fail(field, "needs " + std::to_string(n) + " bytes at offset " +
                            std::to_string(position_) + ", past the end of the file (" +
                            std::to_string(file_size_) + " bytes)");
        }
        if (position_ + n > max_header_bytes) {
            fail(field, "the header would pass " + std::to_string(max_header_bytes) +
                            " bytes, the most this loader accepts");
        }
        if (position_ + n > available_) throw need_more_bytes{position_ + n};
    }

    template <class T>
    T read(const std::string& field) {
        need(sizeof(T), field);
        T value = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i)
            value |= static_cast<T>(static_cast<T>(data_[position_ + i]) << (8 * i));
        position_ += sizeof(T);
        return value;
    }

    void skip(std::uint64_t n, const std::string& field) {
        need(n, field);
        position_ += n;
    }

    std::string read_string(const std::string& field) {
        const auto length = read<std::uint64_t>(field + " length");
        need(length, field);
        std::string s(reinterpret_cast<const char*>(data_ + position_),
                      static_cast<std::size_t>(length));
        position_ += length;
        return s;
    }

  private:
    const std::byte* data_;
    std::size_t available_;
    std::uint64_t file_size_;
    const std::string& path_;
    format kind_;
    std::uint64_t position_ = 0;
};

// GGUF value types.
enum gguf_value : std::uint32_t {
    gguf_uint8 = 0,
    gguf_int8,
    gguf_uint16,
    gguf_int16,
    gguf_uint32,
    gguf_int32,
    gguf_float32,
    gguf_bool,
    gguf_string,
    gguf_array,
    gguf_uint64,
    gguf_int64,
    gguf_float64,
};

// Bytes of a fixed-size GGUF value, 0 for string and array, -1 for an unknown type.
inline int gguf_fixed_size(std::uint32_t type) {
    switch (type) {
        case gguf_uint8:
        case gguf_int8:
        case gguf_bool:
            return 1;
        case gguf_uint16:
        case gguf_int16:
            return 2;
        case gguf_uint32:
        case gguf_int32:
        case gguf_float32:
            return 4;
        case gguf_uint64:
        case gguf_int64:
        case gguf_float64:
            return 8;
        case gguf_string:
        case gguf_array:
            return 0;
        default:
            return -1;
    }
}

inline constexpr unsigned gguf_max_array_depth = 8;

// Skips one value of `type`, checking every count against the bytes left in the file.
inline void skip_gguf_value(cursor& in, std::uint32_t type, const std::string& field,
                            unsigned depth) {
    const int fixed = gguf_fixed_size(type);
    if (fixed < 0) in.fail(field, "unknown value type " + std::to_string(type));
    if (fixed > 0) {
        in.skip(static_cast<std::uint64_t>(fixed), field);
        return;
    }
    if (type == gguf_string) {
        (void)in.read_string(field);
        return;
    }
    if (depth >= gguf_max_array_depth) {
        in.fail(field, "arrays nested deeper than " + std::to_string(gguf_max_array_depth));
    }
    const auto element_type = in.read<std::uint32_t>(field + " element type");
    const auto count = in.read<std::uint64_t>(field + " element count");
    const int element_fixed = gguf_fixed_size(element_type);
    if (element_fixed < 0) {
        in.fail(field, "unknown array element type " + std::to_string(element_type));
    }
    // Smallest encoding of one element: its fixed size, a string's length, an array's header.
    const std::uint64_t smallest = element_fixed > 0 ? static_cast<std::uint64_t>(element_fixed)
                                                     : (element_type == gguf_string ? 8 : 12);
    if (count > in.file_left() / smallest) {
        in.fail(field, std::to_string(count) + " elements of at least " + std::to_string(smallest) +
                           " bytes do not fit in the " + std::to_string(in.file_left()) +
                           " bytes left in the file");
    }
    if (element_fixed > 0) {
        in.skip(count * smallest, field);
        return;
    }
    for (std::uint64_t i = 0; i < count; ++i)
        skip_gguf_value(in, element_type, field, depth + 1);
}

inline bool is_power_of_two(std::uint64_t x) {
    return x != 0 && (x & (x - 1)) == 0;
}

// Checks that the tensors lie in [data_offset, file_size) and do not overlap; sorts them.
inline void check_ranges(std::vector<tensor_info>& tensors, std::uint64_t data_offset,
                         std::uint64_t file_size, const cursor& in) {
    for (const tensor_info& t : tensors) {
        const std::string field = "tensor '" + t.name + "'";
        const std::optional<std::uint64_t> end = checked_add(t.offset, t.size);
        if (t.offset < data_offset || !end) {
            in.fail(field, "its range does not fit in 64-bit file offsets");
        }
        if (*end > file_size) {
            in.fail(field, "bytes [" + std::to_string(t.offset) + ", " + std::to_string(*end) +
                               ") pass the end of the file (" + std::to_string(file_size) +
                               " bytes)");
        }
    }
    std::sort(tensors.begin(), tensors.end(), [](const tensor_info& a, const tensor_info& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
    });
    const tensor_info* previous = nullptr;
    for (const tensor_info& t : tensors) {
        if (t.size == 0) continue;
        if (previous != nullptr && previous->offset + previous->size > t.offset) {
            in.fail("tensor '" + t.name + "'",
                    "bytes [" + std::to_string(t.offset) + ", " +
                        std::to_string(t.offset + t.size) + ") overlap tensor '" + previous->name +
                        "' [" + std::to_string(previous->offset) + ", " +
                        std::to_string(previous->offset + previous->size) + ")");
        }
        previous = &t;
    }
}

}  // namespace detail

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

namespace detail {

// "__metadata__": string values only; the generators' seed kept.
inline void read_safetensors_metadata(const cursor& in, const nlohmann::json& entry,
                                      model_layout& layout) {
    if (!entry.is_object()) in.fail("__metadata__", "not a JSON object");
    for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) in.fail("__metadata__ '" + key + "'", "the value is not a string");
        ++layout.metadata_count;
        if (key != pattern_seed_key) continue;
        const std::string& seed = value.get_ref<const std::string&>();
        const bool digits =
            !seed.empty() && seed.size() <= 19 &&
            std::all_of(seed.begin(), seed.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) in.fail("__metadata__ '" + key + "'", "not a decimal number");
        layout.pattern_seed = std::stoull(seed);
    }
}

// One tensor entry: dtype, shape and data_offsets, checked against each other.
inline tensor_info read_safetensors_tensor(const cursor& in, const std::string& name,
                                           const nlohmann::json& entry, std::uint64_t data_offset) {
    const std::string field = "tensor '" + name + "'";
    if (!entry.is_object()) in.fail(field, "not a JSON object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) {
        in.fail(field + " dtype", "missing or not a string");
    }
    tensor_info t;
    t.name = name;
    t.type = dtype->get<std::string>();
    const dtype_info* type = find_dtype(t.type);
    if (type == nullptr) in.fail(field + " dtype", "unknown dtype '" + t.type + "'");
    if (shape == entry.end() || !shape->is_array()) {
        in.fail(field + " shape", "missing or not an array");
    }
    for (const nlohmann::json& d : *shape) {
        if (!d.is_number_unsigned()) {
            in.fail(field + " shape", "dimension " + d.dump() + " is not a non-negative integer");
        }
        t.shape.push_back(d.get<std::uint64_t>());
    }
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
        in.fail(field + " data_offsets", "must be two non-negative integers [begin, end]");
    }
    const auto begin = (*offsets)[0].get<std::uint64_t>();
    const auto end = (*offsets)[1].get<std::uint64_t>();
    if (end < begin) {
        in.fail(field + " data_offsets",
                "end " + std::to_string(end) + " is before begin " + std::to_string(begin));
    }
    const std::optional<std::uint64_t> elements = element_count(t.shape);
    if (!elements) {
        in.fail(field + " shape", shape_text(t.shape) + " has more than 2^63 - 1 elements");
    }
    const std::optional<std::uint64_t> size = checked_mul(*elements, type->bytes);
    if (!size || *size != end - begin) {
        in.fail(field + " data_offsets",
                "[" + std::to_string(begin) + ", " + std::to_string(end) + ") holds " +
                    std::to_string(end - begin) + " bytes but shape " + shape_text(t.shape) +
                    " of " + t.type + " needs " +
                    (size ? std::to_string(*size) : std::string("more than 2^64")));
    }
    const std::optional<std::uint64_t> absolute = checked_add(data_offset, begin);
    if (!absolute) in.fail(field + " data_offsets", "begin passes 2^64 bytes");
    t.offset = *absolute;
    t.size = *size;
    return t;
}

// safetensors forbids holes: the tensors (sorted, not overlapping) tile the data section.
inline void check_no_holes(const cursor& in, const model_layout& layout) {
    std::uint64_t expected = layout.data_offset;
    for (const tensor_info& t : layout.tensors) {
        if (t.offset != expected) {
            in.fail("tensor '" + t.name + "' data_offsets",
                    "starts at data byte " + std::to_string(t.offset - layout.data_offset) +
                        " but the tensors before it end at " +
                        std::to_string(expected - layout.data_offset) +
                        " (safetensors allows no holes)");
        }
        expected = t.offset + t.size;
    }
    if (expected != layout.file_size) {
        in.fail("data", std::to_string(layout.file_size - expected) +
                            " bytes after the last tensor (safetensors allows no holes)");
    }
}

}  // namespace detail

/// Parses a safetensors file from its first `available` bytes (`file_size` in all). Throws
/// malformed_model, or detail::need_more_bytes as parse_gguf does.
inline model_layout parse_safetensors(const std::byte* data, std::size_t available,
                                      std::uint64_t file_size, const std::string& path) {
    detail::cursor in(data, available, file_size, path, format::safetensors);
    model_layout layout;
    layout.kind = format::safetensors;
    layout.file_size = file_size;
    const auto header_length = in.read<std::uint64_t>("header length");
    if (header_length > in.file_left()) {
        in.fail("header length", std::to_string(header_length) + " passes the end of the file (" +
                                     std::to_string(file_size) + " bytes)");
    }
    in.need(header_length, "header");
    const auto* text = reinterpret_cast<const char*>(data + 8);
    const nlohmann::json header = nlohmann::json::parse(text, text + header_length, nullptr, false);
    if (header.is_discarded()) in.fail("header", "not valid JSON");
    if (!header.is_object()) in.fail("header", "not a JSON object");
    layout.data_offset = 8 + header_length;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            detail::read_safetensors_metadata(in, entry, layout);
        } else {
            layout.tensors.push_back(
                detail::read_safetensors_tensor(in, name, entry, layout.data_offset));
        }
    }
    detail::check_ranges(layout.tensors, layout.data_offset, file_size, in);
    detail::check_no_holes(in, layout);
    return layout;
}

/// Parses either format, told apart by their first bytes ("GGUF", or a length then '{').
inline model_layout parse_model(const std::byte* data, std::size_t available,
                                std::uint64_t file_size, const std::string& path) {
    if (available >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
        return parse_gguf(data, available, file_size, path);
    }
    if (available >= 9 && static_cast<char>(data[8]) == '{') {
        return parse_safetensors(data, available, file_size, path);
    }
    if (available < 9 && available < file_size) throw detail::need_more_bytes{9};
    throw malformed_model(path, "it starts with neither \"GGUF\" nor an 8-byte length and '{'");
}

/// Opens `path` (buffered), reads as much of its start as the header needs and parses it.
/// Throws malformed_model for a bad file, nvmeio::io_error when it cannot be read.
inline model_layout read_layout(const std::string& path) {
    nvmeio::file in(path, nvmeio::open_mode::read, nvmeio::direct_io::off);
    const std::uint64_t file_size = in.size();
    std::vector<std::byte> head;
    std::uint64_t want = std::min<std::uint64_t>(file_size, std::uint64_t{1} << 20);
    for (;;) {
        head.resize(static_cast<std::size_t>(want));
        const std::size_t got = in.read_at(head.data(), head.size(), 0);
        try {
            return parse_model(head.data(), got, file_size, path);
        } catch (const detail::need_more_bytes& more) {
            if (got < head.size()) {
                throw malformed_model(path, format::gguf, "file",
                                      "it shrank while its header was read");
            }
            want = std::min<std::uint64_t>(file_size, std::max(more.at_least, want * 2));
        }
    }
}

}  // namespace example::model

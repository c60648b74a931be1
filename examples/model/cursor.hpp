#pragma once
/// \file model/cursor.hpp
/// What both model-file parsers (model/gguf.hpp, model/safetensors.hpp) read with: a cursor over
/// the prefix of a file that checks every length against the bytes there before touching them,
/// and the check that the tensors lie inside the file without overlapping.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
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

}  // namespace example::model

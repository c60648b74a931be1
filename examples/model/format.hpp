#pragma once
/// \file model/format.hpp
/// What the model-file module knows about a model file once parsed: its tensors (name, element
/// type, shape, absolute byte range), the element-type tables of GGUF (ggml types) and
/// safetensors (dtypes), and the one error a malformed file gets. Shared by every example that
/// reads or writes model files (load_model, make_model) and by
/// tests/model_parse_test.

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace example::model {

/// Which format a model file is in.
enum class format { gguf, safetensors };

/// Name of a format, for reports and messages.
[[nodiscard]] inline const char* to_string(format f) noexcept {
    return f == format::gguf ? "GGUF" : "safetensors";
}

/// One tensor: its bytes are `[offset, offset + size)` of the file.
struct tensor_info {
    std::string name;                  ///< As stored.
    std::string type;                  ///< ggml type ("Q4_K") or safetensors dtype ("BF16").
    std::vector<std::uint64_t> shape;  ///< Dimensions as stored (GGUF: innermost first).
    std::uint64_t offset = 0;          ///< Absolute file offset of the first byte.
    std::uint64_t size = 0;            ///< Bytes.
};

/// A parsed, checked model file. Every tensor lies inside the file, inside the data section, and
/// no two tensors overlap; `tensors` is sorted by offset.
struct model_layout {
    format kind = format::gguf;
    std::uint32_t version = 0;         ///< GGUF version (2 or 3); 0 for safetensors.
    std::uint64_t file_size = 0;       ///< Bytes in the file when it was parsed.
    std::uint64_t data_offset = 0;     ///< Absolute offset of the data section.
    std::uint64_t alignment = 1;       ///< GGUF `general.alignment`; 1 for safetensors.
    std::uint64_t metadata_count = 0;  ///< GGUF key/value pairs or safetensors metadata keys.
    std::string architecture;          ///< GGUF `general.architecture`, if present.
    /// Seed of the generated pattern the tensors' bytes hold (support/pattern.hpp, by absolute
    /// file offset), when the file was written by this module's generators.
    std::optional<std::uint64_t> pattern_seed;
    std::vector<tensor_info> tensors;

    /// Sum of the tensors' sizes.
    [[nodiscard]] std::uint64_t tensor_bytes() const noexcept {
        std::uint64_t total = 0;
        for (const tensor_info& t : tensors)
            total += t.size;  // cannot wrap: the ranges are disjoint inside the file
        return total;
    }
};

/// A file that breaks a rule of its format. `what()` names the file, the field and the rule:
/// `'m.gguf' is not a valid GGUF file: tensor 3 'blk.0.ffn_up' offset: 1000 is not a multiple
/// of general.alignment (32)`.
class malformed_model : public std::invalid_argument {
  public:
    /// Builds the message from its three parts.
    malformed_model(const std::string& path, format kind, const std::string& field,
                    const std::string& rule)
        : std::invalid_argument("'" + path + "' is not a valid " + to_string(kind) +
                                " file: " + field + ": " + rule) {}
    /// For a file that is in neither format.
    malformed_model(const std::string& path, const std::string& rule)
        : std::invalid_argument("'" + path +
                                "' is neither a GGUF nor a safetensors file: " + rule) {}
};

// ------------------------------------------------------------------------------- element types

/// How a ggml type packs elements: `block_elements` elements take `block_bytes` bytes.
struct ggml_type_info {
    std::uint32_t id;
    const char* name;
    std::uint32_t block_elements;
    std::uint32_t block_bytes;
};

/// The ggml types this module loads. Quantized blocks: Q4_0 holds a 2-byte scale and 32 4-bit
/// quants (18 bytes), the K-quants hold 256 elements in super-blocks.
inline constexpr ggml_type_info ggml_types[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},      {30, "BF16", 1, 2},
};

/// The ggml type `id`, or nullptr when this module does not know it.
[[nodiscard]] inline const ggml_type_info* find_ggml_type(std::uint32_t id) noexcept {
    for (const ggml_type_info& t : ggml_types) {
        if (t.id == id) return &t;
    }
    return nullptr;
}

/// The ggml type called `name`, or nullptr.
[[nodiscard]] inline const ggml_type_info* find_ggml_type(const std::string& name) noexcept {
    for (const ggml_type_info& t : ggml_types) {
        if (name == t.name) return &t;
    }
    return nullptr;
}

/// A safetensors dtype and its element size.
struct dtype_info {
    const char* name;
    std::uint32_t bytes;
};

/// The safetensors dtypes this module loads.
inline constexpr dtype_info safetensors_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
    {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8},
};

/// The dtype called `name`, or nullptr.
[[nodiscard]] inline const dtype_info* find_dtype(const std::string& name) noexcept {
    for (const dtype_info& d : safetensors_dtypes) {
        if (name == d.name) return &d;
    }
    return nullptr;
}

// ------------------------------------------------------------------------- checked arithmetic

/// `a * b`, or nullopt when it does not fit in 64 bits.
[[nodiscard]] inline std::optional<std::uint64_t> checked_mul(std::uint64_t a,
                                                              std::uint64_t b) noexcept {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return std::nullopt;
    return a * b;
}

/// `a + b`, or nullopt when it does not fit in 64 bits.
[[nodiscard]] inline std::optional<std::uint64_t> checked_add(std::uint64_t a,
                                                              std::uint64_t b) noexcept {
    if (b > std::numeric_limits<std::uint64_t>::max() - a) return std::nullopt;
    return a + b;
}

/// Product of the dimensions, or nullopt when it passes 2^63 - 1 (ggml's int64 element counts).
[[nodiscard]] inline std::optional<std::uint64_t> element_count(
    const std::vector<std::uint64_t>& shape) noexcept {
    std::uint64_t elements = 1;
    for (std::uint64_t d : shape) {
        const std::optional<std::uint64_t> next = checked_mul(elements, d);
        if (!next || *next > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            return std::nullopt;
        elements = *next;
    }
    return elements;
}

/// "[4096,32000]".
[[nodiscard]] inline std::string shape_text(const std::vector<std::uint64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i != 0 ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace example::model

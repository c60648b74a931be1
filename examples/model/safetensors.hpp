#pragma once
/// \file model/safetensors.hpp
/// The safetensors parser: a uint64 header length N, N bytes of JSON mapping each tensor's name
/// to {"dtype", "shape", "data_offsets": [begin, end]} (relative to the data after the header)
/// and an optional string-to-string "__metadata__"; the tensors cover the data without holes.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/cursor.hpp"
#include "model/format.hpp"

namespace example::model {

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

}  // namespace example::model

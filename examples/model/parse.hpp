#pragma once
/// \file model/parse.hpp
/// The one model-file parser: GGUF (model/gguf.hpp) and safetensors (model/safetensors.hpp), from
/// the bytes at the start of a file, every size computation overflow-checked. A file that breaks
/// a rule is a `malformed_model` naming the file, the field and the rule; nothing else is thrown
/// for bad bytes, no loop runs longer than the bytes it has, and what is returned satisfies
/// `model_layout`'s promise (every tensor inside the file and the data section, none
/// overlapping).

#include <nvmeio/file.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/cursor.hpp"
#include "model/format.hpp"
#include "model/gguf.hpp"
#include "model/safetensors.hpp"

namespace example::model {

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
        const std::size_t got = in.read_at(head, 0);
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

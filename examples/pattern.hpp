#pragma once
// The examples' generated data: every 8-byte word is a hash of its file offset, so a block read
// from or written to the wrong place shows up, and any range can be regenerated without memory.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace example {

inline std::uint64_t word_at(std::uint64_t offset) {
    std::uint64_t x = offset + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Fills `data` with the bytes the pattern has at file offsets [0, n).
inline void generate(std::byte* data, std::size_t n) {
    for (std::size_t at = 0; at < n; at += 8) {
        const std::uint64_t w = word_at(at);
        std::memcpy(data + at, &w, std::min<std::size_t>(8, n - at));
    }
}

// Offset of the first byte of `data` that differs from the pattern, or n.
inline std::size_t first_wrong(const std::byte* data, std::size_t n) {
    for (std::size_t at = 0; at < n; at += 8) {
        const std::uint64_t w = word_at(at);
        const std::size_t k = std::min<std::size_t>(8, n - at);
        const auto* expected = reinterpret_cast<const std::byte*>(&w);
        for (std::size_t j = 0; j < k; ++j) {
            if (data[at + j] != expected[j]) return at + j;
        }
    }
    return n;
}

}  // namespace example

#pragma once
/// \file support/pattern.hpp
/// The one generated test pattern of nvmeio's tests, tools and examples. Byte `p` of the pattern
/// for `seed` is byte `p % 8` (least significant first) of `pattern_word(p / 8, seed)`, a hash of
/// the word's index: a block read from or written to the wrong place, a stale block and a torn
/// block all show, and any range of any size can be generated or checked on its own, without
/// holding the whole file in memory. No dependency beyond nvmeio itself.

#include <nvmeio/compare.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace nvmeio::support {

/// The pattern's 8-byte word number `index` (bytes `[8 * index, 8 * index + 8)`) for `seed`.
[[nodiscard]] constexpr std::uint64_t pattern_word(std::uint64_t index,
                                                   std::uint64_t seed) noexcept {
    // splitmix64's finaliser over the index, offset by a seed-dependent odd constant.
    std::uint64_t x = index + (seed * 2 + 1) * 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// The pattern's byte at absolute offset `offset` for `seed`.
[[nodiscard]] constexpr std::byte pattern_byte(std::uint64_t offset, std::uint64_t seed) noexcept {
    return static_cast<std::byte>(pattern_word(offset / 8, seed) >> (8 * (offset % 8)));
}

/// Fills `length` bytes at `data` with the pattern's bytes `[offset, offset + length)`.
inline void fill_pattern(void* data, std::size_t length, std::uint64_t offset = 0,
                         std::uint64_t seed = 0) noexcept {
    auto* out = static_cast<std::byte*>(data);
    std::size_t i = 0;
    for (; i < length && (offset + i) % 8 != 0; ++i)
        out[i] = pattern_byte(offset + i, seed);
    for (; i + 8 <= length; i += 8) {
        const std::uint64_t word = pattern_word((offset + i) / 8, seed);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        std::memcpy(out + i, &word, 8);
#else
        for (unsigned b = 0; b < 8; ++b)
            out[i + b] = static_cast<std::byte>(word >> (8 * b));
#endif
    }
    for (; i < length; ++i)
        out[i] = pattern_byte(offset + i, seed);
}

/// `length` bytes of the pattern from offset 0, as a vector.
[[nodiscard]] inline std::vector<unsigned char> pattern(std::size_t length,
                                                        std::uint64_t seed = 0) {
    std::vector<unsigned char> bytes(length);
    fill_pattern(bytes.data(), length, 0, seed);
    return bytes;
}

/// Which of the `length` bytes at `data` differ from the pattern's bytes `[offset, offset +
/// length)`, compared with nvmeio's comparator a chunk at a time (offsets in the result are
/// relative to `data`).
[[nodiscard]] inline mismatch_summary pattern_mismatches(const void* data, std::size_t length,
                                                         std::uint64_t offset = 0,
                                                         std::uint64_t seed = 0) {
    mismatch_summary all{0, no_mismatch, no_mismatch};
    std::vector<std::byte> expected(std::min<std::size_t>(length, std::size_t{1} << 20));
    const auto* bytes = static_cast<const std::byte*>(data);
    for (std::size_t done = 0; done < length;) {
        const std::size_t n = std::min(expected.size(), length - done);
        fill_pattern(expected.data(), n, offset + done, seed);
        const mismatch_summary part = count_mismatches(bytes + done, expected.data(), n);
        if (part.count != 0) {
            if (all.count == 0) all.first = done + part.first;
            all.last = done + part.last;
            all.count += part.count;
        }
        done += n;
    }
    return all;
}

}  // namespace nvmeio::support

#pragma once
/// \file detail/compare_scalar.hpp
/// Word-at-a-time comparison kernels: the whole comparator when xsimd is absent, and the
/// head/tail handling of the SIMD kernels. All take byte pointers of any alignment.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {
namespace scalar {

/// Marks "no such offset"; the same value as nvmeio::no_mismatch.
inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

/// The count, first and last offset of differing bytes in a range.
struct mismatches {
    std::size_t count_ = 0;     ///< differing bytes
    std::size_t first_ = npos;  ///< offset of the first differing byte, or npos
    std::size_t last_ = npos;   ///< offset of the last differing byte, or npos
};

/// Loads 8 bytes from `p` of any alignment.
[[nodiscard]] inline std::uint64_t load_word(const std::uint8_t* p) noexcept {
    std::uint64_t w;
    std::memcpy(&w, p, sizeof w);  // compiles to one unaligned load
    return w;
}

/// Number of non-zero bytes in `x`.
[[nodiscard]] inline std::size_t count_nonzero_bytes(std::uint64_t x) noexcept {
    constexpr std::uint64_t low7 = 0x7F7F7F7F7F7F7F7Full;
    // Bit 7 of each byte ends up set iff the byte is non-zero; the add cannot carry across
    // bytes because (b & 0x7F) + 0x7F <= 0xFE.
    const std::uint64_t high = (((x & low7) + low7) | x) & ~low7;
    return static_cast<std::size_t>(__builtin_popcountll(high));
}

/// Offset of the first differing byte in [0, n), or npos.
[[nodiscard]] inline std::size_t first_mismatch(const std::uint8_t* a, const std::uint8_t* b,
                                                std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (load_word(a + i) != load_word(b + i)) break;  // locate bytewise: endian-neutral
    }
    for (; i < n; ++i) {
        if (a[i] != b[i]) return i;
    }
    return npos;
}

/// Offset of the last differing byte in [0, n), or npos.
[[nodiscard]] inline std::size_t last_mismatch(const std::uint8_t* a, const std::uint8_t* b,
                                               std::size_t n) noexcept {
    std::size_t i = n;
    for (; i >= 8; i -= 8) {
        if (load_word(a + i - 8) != load_word(b + i - 8)) break;
    }
    while (i > 0) {
        --i;
        if (a[i] != b[i]) return i;
    }
    return npos;
}

/// Counts the differing bytes in [0, n) and finds the first and last of them.
[[nodiscard]] inline mismatches count_mismatches(const std::uint8_t* a, const std::uint8_t* b,
                                                 std::size_t n) noexcept {
    mismatches result;
    std::size_t first_word = npos;  // offset of the first and last word that differ
    std::size_t last_word = npos;
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const std::uint64_t diff = load_word(a + i) ^ load_word(b + i);
        if (diff != 0) {
            result.count_ += count_nonzero_bytes(diff);
            if (first_word == npos) first_word = i;
            last_word = i;
        }
    }
    for (std::size_t j = i; j < n; ++j) {
        if (a[j] != b[j]) {
            ++result.count_;
            if (result.first_ == npos) result.first_ = j;
            result.last_ = j;
        }
    }
    // Only the two boundary words need a bytewise look; a mismatch in the tail is the last one.
    if (first_word != npos) {
        result.first_ = first_word + first_mismatch(a + first_word, b + first_word, 8);
        if (result.last_ == npos) {
            result.last_ = last_word + last_mismatch(a + last_word, b + last_word, 8);
        }
    }
    return result;
}

}  // namespace scalar
}  // namespace detail
NVMEIO_END_NAMESPACE

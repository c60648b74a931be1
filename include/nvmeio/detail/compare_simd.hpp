#pragma once
/// \file detail/compare_simd.hpp
/// xsimd comparison kernels for the translation unit's default architecture. The body runs on
/// unaligned loads of whole registers; what is left (less than one register) goes to the scalar
/// kernels or, where re-reading bytes is harmless, to one overlapping register at the end.

#include <nvmeio/detail/compare_scalar.hpp>
#include <nvmeio/detail/simd.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nvmeio/version.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
// GCC PR 105593, see detail/simd.hpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

NVMEIO_BEGIN_NAMESPACE
namespace detail {
namespace simd {

/// Registers compared per loop iteration: enough independent loads to keep both load ports
/// busy, with a single branch per iteration.
inline constexpr std::size_t unroll = 4;
/// Bytes per loop iteration.
inline constexpr std::size_t stride = unroll * byte_lanes;
/// Registers per counting block: each byte lane counter gains at most one per register, so
/// it must stay <= 255; a multiple of `unroll` keeps the block made of whole iterations.
inline constexpr std::size_t block_registers = 252;

/// True when any of the `stride` bytes at `a` and `b` differ.
[[nodiscard]] inline bool stride_differs(const std::uint8_t* a, const std::uint8_t* b) noexcept {
    // XOR/OR in registers and a single test: the mask is only materialised once per stride.
    const byte_batch diff = ((load(a) ^ load(b)) | (load(a + byte_lanes) ^ load(b + byte_lanes))) |
                            ((load(a + 2 * byte_lanes) ^ load(b + 2 * byte_lanes)) |
                             (load(a + 3 * byte_lanes) ^ load(b + 3 * byte_lanes)));
    return nonzero(diff);
}

// With AVX-512 on the machine this was tuned on, 32-byte loads streaming from L2 outrun 64-byte
// ones, while from L1 and from L3/DRAM the 64-byte loads are faster (docs/compare.md has the
// sweep). So lengths in this band, where a repeated comparison is served from L2, skip their
// equal prefix with half-width registers.
inline constexpr std::size_t narrow_from = std::size_t{32} << 10;    ///< first length of the band
inline constexpr std::size_t narrow_below = std::size_t{192} << 10;  ///< first length past it

/// True when equal(), first_mismatch() and count_mismatches() of `n` bytes first skip the
/// equal prefix with half-width registers.
[[nodiscard]] constexpr bool uses_narrow(std::size_t n) noexcept {
    return NVMEIO_DETAIL_SIMD_HAS_NARROW && n >= narrow_from && n < narrow_below;
}

#if NVMEIO_DETAIL_SIMD_HAS_NARROW
/// Length of the prefix of [0, n) made of whole narrow strides that hold the same bytes: the
/// first differing stride starts there, or fewer than one stride is left.
[[nodiscard]] inline std::size_t narrow_equal_prefix(const std::uint8_t* a, const std::uint8_t* b,
                                                     std::size_t n) noexcept {
    constexpr std::size_t lanes = narrow_batch::size;
    constexpr std::size_t narrow_stride = unroll * lanes;
    std::size_t i = 0;
    for (; i + narrow_stride <= n; i += narrow_stride) {
        const narrow_batch diff =
            ((load_narrow(a + i) ^ load_narrow(b + i)) |
             (load_narrow(a + i + lanes) ^ load_narrow(b + i + lanes))) |
            ((load_narrow(a + i + 2 * lanes) ^ load_narrow(b + i + 2 * lanes)) |
             (load_narrow(a + i + 3 * lanes) ^ load_narrow(b + i + 3 * lanes)));
        if (nonzero(diff)) break;
    }
    return i;
}
#else
[[nodiscard]] inline std::size_t narrow_equal_prefix(const std::uint8_t*, const std::uint8_t*,
                                                     std::size_t) noexcept {
    return 0;
}
#endif

/// Offset of the first differing byte in [0, len), or scalar::npos. len is a multiple of
/// byte_lanes.
[[nodiscard]] inline std::size_t first_in_registers(const std::uint8_t* a, const std::uint8_t* b,
                                                    std::size_t len) noexcept {
    for (std::size_t i = 0; i < len; i += byte_lanes) {
        const byte_mask differs = load(a + i) != load(b + i);
        if (any(differs)) return i + first_set(differs);
    }
    return scalar::npos;
}

/// Offset of the last differing byte in [0, len), or scalar::npos. len is a multiple of
/// byte_lanes.
[[nodiscard]] inline std::size_t last_in_registers(const std::uint8_t* a, const std::uint8_t* b,
                                                   std::size_t len) noexcept {
    for (std::size_t i = len; i > 0;) {
        i -= byte_lanes;
        const byte_mask differs = load(a + i) != load(b + i);
        if (any(differs)) return i + last_set(differs);
    }
    return scalar::npos;
}

/// True when [0, n) of both ranges hold the same bytes.
[[nodiscard]] inline bool equal(const std::uint8_t* a, const std::uint8_t* b,
                                std::size_t n) noexcept {
    if (uses_narrow(n)) {
        // The rest starts at the differing stride, if any, which the code below finds again.
        const std::size_t skipped = narrow_equal_prefix(a, b, n);
        a += skipped;
        b += skipped;
        n -= skipped;
    }
    if (n < byte_lanes) return std::memcmp(a, b, n) == 0;
    std::size_t i = 0;
    for (; i + stride <= n; i += stride) {
        if (stride_differs(a + i, b + i)) return false;
    }
    for (; i + byte_lanes <= n; i += byte_lanes) {
        if (any(load(a + i) != load(b + i))) return false;
    }
    if (i < n) {
        // The last register overlaps bytes already known to be equal, which is harmless.
        const std::size_t last = n - byte_lanes;
        if (any(load(a + last) != load(b + last))) return false;
    }
    return true;
}

/// Offset of the first differing byte in [0, n), or scalar::npos; full-width registers only.
[[nodiscard]] inline std::size_t first_mismatch_wide(const std::uint8_t* a, const std::uint8_t* b,
                                                     std::size_t n) noexcept {
    if (n < byte_lanes) return scalar::first_mismatch(a, b, n);
    std::size_t i = 0;
    for (; i + stride <= n; i += stride) {
        if (stride_differs(a + i, b + i)) return i + first_in_registers(a + i, b + i, stride);
    }
    for (; i + byte_lanes <= n; i += byte_lanes) {
        const byte_mask differs = load(a + i) != load(b + i);
        if (any(differs)) return i + first_set(differs);
    }
    if (i < n) {
        // Bytes before i are known equal, so the first set lane of the overlapping last
        // register is the first mismatch.
        const std::size_t last = n - byte_lanes;
        const byte_mask differs = load(a + last) != load(b + last);
        if (any(differs)) return last + first_set(differs);
    }
    return scalar::npos;
}

/// Offset of the first differing byte in [0, n), or scalar::npos.
[[nodiscard]] inline std::size_t first_mismatch(const std::uint8_t* a, const std::uint8_t* b,
                                                std::size_t n) noexcept {
    if (!uses_narrow(n)) return first_mismatch_wide(a, b, n);
    // Bytes before `skipped` are equal; the first mismatch, if any, is in the rest.
    const std::size_t skipped = narrow_equal_prefix(a, b, n);
    const std::size_t rest = first_mismatch_wide(a + skipped, b + skipped, n - skipped);
    return rest == scalar::npos ? rest : skipped + rest;
}

/// Number of equal bytes in [0, len). len is a multiple of byte_lanes and at most
/// block_registers * byte_lanes.
[[nodiscard]] inline std::size_t count_equal_in_block(const std::uint8_t* a, const std::uint8_t* b,
                                                      std::size_t len) noexcept {
    // Each lane counts the equal bytes it has seen. lanes_of() is 0xFF (= -1) for an equal
    // byte, so subtracting adds one. Two counters halve the carried dependency chain (compilers
    // reassociate a single sum into four serial subtractions); together they still see at most
    // one increment per register, so their sum fits a byte.
    byte_batch counters_even(std::uint8_t{0});
    byte_batch counters_odd(std::uint8_t{0});
    std::size_t i = 0;
    for (; i + stride <= len; i += stride) {
        counters_even = counters_even -
                        (lanes_of(load(a + i) == load(b + i)) +
                         lanes_of(load(a + i + 2 * byte_lanes) == load(b + i + 2 * byte_lanes)));
        counters_odd =
            counters_odd - (lanes_of(load(a + i + byte_lanes) == load(b + i + byte_lanes)) +
                            lanes_of(load(a + i + 3 * byte_lanes) == load(b + i + 3 * byte_lanes)));
    }
    for (; i < len; i += byte_lanes) {
        counters_even = counters_even - lanes_of(load(a + i) == load(b + i));
    }
    const byte_batch counters = counters_even + counters_odd;
    return static_cast<std::size_t>(sum_bytes(counters));
}

/// Counts the differing bytes in [0, n) and finds the first and last of them; full-width
/// registers only.
[[nodiscard]] inline scalar::mismatches count_mismatches_wide(const std::uint8_t* a,
                                                              const std::uint8_t* b,
                                                              std::size_t n) noexcept {
    scalar::mismatches result;
    const std::size_t body = n - n % byte_lanes;
    std::size_t last_block = scalar::npos;  // the last block with a mismatch, to locate `last`
    std::size_t last_block_size = 0;
    for (std::size_t i = 0; i < body;) {
        const std::size_t size = std::min(body - i, block_registers * byte_lanes);
        const std::size_t differing = size - count_equal_in_block(a + i, b + i, size);
        if (differing != 0) {
            // Locating rescans at most one block at each end; equal data never pays for it.
            if (result.count_ == 0) result.first_ = i + first_in_registers(a + i, b + i, size);
            result.count_ += differing;
            last_block = i;
            last_block_size = size;
        }
        i += size;
    }
    const scalar::mismatches tail = scalar::count_mismatches(a + body, b + body, n - body);
    if (tail.count_ != 0) {
        if (result.count_ == 0) result.first_ = body + tail.first_;
        result.count_ += tail.count_;
        result.last_ = body + tail.last_;
    } else if (last_block != scalar::npos) {
        result.last_ =
            last_block + last_in_registers(a + last_block, b + last_block, last_block_size);
    }
    return result;
}

/// Counts the differing bytes in [0, n) and finds the first and last of them.
[[nodiscard]] inline scalar::mismatches count_mismatches(const std::uint8_t* a,
                                                         const std::uint8_t* b,
                                                         std::size_t n) noexcept {
    if (!uses_narrow(n)) return count_mismatches_wide(a, b, n);
    // Equal data, the common case, is all prefix; the rest is counted from its first mismatch.
    const std::size_t skipped = narrow_equal_prefix(a, b, n);
    scalar::mismatches rest = count_mismatches_wide(a + skipped, b + skipped, n - skipped);
    if (rest.count_ != 0) {
        rest.first_ += skipped;
        rest.last_ += skipped;
    }
    return rest;
}

}  // namespace simd
}  // namespace detail
NVMEIO_END_NAMESPACE

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

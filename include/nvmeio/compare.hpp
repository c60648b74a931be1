#pragma once
/// \file compare.hpp
/// Byte-wise comparison of two memory ranges, of any alignment and length, for checking that
/// what was read matches what was written (how: docs/compare.md). xsimd registers of the
/// translation unit's -march where <xsimd/xsimd.hpp> is found and NVMEIO_NO_XSIMD is not
/// defined; otherwise a scalar comparator with the same results.
///
/// Thread-safety: all functions only read their arguments; call them from any thread.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(NVMEIO_NO_XSIMD) && __has_include(<xsimd/xsimd.hpp>)
#define NVMEIO_DETAIL_COMPARE_USES_XSIMD 1
#include <nvmeio/detail/compare_simd.hpp>
#else
#define NVMEIO_DETAIL_COMPARE_USES_XSIMD 0
#define NVMEIO_DETAIL_SIMD_TAG simd_none
#include <nvmeio/detail/compare_scalar.hpp>

#include "nvmeio/version.hpp"
#endif

NVMEIO_BEGIN_NAMESPACE

/// The value first_mismatch() returns, and mismatch_summary holds, when there is no mismatch.
inline constexpr std::size_t no_mismatch = static_cast<std::size_t>(-1);

/// What count_mismatches() found.
struct mismatch_summary {
    std::size_t count;  ///< number of differing bytes
    std::size_t first;  ///< offset of the first differing byte, or no_mismatch when count == 0
    std::size_t last;   ///< offset of the last differing byte, or no_mismatch when count == 0

    /// True when the ranges held the same bytes.
    [[nodiscard]] bool equal() const noexcept { return count == 0; }
};

namespace detail {

// glibc's memcmp uses the widest registers the CPU has; a translation unit built for baseline
// x86-64 cannot, and is slower on cache-resident data. There memcmp finds the equal stretches and
// our kernels look only inside the chunks that differ (docs/compare.md).
inline constexpr std::size_t memcmp_chunk = 16 * 1024;
#if NVMEIO_DETAIL_COMPARE_USES_XSIMD
namespace kernels = simd;
inline constexpr bool prefer_memcmp = simd::byte_lanes < 32;
#else
namespace kernels = scalar;
inline constexpr bool prefer_memcmp = true;
#endif

// Past the caches memcmp streams memory best, even against 64-byte registers: from this size on
// every build lets it find the equal stretches.
inline constexpr std::size_t memory_bound = std::size_t{4} << 20;

// Whether memcmp leads a comparison of `n` bytes (equal() is then memcmp; the other two let it
// find the equal chunks). Also up to one chunk in every build, where the kernels' set-up costs
// more than glibc's memcmp.
constexpr bool memcmp_leads(std::size_t n) noexcept {
    return prefer_memcmp || n <= memcmp_chunk || n >= memory_bound;
}

}  // namespace detail

// The entry points live in an inline namespace named for their instruction set (why: the tag's
// comment in detail/simd.hpp); callers just say nvmeio::.
inline namespace NVMEIO_DETAIL_SIMD_TAG {

/// True when this translation unit compares with xsimd registers, false on the scalar path.
inline constexpr bool simd_enabled = NVMEIO_DETAIL_COMPARE_USES_XSIMD != 0;

/// True when the `n` bytes at `a` and at `b` are identical; like `memcmp(a, b, n) == 0`.
/// Stops at the first difference. Any alignment; `n == 0` is true (pointers may then be
/// null); otherwise both ranges must be readable for `n` bytes. The ranges may overlap.
[[nodiscard]] inline bool equal(const void* a, const void* b, std::size_t n) noexcept {
    if (n == 0) return true;
#if NVMEIO_DETAIL_COMPARE_USES_XSIMD
    if (!detail::memcmp_leads(n)) {
        return detail::simd::equal(static_cast<const std::uint8_t*>(a),
                                   static_cast<const std::uint8_t*>(b), n);
    }
#endif
    return std::memcmp(a, b, n) == 0;
}

/// Offset of the first byte that differs between the `n` bytes at `a` and at `b`, or
/// no_mismatch when they are identical. Stops at the first difference. Same preconditions as
/// equal().
[[nodiscard]] inline std::size_t first_mismatch(const void* a, const void* b,
                                                std::size_t n) noexcept {
    if (n == 0) return no_mismatch;
    const auto* pa = static_cast<const std::uint8_t*>(a);
    const auto* pb = static_cast<const std::uint8_t*>(b);
    if (!detail::memcmp_leads(n)) return detail::kernels::first_mismatch(pa, pb, n);
    for (std::size_t at = 0; at < n; at += detail::memcmp_chunk) {
        const std::size_t k = n - at < detail::memcmp_chunk ? n - at : detail::memcmp_chunk;
        if (std::memcmp(pa + at, pb + at, k) != 0) {
            return at + detail::kernels::first_mismatch(pa + at, pb + at, k);
        }
    }
    return no_mismatch;
}

/// Number of differing bytes between the `n` bytes at `a` and at `b`, with the offsets of the
/// first and last of them. Always reads all `n` bytes (no early exit); when some differ it
/// re-reads at most a few KiB at each end to locate first/last. Same preconditions as equal().
[[nodiscard]] inline mismatch_summary count_mismatches(const void* a, const void* b,
                                                       std::size_t n) noexcept {
    static_assert(detail::scalar::npos == no_mismatch);
    const auto kernel = [](const std::uint8_t* x, const std::uint8_t* y, std::size_t k) {
        const auto found = detail::kernels::count_mismatches(x, y, k);
        return mismatch_summary{found.count_, found.first_, found.last_};
    };
    if (n == 0) return {0, no_mismatch, no_mismatch};
    const auto* pa = static_cast<const std::uint8_t*>(a);
    const auto* pb = static_cast<const std::uint8_t*>(b);
    if (!detail::memcmp_leads(n)) return kernel(pa, pb, n);
    mismatch_summary all{0, no_mismatch, no_mismatch};
    for (std::size_t at = 0; at < n; at += detail::memcmp_chunk) {
        const std::size_t k = n - at < detail::memcmp_chunk ? n - at : detail::memcmp_chunk;
        if (std::memcmp(pa + at, pb + at, k) == 0) continue;
        const mismatch_summary part = kernel(pa + at, pb + at, k);
        if (all.count == 0) all.first = at + part.first;
        all.last = at + part.last;
        all.count += part.count;
    }
    return all;
}

}  // namespace NVMEIO_DETAIL_SIMD_TAG
NVMEIO_END_NAMESPACE

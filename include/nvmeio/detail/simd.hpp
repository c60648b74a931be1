#pragma once
/// \file detail/simd.hpp
/// The few xsimd names the comparator needs, spelled once for xsimd 8.x (Debian 12) and for
/// xsimd 9 and later (tested with 14.x). Everything else in nvmeio says `simd::`, never `xsimd::`.

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>

#include "nvmeio/version.hpp"

#if !defined(XSIMD_VERSION_MAJOR) || XSIMD_VERSION_MAJOR < 8
#error "nvmeio needs xsimd 8 or later; define NVMEIO_NO_XSIMD to use the scalar comparator"
#endif

// Tag for the inline namespace holding the comparator's entry points. Inline functions compiled
// for different targets (-march) in one program would otherwise share one mangled name and the
// linker could pick, say, an AVX-512 body for a caller built for SSE2. The tag follows the
// instruction-set tier that decides xsimd's default architecture.
#if XSIMD_WITH_AVX512BW
#define NVMEIO_DETAIL_SIMD_TAG simd_avx512bw
#elif XSIMD_WITH_AVX512F
#define NVMEIO_DETAIL_SIMD_TAG simd_avx512f
#elif XSIMD_WITH_FMA3_AVX2
#define NVMEIO_DETAIL_SIMD_TAG simd_fma3_avx2
#elif XSIMD_WITH_AVX2
#define NVMEIO_DETAIL_SIMD_TAG simd_avx2
#elif XSIMD_WITH_AVX
#define NVMEIO_DETAIL_SIMD_TAG simd_avx
#elif XSIMD_WITH_SSE4_2
#define NVMEIO_DETAIL_SIMD_TAG simd_sse4_2
#elif XSIMD_WITH_SSE4_1
#define NVMEIO_DETAIL_SIMD_TAG simd_sse4_1
#elif XSIMD_WITH_SSSE3
#define NVMEIO_DETAIL_SIMD_TAG simd_ssse3
#elif XSIMD_WITH_SSE3
#define NVMEIO_DETAIL_SIMD_TAG simd_sse3
#elif XSIMD_WITH_SSE2
#define NVMEIO_DETAIL_SIMD_TAG simd_sse2
#elif XSIMD_WITH_NEON64
#define NVMEIO_DETAIL_SIMD_TAG simd_neon64
#elif XSIMD_WITH_NEON
#define NVMEIO_DETAIL_SIMD_TAG simd_neon
#else
#define NVMEIO_DETAIL_SIMD_TAG simd_other
#endif

// GCC 12's AVX-512 intrinsics trip -Wuninitialized on their own `__Y = __Y` placeholders once
// inlined here (GCC PR 105593, fixed in 12.3/13); keep users' -Werror builds clean.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

NVMEIO_BEGIN_NAMESPACE
namespace detail {
namespace simd {

/// The architecture xsimd picks for this translation unit from its target flags.
using arch = xsimd::default_arch;
/// One register of unsigned bytes.
using byte_batch = xsimd::batch<std::uint8_t, arch>;
/// Per-lane predicate over a byte_batch.
using byte_mask = xsimd::batch_bool<std::uint8_t, arch>;
/// The same register seen as 64-bit words, for widening byte sums.
using word_batch = xsimd::batch<std::uint64_t, arch>;

/// Bytes per register.
inline constexpr std::size_t byte_lanes = byte_batch::size;

/// xsimd's name for the architecture in use, e.g. "sse2" or "avx512bw".
[[nodiscard]] inline const char* arch_name() noexcept {
    return arch::name();
}

/// Loads byte_lanes bytes from `p`; `p` needs no alignment.
[[nodiscard]] inline byte_batch load(const std::uint8_t* p) noexcept {
    return byte_batch::load_unaligned(p);
}

/// True when at least one lane of `m` is set.
[[nodiscard]] inline bool any(const byte_mask& m) noexcept {
    return xsimd::any(m);
}

/// True when any byte of `b` is non-zero. One test instruction where the ISA has one; going
/// through a byte mask costs a mask-to-register move per call on AVX-512.
[[nodiscard]] inline bool nonzero(const byte_batch& b) noexcept {
#if XSIMD_WITH_AVX512BW
    return _mm512_test_epi64_mask(b, b) != 0;
#elif XSIMD_WITH_AVX2
    return _mm256_testz_si256(b, b) == 0;
#elif XSIMD_WITH_SSE4_1
    return _mm_testz_si128(b, b) == 0;
#else
    return any(b != byte_batch(std::uint8_t{0}));
#endif
}

/// 0xFF in the lanes where `m` is set, 0 elsewhere (on x86 below AVX-512 this is the register
/// itself; the compiler folds the select away).
[[nodiscard]] inline byte_batch lanes_of(const byte_mask& m) noexcept {
#if XSIMD_VERSION_MAJOR < 9 && XSIMD_WITH_AVX512BW
    // xsimd 8's AVX-512BW select() for bytes does not compile with GCC; say it directly.
    return _mm512_movm_epi8(m.data);
#else
    return xsimd::select(m, byte_batch(std::uint8_t{0xFF}), byte_batch(std::uint8_t{0}));
#endif
}

/// Reinterprets the bytes of `b` as 64-bit words (no conversion).
[[nodiscard]] inline word_batch as_words(const byte_batch& b) noexcept {
#if XSIMD_VERSION_MAJOR >= 11
    return xsimd::bitwise_cast<std::uint64_t>(b);
#else
    return xsimd::bitwise_cast<word_batch>(b);
#endif
}

/// Sum of all words of `w`.
[[nodiscard]] inline std::uint64_t reduce_add(const word_batch& w) noexcept {
#if XSIMD_VERSION_MAJOR >= 9
    return xsimd::reduce_add(w);
#else
    return xsimd::hadd(w);
#endif
}

/// Sum of all byte lanes of `b`, widened so it cannot overflow.
[[nodiscard]] inline std::uint64_t sum_bytes(const byte_batch& b) noexcept {
    // Pairwise folds inside each 64-bit word: 8 x u8 -> 4 x u16 -> 2 x u32 -> 1 x u64.
    word_batch w = as_words(b);
    w = (w & word_batch(0x00FF00FF00FF00FFull)) + ((w >> 8) & word_batch(0x00FF00FF00FF00FFull));
    w = (w & word_batch(0x0000FFFF0000FFFFull)) + ((w >> 16) & word_batch(0x0000FFFF0000FFFFull));
    w = (w & word_batch(0x00000000FFFFFFFFull)) + (w >> 32);
    return reduce_add(w);
}

#if XSIMD_WITH_AVX512BW
/// 1 when the build has 32-byte registers beside its 64-byte ones (AVX-512 implies AVX2).
#define NVMEIO_DETAIL_SIMD_HAS_NARROW 1
/// Half-width registers, for data streamed from L2 where they are faster (see compare_simd.hpp).
using narrow_batch = xsimd::batch<std::uint8_t, xsimd::avx2>;

/// Loads narrow_batch::size bytes from `p`; `p` needs no alignment.
[[nodiscard]] inline narrow_batch load_narrow(const std::uint8_t* p) noexcept {
    return narrow_batch::load_unaligned(p);
}

/// True when any byte of `b` is non-zero (one vptest).
[[nodiscard]] inline bool nonzero(const narrow_batch& b) noexcept {
    return _mm256_testz_si256(b, b) == 0;
}
#else
#define NVMEIO_DETAIL_SIMD_HAS_NARROW 0
#endif

/// Index of the lowest set lane of `m`. Precondition: any(m).
[[nodiscard]] inline std::size_t first_set(const byte_mask& m) noexcept {
#if XSIMD_VERSION_MAJOR >= 9
    return static_cast<std::size_t>(__builtin_ctzll(m.mask()));
#else
    // xsimd 8 has no batch_bool::mask(); this runs once per located mismatch, so a store is fine.
    alignas(arch::alignment()) std::uint8_t lanes[byte_lanes];
    lanes_of(m).store_aligned(lanes);
    std::size_t i = 0;
    while (lanes[i] == 0)
        ++i;
    return i;
#endif
}

/// Index of the highest set lane of `m`. Precondition: any(m).
[[nodiscard]] inline std::size_t last_set(const byte_mask& m) noexcept {
#if XSIMD_VERSION_MAJOR >= 9
    return static_cast<std::size_t>(63 - __builtin_clzll(m.mask()));
#else
    alignas(arch::alignment()) std::uint8_t lanes[byte_lanes];
    lanes_of(m).store_aligned(lanes);
    std::size_t i = byte_lanes - 1;
    while (lanes[i] == 0)
        --i;
    return i;
#endif
}

}  // namespace simd
}  // namespace detail
NVMEIO_END_NAMESPACE

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

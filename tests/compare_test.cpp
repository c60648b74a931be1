#define BOOST_TEST_MODULE compare
#include <boost/test/unit_test.hpp>

#include <nvmeio/compare.hpp>

#include "compare_cases.hpp"

// The shared cases run here on the xsimd path for this build's default architecture.

BOOST_AUTO_TEST_CASE(simd_path_is_enabled_when_xsimd_is_available) {
#if __has_include(<xsimd/xsimd.hpp>) && !defined(NVMEIO_NO_XSIMD)
    BOOST_TEST(nvmeio::simd_enabled);
#else
    BOOST_TEST(!nvmeio::simd_enabled);
#endif
}

#ifdef NVMEIO_TEST_WIDE_REGISTERS
// Built with -mavx2 or AVX-512: the SIMD kernels themselves run every case longer than one
// memcmp chunk (shorter ones, memcmp first, then the kernels inside the ones that differ).
BOOST_AUTO_TEST_CASE(wide_registers_use_the_simd_kernels_directly) {
    BOOST_TEST(!nvmeio::detail::prefer_memcmp);
    BOOST_TEST(nvmeio::detail::memcmp_leads(nvmeio::detail::memcmp_chunk));
    BOOST_TEST(!nvmeio::detail::memcmp_leads(nvmeio::detail::memcmp_chunk + 1));
    BOOST_TEST(!nvmeio::detail::memcmp_leads(nvmeio::detail::memory_bound - 1));
}

// With 64-byte registers, mid-sized lengths skip their equal prefix with 32-byte ones first.
BOOST_AUTO_TEST_CASE(avx512_builds_use_half_width_registers_for_mid_sized_lengths) {
    namespace simd = nvmeio::detail::simd;
    const bool avx512 = simd::byte_lanes == 64;
    BOOST_TEST(simd::uses_narrow(std::size_t{64} << 10) == avx512);
    BOOST_TEST(!simd::uses_narrow(std::size_t{16} << 10));
    BOOST_TEST(!simd::uses_narrow(std::size_t{1} << 20));
}
#else
// Baseline builds (16-byte registers) let memcmp find equal stretches first.
BOOST_AUTO_TEST_CASE(narrow_registers_let_memcmp_skip_equal_chunks) {
    BOOST_TEST(nvmeio::detail::prefer_memcmp ==
               (!nvmeio::simd_enabled || nvmeio::detail::simd::byte_lanes < 32));
}
#endif

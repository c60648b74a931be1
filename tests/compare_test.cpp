#define BOOST_TEST_MODULE compare
#include <boost/test/unit_test.hpp>

#include <nvmeio/compare.hpp>

#include "compare_cases.hpp"

// The shared cases run here on the xsimd path for this build's default architecture.

BOOST_AUTO_TEST_CASE(simd_path_is_enabled_when_xsimd_is_available) {
#if __has_include(<xsimd/xsimd.hpp>)
    BOOST_TEST(nvmeio::simd_enabled);
#else
    BOOST_TEST(!nvmeio::simd_enabled);
#endif
}

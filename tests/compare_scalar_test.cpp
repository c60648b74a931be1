#define BOOST_TEST_MODULE compare_scalar
#include <boost/test/unit_test.hpp>

// The same cases as compare_test.cpp, compiled without xsimd.
#ifndef NVMEIO_NO_XSIMD
#define NVMEIO_NO_XSIMD
#endif
#include <nvmeio/compare.hpp>

#include "compare_cases.hpp"

BOOST_AUTO_TEST_CASE(no_xsimd_selects_the_scalar_path) {
    static_assert(!nvmeio::simd_enabled);
    BOOST_TEST(!nvmeio::simd_enabled);
}

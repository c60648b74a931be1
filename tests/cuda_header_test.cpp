// cuda_driver's table against CUDA's own header: each entry's function type must be the
// prototype cuda.h declares for the symbol cuda_driver::open() loads into it (the same
// NVMEIO_CUDA_DRIVER_ENTRIES list), up to the names the table gives CUDA's types: CUresult is
// an int-sized enum, CUcontext, CUstream and CUevent are pointers to structs, CUdevice an int
// and CUdeviceptr an unsigned long long. A mismatch does not compile. Where no cuda.h was found
// (a CUDA toolkit, or the CUDA wheels from PyPI beside torch), the test says so and skips.

#define BOOST_TEST_MODULE cuda_header
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <type_traits>

#include "nvmeio/cuda.hpp"
#include "tests/skip.hpp"

#ifdef NVMEIO_TEST_CUDA_HEADER
#include <cuda.h>

namespace {

// An argument or result of the table's type `Ours` passes as the header's `Theirs`.
template <class Ours, class Theirs>
constexpr bool same_abi() {
    if constexpr (std::is_same_v<Ours, Theirs>) {
        return true;
    } else if constexpr (std::is_enum_v<Theirs>) {  // CUresult
        return std::is_same_v<Ours, int> && sizeof(Theirs) == sizeof(int);
    } else if constexpr (std::is_pointer_v<Ours> && std::is_pointer_v<Theirs>) {
        using ours = std::remove_pointer_t<Ours>;
        using theirs = std::remove_pointer_t<Theirs>;
        if constexpr (std::is_void_v<ours>) {  // a handle: a pointer to an opaque struct
            return std::is_class_v<theirs>;
        } else if constexpr (std::is_class_v<theirs>) {
            return false;
        } else {
            return std::is_const_v<ours> == std::is_const_v<theirs> &&
                   same_abi<std::remove_cv_t<ours>, std::remove_cv_t<theirs>>();
        }
    } else {
        return false;
    }
}

template <class Ours, class Theirs>
struct matches : std::false_type {};
template <class R, class... A, class S, class... B>
struct matches<R (*)(A...), S (*)(B...)>
    : std::bool_constant<sizeof...(A) == sizeof...(B) && same_abi<R, S>() &&
                         (same_abi<A, B>() && ...)> {};

#define NVMEIO_CHECK_ENTRY(member, symbol)                                                    \
    static_assert(matches<decltype(nvmeio::cuda_driver::member), decltype(&::symbol)>::value, \
                  "cuda_driver::" #member " is not cuda.h's " #symbol);
NVMEIO_CUDA_DRIVER_ENTRIES(NVMEIO_CHECK_ENTRY)
#undef NVMEIO_CHECK_ENTRY

#define NVMEIO_COUNT_ENTRY(member, symbol) +1
constexpr int entries = 0 NVMEIO_CUDA_DRIVER_ENTRIES(NVMEIO_COUNT_ENTRY);
#undef NVMEIO_COUNT_ENTRY

}  // namespace

BOOST_AUTO_TEST_CASE(every_entry_has_the_type_of_its_symbol_in_cuda_h) {
    // The static_asserts above are the test; this says what they covered.
    BOOST_TEST_MESSAGE(entries << " entries checked against cuda.h of CUDA " << CUDA_VERSION);
    BOOST_TEST(entries == 23);
}

#else

BOOST_AUTO_TEST_CASE(every_entry_has_the_type_of_its_symbol_in_cuda_h) {
    nvmeio_test::skip(
        "no cuda.h was found (a CUDA toolkit, or the CUDA wheels torch brings from PyPI): "
        "cuda_driver's table is not checked against CUDA's prototypes");
}

#endif

#pragma once
// The backends the typed tests run over, and the check that io_uring really ran (or was skipped).

#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/backend/libaio.hpp>
#include <string>
#include <system_error>

#include "skip.hpp"

namespace nvmeio_test {

#if NVMEIO_HAS_IO_URING
using backend_types = boost::mpl::list<nvmeio::libaio_backend, nvmeio::io_uring_backend>;
#else
using backend_types = boost::mpl::list<nvmeio::libaio_backend>;
#endif

// True when tests over `Backend` can run here. A kernel refusing io_uring fails the test, unless
// NVMEIO_TEST_ALLOW_NO_IO_URING=1 says that is expected; then, as when NVMEIO_TEST_SKIP_IO_URING
// names a reason, the test's io_uring part is skipped (skip.hpp: the program exits 77).
template <class Backend>
bool backend_usable() {
#if NVMEIO_HAS_IO_URING
    if constexpr (std::is_same_v<Backend, nvmeio::io_uring_backend>) {
        // Set by scripts/sanitize.sh for valgrind, which cannot see io_uring's writes to memory.
        if (const char* skip = std::getenv("NVMEIO_TEST_SKIP_IO_URING"); skip != nullptr && *skip) {
            nvmeio_test::skip(std::string("io_uring backend not tested: ") + skip);
            return false;
        }
        std::error_code why;
        if (nvmeio::io_uring_supported(why)) return true;
        const std::string text = "io_uring is REFUSED by this kernel (" + why.message() +
                                 "): the io_uring backend was NOT tested";
        const char* allow = std::getenv("NVMEIO_TEST_ALLOW_NO_IO_URING");
        if (allow != nullptr && std::string(allow) == "1") {
            nvmeio_test::skip(text + " (allowed by NVMEIO_TEST_ALLOW_NO_IO_URING=1)");
        } else {
            BOOST_ERROR(text + "; set NVMEIO_TEST_ALLOW_NO_IO_URING=1 where that is expected");
        }
        return false;
    }
#endif
    return true;
}

// Calls f(Backend{}-typed tag) for every backend in this build.
template <class T>
struct type_tag {
    using type = T;
};
template <class F>
void for_each_backend(F&& f) {
    f(type_tag<nvmeio::libaio_backend>{});
#if NVMEIO_HAS_IO_URING
    f(type_tag<nvmeio::io_uring_backend>{});
#endif
}

}  // namespace nvmeio_test

#define BOOST_TEST_MODULE version
#include <boost/test/unit_test.hpp>

#include <nvmeio/version.hpp>
#include <string>

BOOST_AUTO_TEST_CASE(cmake_reads_the_version_from_the_header) {
    const std::string from_header = std::to_string(NVMEIO_VERSION_MAJOR) + "." +
                                    std::to_string(NVMEIO_VERSION_MINOR) + "." +
                                    std::to_string(NVMEIO_VERSION_PATCH);
    BOOST_TEST(from_header == NVMEIO_CMAKE_VERSION);
    BOOST_TEST(NVMEIO_VERSION ==
               NVMEIO_VERSION_MAJOR * 10000 + NVMEIO_VERSION_MINOR * 100 + NVMEIO_VERSION_PATCH);
}

#include <nvmeio/nvmeio.hpp>

#include <type_traits>
#include <typeinfo>

// Every name lives in an inline namespace named for the major version, so that two versions in
// one process (each in its own shared object) share no state, not even a function's static.
BOOST_AUTO_TEST_CASE(names_live_in_an_inline_namespace_of_the_major_version) {
    static_assert(std::is_same_v<nvmeio::file, nvmeio::v0::file>);
    static_assert(std::is_same_v<nvmeio::aligned_buffer, nvmeio::v0::aligned_buffer>);
    const std::string mangled = typeid(nvmeio::aligned_buffer).name();
    const std::string versioned = "6nvmeio2v" + std::to_string(NVMEIO_VERSION_MAJOR);
    BOOST_TEST(mangled.find(versioned) != std::string::npos, mangled);
}

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

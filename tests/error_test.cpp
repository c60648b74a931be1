#define BOOST_TEST_MODULE error
#include <boost/test/unit_test.hpp>

#include <nvmeio/error.hpp>

using namespace nvmeio;

BOOST_AUTO_TEST_CASE(io_error_message_names_operation_file_offset_length_and_reason) {
    const io_error e(
        {std::error_code(EIO, std::generic_category()), "read", "/data/x.bin", 8192, 4096});
    const std::string what = e.what();
    BOOST_TEST(
        what.find("read of 4096 bytes at offset 8192 in '/data/x.bin' failed") != std::string::npos,
        what);
    BOOST_TEST(what.find(std::generic_category().message(EIO)) != std::string::npos, what);
    BOOST_TEST(e.code().value() == EIO);
    BOOST_TEST(e.offset() == 8192u);
    BOOST_TEST(e.length() == 4096u);
    BOOST_TEST(e.path() == "/data/x.bin");
    BOOST_TEST(e.operation() == "read");
    const std::system_error& base = e;  // catchable as the standard type
    BOOST_TEST((base.code() == std::errc::io_error));
}

BOOST_AUTO_TEST_CASE(throw_if_throws_only_for_a_failure) {
    BOOST_CHECK_NO_THROW(detail::throw_if({}));
    BOOST_CHECK_THROW(
        detail::throw_if({std::error_code(ENOSPC, std::generic_category()), "write", "f", 0, 1}),
        io_error);
}

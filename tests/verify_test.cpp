#define BOOST_TEST_MODULE verify
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <nvmeio/verify.hpp>

#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::temp_path;

BOOST_AUTO_TEST_CASE(equal_buffer_verifies_in_chunks_smaller_than_the_range) {
    temp_path path("verify_equal");
    const auto bytes = nvmeio_test::pattern(1'000'003, 1);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    for (std::size_t chunk :
         {std::size_t{1}, std::size_t{4096}, std::size_t{65'537}, default_verify_chunk}) {
        const std::size_t n = chunk == 1 ? 10'000 : bytes.size();  // chunk 1 is slow: a prefix
        const verify_result r = verify_read(path.str(), nvmeio::memory(bytes).first(n), 0, {chunk});
        BOOST_TEST(r.equal());
        BOOST_TEST(r.file_bytes == n);
        BOOST_TEST(r.mismatches.count == 0u);
    }
}

BOOST_AUTO_TEST_CASE(mismatches_are_counted_with_first_and_last_across_chunks) {
    temp_path path("verify_diff");
    const auto bytes = nvmeio_test::pattern(300'000, 2);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    auto memory = bytes;
    const std::size_t offset = 4096;
    for (std::size_t at : {std::size_t{5}, std::size_t{70'000}, std::size_t{70'001},
                           std::size_t{295'000 - offset}}) {
        memory[offset + at] ^= 0x5A;
    }
    const verify_result r = verify_read(
        path.str(), nvmeio::memory(memory).slice(offset, bytes.size() - offset), offset, {65'536});
    BOOST_TEST(!r.equal());
    BOOST_TEST(r.mismatches.count == 4u);
    BOOST_TEST(r.mismatches.first == 5u);
    BOOST_TEST(r.mismatches.last == 295'000u - offset);
}

BOOST_AUTO_TEST_CASE(range_past_end_of_file_is_not_equal_and_says_how_much_exists) {
    temp_path path("verify_short");
    const auto bytes = nvmeio_test::pattern(10'000, 3);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    std::vector<unsigned char> memory(12'000);
    std::memcpy(memory.data(), bytes.data(), bytes.size());
    const verify_result r = verify_read(path.str(), memory, 0, {4096});
    BOOST_TEST(!r.equal());
    BOOST_TEST(r.file_bytes == 10'000u);
    BOOST_TEST(r.mismatches.count == 0u);  // what exists matches
}

BOOST_AUTO_TEST_CASE(missing_file_is_an_io_error_naming_it) {
    const std::string path = nvmeio_test::scratch_dir() + "/no-such-file-to-verify";
    char byte = 0;
    try {
        (void)verify_read(path, nvmeio::memory(&byte, 1), 0);
        BOOST_FAIL("no error for a missing file");
    } catch (const io_error& e) {
        BOOST_TEST(std::string(e.what()).find(path) != std::string::npos);
    }
    std::error_code ec;
    (void)verify_read(path, nvmeio::memory(&byte, 1), 0, ec);
    BOOST_TEST((ec == std::errc::no_such_file_or_directory));
}

BOOST_AUTO_TEST_CASE(zero_chunk_is_rejected) {
    char byte = 0;
    BOOST_CHECK_THROW((void)verify_read("x", nvmeio::memory(&byte, 1), 0, verify_options{0}),
                      std::invalid_argument);
}

// The old form, a length before the offset, would read the length as the offset and the offset
// as the chunk size: it does not compile.
template <class, class = void>
struct can_verify : std::false_type {};
template <class... A>
struct can_verify<void(A...), std::void_t<decltype(verify_read(std::declval<A>()...))>>
    : std::true_type {};
static_assert(can_verify<void(const std::string&, const std::vector<char>&, std::uint64_t)>::value);
static_assert(!can_verify<void(const std::string&, const std::vector<char>&, std::size_t,
                               std::uint64_t)>::value);
static_assert(
    !can_verify<void(const std::string&, const void*, std::size_t, std::uint64_t)>::value);

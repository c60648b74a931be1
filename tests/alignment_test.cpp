#define BOOST_TEST_MODULE alignment
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <nvmeio/alignment.hpp>
#include <string>

#include "test_support.hpp"

using namespace nvmeio;

BOOST_AUTO_TEST_CASE(align_up_and_down_round_to_any_alignment) {
    static_assert(align_up(0, 512) == 0);
    static_assert(align_up(1, 512) == 512);
    static_assert(align_up(512, 512) == 512);
    static_assert(align_up(513, 512) == 1024);
    static_assert(align_down(1023, 512) == 512);
    static_assert(align_up(7, 3) == 9);  // not only powers of two
    static_assert(align_down(8, 3) == 6);
    BOOST_TEST(align_up((std::uint64_t{1} << 40) + 1, 4096) == (std::uint64_t{1} << 40) + 4096);
}

// (value + alignment - 1) wrapped for the last values below 2^64, even when the result fits.
BOOST_AUTO_TEST_CASE(align_up_near_the_top_of_64_bits_is_exact_or_says_it_does_not_fit) {
    constexpr std::uint64_t max = UINT64_MAX;
    static_assert(align_up(max - 4095, 4096) == max - 4095);
    static_assert(align_up(max - 1, 3) == max);  // 2^64 - 1 is a multiple of 3
    static_assert(align_up(max, 5) == max);      // and of 5
    static_assert(align_up_fits(max - 4095, 4096));
    static_assert(align_up_fits(max - 1, 3));
    static_assert(!align_up_fits(max - 4094, 4096));
    static_assert(!align_up_fits(max, 4096));
    static_assert(!align_up_fits(max, 2));
    static_assert(align_up_fits(0, 4096) && align_up_fits(max, 1));
    for (std::uint64_t value = max - 10'000; value != 0; ++value) {
        for (const std::uint64_t alignment :
             {std::uint64_t{512}, std::uint64_t{4096}, std::uint64_t{3}}) {
            if (!align_up_fits(value, alignment)) continue;
            const std::uint64_t up = align_up(value, alignment);
            BOOST_TEST_REQUIRE((up >= value && up - value < alignment && up % alignment == 0));
        }
    }
}

BOOST_AUTO_TEST_CASE(is_aligned_checks_values_and_addresses) {
    static_assert(is_aligned(4096, 512));
    static_assert(!is_aligned(4097, 512));
    alignas(64) char bytes[128];
    BOOST_TEST(is_aligned(static_cast<const void*>(bytes), 64));
    BOOST_TEST(!is_aligned(static_cast<const void*>(bytes + 1), 2));
}

BOOST_AUTO_TEST_CASE(page_size_is_the_systems) {
    BOOST_TEST(page_size() == static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
}

BOOST_AUTO_TEST_CASE(dio_alignment_of_a_real_file_comes_from_the_kernel) {
    nvmeio_test::temp_path path("align");
    nvmeio_test::spew(path.str(), "x", 1);
    const int fd = ::open(path.str().c_str(), O_RDONLY | O_DIRECT);
    BOOST_TEST_REQUIRE(fd >= 0);
    const dio_alignment a = query_dio_alignment(fd);
    ::close(fd);
    BOOST_TEST_MESSAGE("alignment: memory " << a.memory << ", offset " << a.offset << " from "
                                            << a.source);
#ifdef STATX_DIOALIGN
    // Built against headers that know STATX_DIOALIGN and running on ext4 (Linux >= 6.1 has it).
    BOOST_TEST(std::string(a.source) != "default");
#endif
    BOOST_TEST((a.memory & (a.memory - 1)) == 0u);
    BOOST_TEST((a.offset & (a.offset - 1)) == 0u);
    BOOST_TEST(a.strictest() == std::max(a.memory, a.offset));
}

BOOST_AUTO_TEST_CASE(dio_alignment_of_a_bad_descriptor_is_the_safe_default) {
    const dio_alignment a = query_dio_alignment(-1);
    BOOST_TEST(a.memory == 4096u);
    BOOST_TEST(a.offset == 4096u);
    BOOST_TEST(std::string(a.source) == "default");
}

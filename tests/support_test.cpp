// The tool-support layer's dependency-free parts: checked number and size parsing, the one
// generated pattern, medians.
#define BOOST_TEST_MODULE support_test
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/parse.hpp"
#include "support/pattern.hpp"
#include "support/stats.hpp"

namespace support = nvmeio::support;

BOOST_AUTO_TEST_CASE(parse_size_reads_binary_suffixes) {
    BOOST_TEST(support::parse_size("0") == 0u);
    BOOST_TEST(support::parse_size("4096") == 4096u);
    BOOST_TEST(support::parse_size("128K") == 131072u);
    BOOST_TEST(support::parse_size("128k") == 131072u);
    BOOST_TEST(support::parse_size("8M") == 8388608u);
    BOOST_TEST(support::parse_size("1GiB") == 1073741824u);
    BOOST_TEST(support::parse_size("1Gi") == 1073741824u);
    BOOST_TEST(support::parse_size("2T") == std::uint64_t{2} << 40);
    BOOST_TEST(support::parse_size("512B") == 512u);
    BOOST_TEST(support::parse_size("18446744073709551615") == UINT64_MAX);
    BOOST_TEST(support::parse_size("16383P") == std::uint64_t{16383} << 50);
}

BOOST_AUTO_TEST_CASE(parse_size_rejects_signs_garbage_and_overflow_quoting_the_text) {
    for (const char* bad :
         {"", "-1", "+1", "1X", "K", " 1", "1 ", "1.5G", "0x10", "1e3", "1KK", "1Kx",
          "18446744073709551616", "16384P", "99999999999999999999999", "abc", "1iB"}) {
        try {
            (void)support::parse_size(bad);
            BOOST_ERROR("accepted '" << bad << "'");
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(
                std::string(e.what()).find("'" + std::string(bad) + "'") != std::string::npos,
                e.what());
        }
    }
}

BOOST_AUTO_TEST_CASE(format_size_is_the_exact_inverse_of_parse_size) {
    BOOST_TEST(support::format_size(131072) == "128K");
    BOOST_TEST(support::format_size(3 * 1048576) == "3M");
    BOOST_TEST(support::format_size(1000) == "1000");
    BOOST_TEST(support::format_size(0) == "0");
    for (std::uint64_t v : {std::uint64_t{1}, std::uint64_t{4096}, std::uint64_t{1} << 62,
                            UINT64_MAX, (std::uint64_t{1} << 40) + 1024}) {
        BOOST_TEST(support::parse_size(support::format_size(v)) == v);
    }
}

BOOST_AUTO_TEST_CASE(parse_unsigned_checks_the_maximum_without_wrapping) {
    BOOST_TEST(support::parse_unsigned("65536", 65536) == 65536u);
    BOOST_CHECK_THROW((void)support::parse_unsigned("65537", 65536), std::invalid_argument);
    BOOST_CHECK_THROW((void)support::parse_unsigned("4294967296", UINT32_MAX),
                      std::invalid_argument);
    BOOST_CHECK_THROW((void)support::parse_unsigned("-1"), std::invalid_argument);
    BOOST_CHECK_THROW((void)support::parse_unsigned(""), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(parse_unsigned_refuses_a_single_digit_above_a_maximum_below_nine) {
    BOOST_TEST(support::parse_unsigned("3", 3) == 3u);
    BOOST_CHECK_THROW((void)support::parse_unsigned("4", 3), std::invalid_argument);
    BOOST_CHECK_THROW((void)support::parse_unsigned("9", 8), std::invalid_argument);
    BOOST_CHECK_THROW((void)support::parse_unsigned("1", 0), std::invalid_argument);
    BOOST_TEST(support::parse_unsigned("0", 0) == 0u);
    BOOST_CHECK_THROW((void)support::parse_unsigned("04", 3), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(parse_seconds_accepts_finite_non_negative_numbers_only) {
    BOOST_TEST(support::parse_seconds("2.5") == 2.5);
    BOOST_TEST(support::parse_seconds("0") == 0.0);
    BOOST_TEST(support::parse_seconds("1e-3") == 1e-3);
    for (const char* bad : {"-1", "nan", "inf", "", "1s", "1e999", "2e9"})
        BOOST_CHECK_THROW((void)support::parse_seconds(bad), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(pattern_of_any_range_equals_the_same_range_of_the_whole) {
    const std::vector<unsigned char> whole = support::pattern(4096 + 77, 5);
    for (std::size_t offset : {0u, 1u, 7u, 8u, 13u, 4000u}) {
        for (std::size_t length : {0u, 1u, 5u, 8u, 9u, 64u, 96u}) {
            std::vector<unsigned char> part(length);
            support::fill_pattern(part.data(), length, offset, 5);
            BOOST_TEST(std::equal(part.begin(), part.end(), whole.begin() + offset),
                       "offset " << offset << " length " << length);
            BOOST_TEST(support::pattern_mismatches(part.data(), length, offset, 5).count == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(pattern_differs_between_seeds_and_between_blocks) {
    const std::vector<unsigned char> a = support::pattern(1 << 16, 1);
    BOOST_TEST(support::pattern_mismatches(a.data(), a.size(), 0, 2).count > a.size() / 2);
    // A 4 KiB block copied to another place does not match the pattern there.
    BOOST_TEST(!std::equal(a.begin(), a.begin() + 4096, a.begin() + 4096));
    BOOST_TEST(support::pattern_mismatches(a.data() + 4096, 4096, 0, 1).count > 4000u);
}

BOOST_AUTO_TEST_CASE(pattern_mismatches_reports_first_last_and_count) {
    std::vector<unsigned char> bytes = support::pattern((3 << 20) + 5, 9);
    bytes[17] ^= 1;
    bytes[(2 << 20) + 3] ^= 0x80;
    const nvmeio::mismatch_summary m =
        support::pattern_mismatches(bytes.data(), bytes.size(), 0, 9);
    BOOST_TEST(m.count == 2u);
    BOOST_TEST(m.first == 17u);
    BOOST_TEST(m.last == (2u << 20) + 3);
}

BOOST_AUTO_TEST_CASE(summarize_reports_median_extremes_and_spread) {
    const support::summary_stats s = support::summarize({3, 1, 2, 10});
    BOOST_TEST(s.median == 2.5);
    BOOST_TEST(s.min == 1);
    BOOST_TEST(s.max == 10);
    BOOST_TEST(s.spread() == 9 / 2.5);
    BOOST_TEST(support::median({5, 1, 3}) == 3);
    BOOST_TEST(support::summarize({}).count == 0u);
}

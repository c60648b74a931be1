#define BOOST_TEST_MODULE stripe
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <memory>
#include <nvmeio/stripe.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend_support.hpp"
#include "offset_fault_backend.hpp"
#include "test_support.hpp"

#include <unistd.h>

using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t unit = 64 * 1024;

struct scratch_files {
    std::vector<std::unique_ptr<temp_path>> paths;
    std::vector<std::string> names;
    explicit scratch_files(std::size_t count) {
        for (std::size_t i = 0; i < count; ++i) {
            paths.push_back(std::make_unique<temp_path>("stripe_" + std::to_string(i)));
            names.push_back(paths.back()->str());
        }
    }
};

parallel_options options_for(unsigned threads) {
    parallel_options o;
    o.threads = threads;
    o.context = {8, 16 * 1024};
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(locate_follows_the_stripe_layout) {
    scratch_files scratch(3);
    stripe_set set(scratch.names, open_mode::write, unit);
    BOOST_TEST(set.width() == 3u);
    BOOST_TEST(set.locate(0).file_index == 0u);
    BOOST_TEST(set.locate(unit).file_index == 1u);
    BOOST_TEST(set.locate(3 * unit + 5).file_index == 0u);
    BOOST_TEST(set.locate(3 * unit + 5).offset == unit + 5);
    BOOST_TEST(set.locate(7 * unit + 9).file_index == 1u);
    BOOST_TEST(set.locate(7 * unit + 9).offset == 2 * unit + 9);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(striped_round_trip_is_exact_and_lays_out_each_file, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    basic_parallel_context<TestType> context(options_for(3));
    for (std::size_t width : {1u, 2u, 3u, 4u}) {
        for (std::size_t size : {std::size_t{100}, unit, 5 * unit + 4096, 13 * unit + 777}) {
            BOOST_TEST_CONTEXT("width=" << width << " size=" << size) {
                scratch_files scratch(width);
                const auto expected = nvmeio_test::pattern(size, width * 100 + size);
                batch_options one_unit_ios;
                one_unit_ios.max_io_size = unit;
                for (const batch_options& options : {batch_options{}, one_unit_ios}) {
                    {
                        stripe_set out(scratch.names, open_mode::write, unit);
                        BOOST_TEST(write(context, out, expected, 0, options).bytes == size);
                    }
                    // Every file holds its stripe units, read with plain POSIX calls.
                    std::vector<std::vector<unsigned char>> files;
                    for (const std::string& name : scratch.names)
                        files.push_back(nvmeio_test::slurp(name));
                    std::size_t mismatches = 0;
                    for (std::size_t x = 0; x < size; ++x) {
                        const std::size_t stripe = x / unit;
                        const auto& f = files[stripe % width];
                        const std::size_t at = stripe / width * unit + x % unit;
                        mismatches += at >= f.size() || f[at] != expected[x];
                    }
                    BOOST_TEST(mismatches == 0u);
                    stripe_set in(scratch.names, open_mode::read, unit);
                    std::vector<unsigned char> target(size + 1, 0xAB);
                    BOOST_TEST(
                        read(context, in, nvmeio::memory(target).first(size), 0, options).bytes ==
                        size);
                    BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0);
                    BOOST_TEST(target[size] == 0xAB);
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(striped_read_past_the_end_stops_at_the_first_missing_byte) {
    parallel_context context(options_for(2));
    scratch_files scratch(3);
    const std::size_t size = 7 * unit + 300;
    const auto expected = nvmeio_test::pattern(size, 21);
    {
        stripe_set out(scratch.names, open_mode::write, unit);
        (void)write(context, out, expected, 0);
    }
    stripe_set in(scratch.names, open_mode::read, unit);
    std::vector<unsigned char> target(12 * unit);
    BOOST_TEST(read(context, in, target, 0).bytes == size);
    BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0);
    // From an offset inside the data.
    BOOST_TEST(read(context, in, target, 2 * unit).bytes == size - 2 * unit);
}

BOOST_AUTO_TEST_CASE(failure_names_the_file_and_its_offset) {
    basic_parallel_context<nvmeio_test::offset_fault_backend> context(options_for(3));
    scratch_files scratch(2);
    const std::size_t size = 8 * unit;
    {
        stripe_set out(scratch.names, open_mode::write, unit);
        const auto bytes = nvmeio_test::pattern(size, 3);
        (void)write(context, out, bytes, 0);
    }
    stripe_set in(scratch.names, open_mode::read, unit);
    std::vector<unsigned char> target(size);
    // File offset 2 units + 1 exists in both files: logical units 4 and 5 sit there; the
    // first in logical order is unit 4, in file 0.
    nvmeio_test::offset_fault_backend::fail_offset = 2 * unit + 1;
    try {
        (void)read(context, in, target, 0);
        BOOST_ERROR("the injected failure was not thrown");
    } catch (const io_error& e) {
        BOOST_TEST(e.code() == std::error_code(EIO, std::generic_category()));
        BOOST_TEST(e.path() == scratch.names[0]);
        BOOST_TEST(e.offset() == 2 * unit);
    }
    // The std::error_code forms report the same failure instead of throwing it.
    std::error_code ec;
    const transfer_result r = read(context, in, target, 0, {}, ec);
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    BOOST_TEST(r.bytes == 0u);
    stripe_set again(scratch.names, open_mode::read_write, unit);
    nvmeio_test::offset_fault_backend::fail_offset = 3 * unit;  // logical unit 6, file 0
    (void)write(context, again, target, 0, {}, ec);
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    (void)write(context, again, target, 0, {}, ec);
    BOOST_TEST(!ec);
}

BOOST_AUTO_TEST_CASE(bad_stripe_settings_are_rejected) {
    scratch_files scratch(2);
    BOOST_CHECK_THROW(stripe_set(scratch.names, open_mode::write, 0), std::invalid_argument);
    BOOST_CHECK_THROW(stripe_set(scratch.names, open_mode::write, 1000), std::invalid_argument);
    BOOST_CHECK_THROW(stripe_set(std::vector<file>{}, unit), std::invalid_argument);
    stripe_set set(scratch.names, open_mode::write, unit);
    parallel_context context(options_for(2));
    std::vector<unsigned char> buffer(unit);
    BOOST_CHECK_THROW((void)write(context, set, buffer, 100), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(aligned_buffers_round_trip_on_the_zero_copy_path) {
    parallel_context context(options_for(3));
    scratch_files scratch(3);
    const std::size_t size = 9 * unit + 4096 + 5;
    const auto expected = nvmeio_test::pattern(size, 77);
    aligned_buffer source(size);
    std::memcpy(source.data(), expected.data(), size);
    {
        stripe_set out(scratch.names, open_mode::write, unit);
        BOOST_TEST(write(context, out, source, 0).bytes == size);
    }
    for (std::size_t d = 0; d < 3; ++d) {
        const auto bytes = nvmeio_test::slurp(scratch.names[d]);
        std::size_t mismatches = 0;
        for (std::size_t at = 0; at < bytes.size(); ++at) {
            const std::size_t logical = (at / unit * 3 + d) * unit + at % unit;
            mismatches += logical >= size || bytes[at] != expected[logical];
        }
        BOOST_TEST(mismatches == 0u, "file " << d);
    }
    aligned_buffer target(size);
    stripe_set in(scratch.names, open_mode::read, unit);
    BOOST_TEST(read(context, in, target, 0).bytes == size);
    BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0);
}

BOOST_AUTO_TEST_CASE(transfer_on_a_moved_from_set_is_rejected_not_a_crash) {
    scratch_files scratch(2);
    stripe_set set(scratch.names, open_mode::write, unit);
    stripe_set taken(std::move(set));
    parallel_context context(options_for(2));
    std::vector<unsigned char> buffer(unit);
    try {
        (void)write(context, set, buffer, 0);  // NOLINT(bugprone-use-after-move)
        BOOST_ERROR("a transfer on a moved-from stripe set was accepted");
    } catch (const std::invalid_argument& e) {
        BOOST_TEST(std::string(e.what()).find("moved from") != std::string::npos, e.what());
    }
    BOOST_TEST(set.locate(12345).offset == 12345u);  // no division by zero either
    BOOST_TEST(write(context, taken, buffer, 0).bytes == unit);
}

// Two members reaching one file (one path twice, a hard link, two handles on one path) would put
// two workers' stripes at the same file offsets: refused, naming both, before anything moves.
BOOST_AUTO_TEST_CASE(a_stripe_set_naming_one_file_twice_is_refused_naming_both_members) {
    scratch_files scratch(2);
    nvmeio_test::spew_pattern(scratch.names[0], 4 * 4096, 5);
    const std::vector<unsigned char> before = nvmeio_test::slurp(scratch.names[0]);
    temp_path link("stripe_link");
    BOOST_REQUIRE(::link(scratch.names[0].c_str(), link.str().c_str()) == 0);
    const auto refusal = [](auto&& make) {
        return nvmeio_test::message_of<std::invalid_argument>(make);
    };
    const std::string a = scratch.names[0];
    const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
        {"one path twice", {a, a}},
        {"a hard link", {a, link.str()}},
        {"a third member, the first again", {a, scratch.names[1], a}}};
    for (const auto& c : cases) {
        const std::vector<std::string>& paths = c.second;
        BOOST_TEST_CONTEXT(c.first) {
            const std::string what =
                refusal([&] { stripe_set set(paths, open_mode::read_write, 4096); });
            BOOST_TEST(nvmeio_test::contains(what, "members 0 ('" + a + "') and " +
                                                       std::to_string(paths.size() - 1) + " ('" +
                                                       paths.back() + "') are one file"),
                       what);
        }
    }
    std::vector<file> handles;
    handles.emplace_back(a, open_mode::read_write, direct_io::on);
    handles.emplace_back(a, open_mode::read_write, direct_io::off);
    const std::string what = refusal([&] { stripe_set set(std::move(handles), 4096); });
    BOOST_TEST(nvmeio_test::contains(what, "members 0 ('" + a + "') and 1"), what);
    BOOST_TEST(nvmeio_test::slurp(a) == before);
}

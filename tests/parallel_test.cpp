#define BOOST_TEST_MODULE parallel
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <nvmeio/parallel.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "offset_fault_backend.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t block = 64 * 1024;

const std::vector<std::size_t> sizes = {
    1, 4095, 4096, block - 1, block + 1, 5 * block + 1, 37 * block + 123};

parallel_options options_for(unsigned threads) {
    parallel_options o;
    o.threads = threads;
    o.context = {8, block};
    o.min_piece_size = 4096;  // split even small transfers, so the tests see uneven pieces
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(split_round_trip_is_byte_exact_for_uneven_sizes, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    for (unsigned threads : {1u, 2u, 3u, 4u}) {
        basic_parallel_context<TestType> context(options_for(threads));
        BOOST_TEST(context.threads() == threads);
        for (std::size_t size : sizes) {
            BOOST_TEST_CONTEXT("threads=" << threads << " size=" << size) {
                temp_path path("parallel");
                const auto expected = nvmeio_test::pattern(size, size + threads);
                aligned_buffer source(size);
                std::memcpy(source.data(), expected.data(), size);
                {
                    file out(path.str(), open_mode::write);
                    BOOST_TEST(write(context, out, source, 0).bytes == size);
                }
                BOOST_TEST(nvmeio_test::file_size(path.str()) == size);
                BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
                aligned_buffer target(size + 4096);
                std::memset(target.data(), 0xAB, target.capacity());
                file in(path.str(), open_mode::read);
                BOOST_TEST(read(context, in, nvmeio::memory(target).first(size), 0).bytes == size);
                BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0);
                BOOST_TEST(std::to_integer<int>(target.data()[size]) == 0xAB);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(split_read_past_end_of_file_reports_the_bytes_that_exist, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("parallel_short");
    const std::size_t size = 3 * block + 777;
    const auto bytes = nvmeio_test::pattern(size, 5);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    basic_parallel_context<TestType> context(options_for(4));
    file in(path.str(), open_mode::read);
    aligned_buffer target(10 * block);
    const transfer_result got = read(context, in, target, 0);
    BOOST_TEST(got.bytes == size);
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), size) == 0);
    BOOST_TEST(read(context, in, nvmeio::memory(target).first(block), 8 * block).bytes == 0u);
}

BOOST_AUTO_TEST_CASE(threads_are_created_once_and_reused) {
    temp_path path("parallel_reuse");
    const std::size_t size = 8 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 1).data(), size);
    const int before = nvmeio_test::thread_count();
    {
        parallel_context context(options_for(4));
        const int with_pool = nvmeio_test::thread_count();
        BOOST_TEST(with_pool == before + 4);
        file in(path.str(), open_mode::read);
        aligned_buffer target(size);
        for (int i = 0; i < 20; ++i)
            (void)read(context, in, target, 0);
        BOOST_TEST(nvmeio_test::thread_count() == with_pool);
    }
    BOOST_TEST(nvmeio_test::thread_count() == before);
}

BOOST_AUTO_TEST_CASE(failure_in_one_piece_names_its_offset) {
    temp_path path("parallel_fault");
    const std::size_t size = 8 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 2).data(), size);
    basic_parallel_context<nvmeio_test::offset_fault_backend> context(options_for(4));
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    nvmeio_test::offset_fault_backend::fail_offset = 5 * block + 100;
    try {
        (void)read(context, in, target, 0);
        BOOST_ERROR("the injected failure was not reported");
    } catch (const io_error& e) {
        BOOST_TEST(e.code() == std::error_code(EIO, std::generic_category()));
        BOOST_TEST(e.offset() == 5 * block);
        BOOST_TEST(e.length() == block);
        BOOST_TEST(e.path() == path.str());
    }
    std::error_code ec;
    (void)read(context, in, target, 0, {}, ec);
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(read(context, in, target, 0).bytes == size);
}

BOOST_AUTO_TEST_CASE(several_callers_share_one_context) {
    parallel_context context(options_for(3));
    std::vector<std::thread> callers;
    std::vector<int> ok(4, 0);
    for (int t = 0; t < 4; ++t) {
        callers.emplace_back([&, t] {
            temp_path path("parallel_shared_" + std::to_string(t));
            const std::size_t size = 9 * block + 4096 * t;
            const auto expected = nvmeio_test::pattern(size, 100 + t);
            aligned_buffer buffer(size);
            std::memcpy(buffer.data(), expected.data(), size);
            {
                file out(path.str(), open_mode::write);
                (void)write(context, out, buffer, 0);
            }
            std::memset(buffer.data(), 0, size);
            file in(path.str(), open_mode::read);
            const std::size_t got = read(context, in, buffer, 0).bytes;
            ok[t] = got == size && std::memcmp(buffer.data(), expected.data(), size) == 0;
        });
    }
    for (std::thread& c : callers)
        c.join();
    for (int t = 0; t < 4; ++t)
        BOOST_TEST(ok[t] == 1, "caller " << t);
}

BOOST_AUTO_TEST_CASE(measuring_merges_the_pieces) {
    temp_path path("parallel_perf");
    const std::size_t size = 16 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 3).data(), size);
    parallel_context context(options_for(4));
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    transfer_config config;
    config.measure = true;
    const transfer_result got = read(context, in, target, 0, config);
    BOOST_TEST(got.perf.bytes == size);
    BOOST_TEST(got.perf.requests == 16u);
    BOOST_TEST(got.perf.completion.count == 16u);
    BOOST_TEST(got.perf.elapsed_us > 0);
}

BOOST_AUTO_TEST_CASE(zero_threads_and_bad_rules_are_rejected) {
    parallel_options o = options_for(0);
    BOOST_CHECK_THROW(parallel_context c(o), std::invalid_argument);
    temp_path path("parallel_rules");
    nvmeio_test::spew(path.str(), std::string(block, 'x').data(), block);
    parallel_context context(options_for(2));
    file in(path.str(), open_mode::read);
    aligned_buffer target(2 * block);
    BOOST_CHECK_THROW((void)read(context, in, nvmeio::memory(target).slice(1, block), 0),
                      std::invalid_argument);
    BOOST_CHECK_THROW((void)read(context, in, nvmeio::memory(target).first(block), 100),
                      std::invalid_argument);
}

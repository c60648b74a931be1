#define BOOST_TEST_MODULE aio_context
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::message_of;

namespace {

// The kernel AIO rings this process has mapped (io_setup maps one "/[aio]" per context).
int aio_rings() {
    std::ifstream maps("/proc/self/maps");
    int count = 0;
    for (std::string line; std::getline(maps, line);)
        if (line.find("/[aio]") != std::string::npos) ++count;
    return count;
}
}  // namespace

BOOST_AUTO_TEST_CASE(context_keeps_its_settings) {
    aio_context context({16, 256 * 1024});
    BOOST_TEST(context.queue_depth() == 16u);
    BOOST_TEST(context.block_size() == 256u * 1024);
    BOOST_TEST(context.backend().queue_depth() == 16u);
    static_assert(std::is_same_v<aio_context::backend_type, libaio_backend>);
}

BOOST_AUTO_TEST_CASE(zero_queue_depth_is_rejected) {
    const std::string text = message_of<std::invalid_argument>([] { aio_context c({0, 4096}); });
    BOOST_TEST(text.find("queue_depth must be at least 1 (got 0)") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(zero_block_size_is_rejected) {
    const std::string text = message_of<std::invalid_argument>([] { aio_context c({4, 0}); });
    BOOST_TEST(text.find("block_size must be at least 1 (got 0)") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_spin_limit_outside_0_to_1_second_is_rejected) {
    for (const auto spin : {std::chrono::microseconds{-1}, std::chrono::microseconds{1'000'001}}) {
        const std::string text = message_of<std::invalid_argument>([&] {
            aio_context c({4, 4096, spin});
        });
        BOOST_TEST(text.find("spin must be between 0 and 1 second (got " +
                             std::to_string(spin.count()) + " us)") != std::string::npos,
                   text);
    }
    aio_context fine({4, 4096, std::chrono::seconds{1}});
    BOOST_TEST(fine.options().spin.count() == 1'000'000);
}

BOOST_AUTO_TEST_CASE(a_retry_budget_outside_0_to_1_hour_is_rejected) {
    for (const auto budget :
         {std::chrono::milliseconds{-1}, std::chrono::milliseconds{3'600'001}}) {
        context_options options{4, 4096};
        options.retry_budget = budget;
        const std::string text = message_of<std::invalid_argument>([&] { aio_context c(options); });
        BOOST_TEST(text.find("retry_budget must be between 0 and 1 hour (got " +
                             std::to_string(budget.count()) + " ms)") != std::string::npos,
                   text);
    }
    context_options options{4, 4096};
    BOOST_TEST(options.retry_budget.count() == 10'000);  // the default: 10 s
    options.retry_budget = std::chrono::hours(1);
    aio_context fine(options);
    BOOST_TEST(fine.options().retry_budget.count() == 3'600'000);
}

BOOST_AUTO_TEST_CASE(queue_depth_above_aio_max_nr_is_rejected_not_hung) {
    const unsigned long limit = aio_max_nr();
    BOOST_TEST_REQUIRE(limit > 0u);
    const auto depth = static_cast<unsigned>(limit + 1);
    const std::string text = message_of<std::invalid_argument>([&] {
        aio_context c({depth, 4096});
    });
    BOOST_TEST(text.find(std::to_string(depth)) != std::string::npos, text);
    BOOST_TEST(text.find("aio-max-nr = " + std::to_string(limit)) != std::string::npos, text);
}

// Each context is a kernel AIO context of its own (one "[aio]" ring mapping each), all of them
// move bytes while they live together, and each gives its ring back when it dies.
BOOST_AUTO_TEST_CASE(many_contexts_can_live_at_once) {
    nvmeio_test::temp_path path("many_contexts");
    const std::size_t size = 16 * 4096;
    const std::vector<unsigned char> expected = nvmeio_test::pattern(size, 16);
    nvmeio_test::spew(path.str(), expected.data(), size);
    file in(path.str(), open_mode::read);
    const int rings = aio_rings();
    {
        std::vector<std::unique_ptr<aio_context>> contexts;
        for (int i = 0; i < 16; ++i)
            contexts.push_back(std::make_unique<aio_context>(context_options{64, 4096}));
        BOOST_TEST(aio_rings() == rings + 16);
        aligned_buffer target(size);
        for (std::size_t i = 0; i < contexts.size(); ++i) {
            std::memset(target.data(), 0, size);
            BOOST_TEST(read(*contexts[i], in, target, 0).bytes == size);
            BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0, "context " << i);
        }
    }
    BOOST_TEST(aio_rings() == rings);
}

#define BOOST_TEST_MODULE aio_context
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <nvmeio/aio_context.hpp>
#include <string>

using namespace nvmeio;

namespace {
template <class E, class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "nothing thrown";
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

BOOST_AUTO_TEST_CASE(many_contexts_can_live_at_once) {
    std::vector<std::unique_ptr<aio_context>> contexts;
    for (int i = 0; i < 16; ++i)
        contexts.push_back(std::make_unique<aio_context>(context_options{64, 4096}));
    BOOST_TEST(contexts.size() == 16u);
}

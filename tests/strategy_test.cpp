#define BOOST_TEST_MODULE strategy
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <nvmeio/stripe.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "backend_support.hpp"
#include "leak_check.hpp"
#include "test_support.hpp"

namespace bdata = boost::unit_test::data;
using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::contains;
using nvmeio_test::every_config;
using nvmeio_test::message_of;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t block = 64 * 1024;  // small, so "many blocks" stays quick

const std::vector<std::size_t> sizes = {0,    1,         511,   4095,      4096,
                                        4097, block - 1, block, block + 1, 37 * block + 123};
const std::vector<unsigned> depths = {1, 2, 8, 64};

std::string describe(const transfer_config& c, unsigned depth, std::size_t size) {
    return std::string(to_string(c.strategy)) + "/" + to_string(c.submit) +
           " qd=" + std::to_string(depth) + " size=" + std::to_string(size);
}

// Writes `size` bytes with `config`, checks the file with plain POSIX reads, reads it back with
// `config` into a buffer whose bytes past `size` are a sentinel, and checks every byte.
template <class Backend>
void round_trip(std::size_t size, unsigned depth, std::size_t block_size,
                const transfer_config& config,
                std::chrono::microseconds spin = std::chrono::microseconds{0}) {
    BOOST_TEST_CONTEXT(Backend::name << " " << describe(config, depth, size)
                                     << " spin=" << spin.count() << "us") {
        temp_path path("round_trip");
        basic_aio_context<Backend> context({depth, block_size, spin});
        const std::vector<unsigned char> expected = nvmeio_test::pattern(size, size * 31 + depth);
        aligned_buffer source(size);
        if (size != 0) std::memcpy(source.data(), expected.data(), size);
        {
            file out(path.str(), open_mode::write, direct_io::on);
            BOOST_TEST_REQUIRE(out.is_direct());
            const transfer_result written = write(context, out, source, 0, config);
            BOOST_TEST(written.bytes == size);
        }
        BOOST_TEST(nvmeio_test::file_size(path.str()) == size);
        BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));

        const std::size_t slack = 8192;
        aligned_buffer target(size + slack);
        std::memset(target.data(), 0xAB, target.capacity());
        file in(path.str(), open_mode::read, direct_io::on);
        BOOST_TEST_REQUIRE(in.is_direct());
        const transfer_result got =
            read(context, in, nvmeio::memory(target).first(size), 0, config);
        BOOST_TEST(got.bytes == size);
        // memcmp with a null pointer is undefined even for 0 bytes (UBSan stops there).
        if (size != 0) BOOST_TEST(std::memcmp(target.data(), expected.data(), size) == 0);
        std::size_t touched = 0;
        for (std::size_t i = size; i < target.capacity(); ++i) {
            touched += target.data()[i] != std::byte{0xAB};
        }
        BOOST_TEST(touched == 0u, "bytes past the requested length were overwritten");
    }
}

}  // namespace

BOOST_DATA_TEST_CASE(round_trip_is_byte_exact_for_every_strategy_and_submit_mode,
                     bdata::make(sizes) * bdata::make(depths), size, depth) {
    nvmeio_test::for_each_backend([&](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        for (const transfer_config& c : every_config())
            round_trip<backend>(size, depth, block, c);
    });
}

// Polling the completion ring before sleeping (context_options::spin) changes how the engine
// waits, never what it moves.
BOOST_DATA_TEST_CASE(round_trip_is_byte_exact_when_waits_poll_before_sleeping,
                     bdata::make(sizes) * bdata::make(std::vector<unsigned>{1, 8}), size, depth) {
    nvmeio_test::for_each_backend([&](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        for (const transfer_config& c : every_config())
            round_trip<backend>(size, depth, block, c, std::chrono::microseconds{50});
    });
}

BOOST_DATA_TEST_CASE(round_trip_of_64_mib_with_1_mib_blocks_is_byte_exact, bdata::make(depths),
                     depth) {
    nvmeio_test::for_each_backend([&](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        // The second backend runs the deepest queue only (the small-size test covers every
        // depth), to keep the suite quick.
        if (!std::is_same_v<backend, libaio_backend> && depth != 64) return;
        for (const transfer_config& c : every_config())
            round_trip<backend>(64u << 20, depth, 1u << 20, c);
    });
}

BOOST_AUTO_TEST_CASE_TEMPLATE(read_past_end_of_file_reports_the_bytes_that_exist, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("short_file");
    const std::size_t size = 3 * block + 777;
    const auto bytes = nvmeio_test::pattern(size, 5);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    basic_aio_context<TestType> context({8, block});
    file in(path.str(), open_mode::read);
    for (const transfer_config& c : every_config()) {
        BOOST_TEST_CONTEXT(describe(c, 8, size)) {
            aligned_buffer target(11 * block);
            std::memset(target.data(), 0xCD, target.capacity());
            const transfer_result got =
                read(context, in, nvmeio::memory(target).first(10 * block), 0, c);
            BOOST_TEST(got.bytes == size);
            BOOST_TEST(std::memcmp(target.data(), bytes.data(), size) == 0);
            // Past the requested length the buffer is as it was.
            BOOST_TEST(std::to_integer<int>(target.data()[10 * block]) == 0xCD);
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(read_starting_past_end_of_file_moves_nothing, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("tiny_file");
    nvmeio_test::spew(path.str(), "abc", 3);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(block);
    BOOST_TEST(read(context, in, target, 4 * block).bytes == 0u);
    BOOST_TEST(read(context, in, nvmeio::memory(target).first(100), 4096).bytes == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(write_at_an_offset_keeps_the_bytes_around_it, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("patch");
    const std::size_t size = 4 * block;
    auto bytes = nvmeio_test::pattern(size, 9);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    basic_aio_context<TestType> context({4, block});
    file f(path.str(), open_mode::read_write);
    const std::size_t patch_length = block + 100;  // aligned start, unaligned end
    aligned_buffer patch(patch_length);
    nvmeio_test::fill_pattern(patch.data(), patch_length, 77);
    write(context, f, patch, block);
    std::memcpy(bytes.data() + block, patch.data(), patch_length);
    BOOST_TEST(nvmeio_test::file_size(path.str()) == size);
    BOOST_TEST((nvmeio_test::slurp(path.str()) == bytes));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(offsets_beyond_4_gib_use_64_bit_arithmetic, TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("sparse_far");
    const std::uint64_t far = (std::uint64_t{5} << 30) + 4096;  // a sparse file: no disk used
    basic_aio_context<TestType> context({4, block});
    aligned_buffer source(2 * block + 3);
    nvmeio_test::fill_pattern(source.data(), source.size(), 11);
    {
        file out(path.str(), open_mode::write);
        write(context, out, source, far);
    }
    BOOST_TEST(nvmeio_test::file_size(path.str()) == far + source.size());
    file in(path.str(), open_mode::read);
    aligned_buffer target(source.size());
    BOOST_TEST(read(context, in, target, far).bytes == source.size());
    BOOST_TEST(std::memcmp(target.data(), source.data(), source.size()) == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(buffered_handle_accepts_unaligned_buffer_and_offset, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("buffered");
    const auto bytes = nvmeio_test::pattern(3 * block + 5, 3);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    // A block size that is not even a power of two: fine without O_DIRECT.
    basic_aio_context<TestType> context({8, 1000});
    file in(path.str(), open_mode::read, direct_io::off);
    BOOST_TEST(!in.is_direct());
    std::vector<unsigned char> target(bytes.size());
    const std::size_t offset = 13;
    const transfer_result got =
        read(context, in, nvmeio::memory(target).slice(1, bytes.size() - offset - 1), offset);
    BOOST_TEST(got.bytes == bytes.size() - offset - 1);
    BOOST_TEST(std::memcmp(target.data() + 1, bytes.data() + offset, got.bytes) == 0);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unaligned_buffer_on_direct_handle_is_rejected_with_the_rule, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("unaligned_buffer");
    nvmeio_test::spew(path.str(), std::string(3 * block, 'x').data(), 3 * block);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(block + 4096);
    try {
        (void)read(context, in, nvmeio::memory(target).slice(1, block), 0);
        BOOST_FAIL("an unaligned buffer was accepted");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("buffer address") != std::string::npos);
        BOOST_TEST(what.find(path.str()) != std::string::npos);
        BOOST_TEST(what.find(std::to_string(in.alignment().memory)) != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unaligned_offset_on_direct_handle_is_rejected_with_the_rule, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("unaligned_offset");
    nvmeio_test::spew(path.str(), std::string(3 * block, 'x').data(), 3 * block);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(block);
    try {
        (void)read(context, in, target, 100);
        BOOST_FAIL("an unaligned offset was accepted");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("offset 100") != std::string::npos);
        BOOST_TEST(what.find("not a multiple of " + std::to_string(in.alignment().offset)) !=
                   std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(block_size_off_the_file_alignment_is_rejected_with_both_values,
                              TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("odd_block");
    nvmeio_test::spew(path.str(), std::string(block, 'x').data(), block);
    basic_aio_context<TestType> context({4, 1000});
    file in(path.str(), open_mode::read);
    aligned_buffer target(block);
    try {
        (void)read(context, in, target, 0);
        BOOST_FAIL("a block size off the alignment was accepted");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("block_size 1000") != std::string::npos);
        BOOST_TEST(what.find(std::to_string(in.alignment().strictest())) != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(write_to_a_read_only_handle_is_rejected, TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("read_only");
    nvmeio_test::spew(path.str(), "abcd", 4);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer source(4096);
    BOOST_CHECK_THROW(write(context, in, source, 0), std::invalid_argument);
    BOOST_TEST(nvmeio_test::slurp(path.str()).size() == 4u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(null_buffer_is_rejected, TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("null");
    nvmeio_test::spew(path.str(), "abcd", 4);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    BOOST_CHECK_THROW((void)read(context, in, nvmeio::memory(static_cast<void*>(nullptr), 4096), 0),
                      std::invalid_argument);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(error_code_overload_reports_failure_without_throwing, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("ec");
    nvmeio_test::spew(path.str(), "abcd", 4);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(4096);
    std::error_code ec = std::make_error_code(std::errc::io_error);
    const transfer_result got = read(context, in, target, 0, {}, ec);
    BOOST_TEST(!ec);
    BOOST_TEST(got.bytes == 4u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(measuring_fills_perf_and_not_measuring_leaves_it_empty, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("perf");
    const std::size_t size = 16 * block;
    const auto bytes = nvmeio_test::pattern(size, 1);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    basic_aio_context<TestType> context({4, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    for (const transfer_config& c : every_config()) {
        BOOST_TEST_CONTEXT(describe(c, 4, size)) {
            transfer_config measured = c;
            measured.measure = true;
            const transfer_result on = read(context, in, target, 0, measured);
            BOOST_TEST(on.perf.bytes == size);
            BOOST_TEST(on.perf.requests == 16u);
            BOOST_TEST(on.perf.completion.count == 16u);
            // single submit: one call per request; block: at most one per refill.
            if (c.submit == submit_mode::single) {
                BOOST_TEST(on.perf.submit.count == 16u);
            } else {
                BOOST_TEST(on.perf.submit.count <= 16u);
                BOOST_TEST(on.perf.submit.count >= 4u);
            }
            BOOST_TEST(on.perf.elapsed_us > 0);
            BOOST_TEST(on.perf.completion.min_us <= on.perf.completion.avg_us);
            BOOST_TEST(on.perf.completion.avg_us <= on.perf.completion.max_us);
            const transfer_result off = read(context, in, target, 0, c);
            BOOST_TEST(off.perf.requests == 0u);
            BOOST_TEST(off.perf.elapsed_us == 0);
        }
    }
}

// Wraps a real backend and records, per submit call, how many requests it carried and how many
// were in flight when it was made.
template <class Inner>
class submit_recorder {
  public:
    struct call {
        std::size_t count;
        std::size_t in_flight;
    };
    static inline std::vector<call> calls;

    explicit submit_recorder(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        calls.push_back({count, in_flight_});
        const int rc = real_.submit(requests, count);
        if (rc > 0) in_flight_ += static_cast<std::size_t>(rc);
        return rc;
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        const int rc = real_.reap(out, min, max, timeout);
        if (rc > 0) in_flight_ -= static_cast<std::size_t>(rc);
        return rc;
    }
    [[nodiscard]] unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

  private:
    Inner real_;
    std::size_t in_flight_ = 0;
};

// Block submit is paced: no call holds more requests than are already in flight (one starts an
// idle queue), so the kernel, which dispatches a multi-request call only when it returns, never
// leaves the device idle behind a long call; and it still takes fewer calls than requests.
BOOST_AUTO_TEST_CASE_TEMPLATE(block_submit_never_holds_more_than_are_in_flight, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("paced");
    const std::size_t size = 64 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 2).data(), size);
    basic_aio_context<submit_recorder<TestType>> context({16, block});
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    for (const strategy_kind strategy : {strategy_kind::sequential, strategy_kind::overlapped}) {
        BOOST_TEST_CONTEXT(to_string(strategy)) {
            auto& calls = submit_recorder<TestType>::calls;
            calls.clear();
            const transfer_result got =
                read(context, in, target, 0, {strategy, submit_mode::block, false});
            BOOST_TEST(got.bytes == size);
            BOOST_TEST(std::memcmp(target.data(), nvmeio_test::pattern(size, 2).data(), size) == 0);
            BOOST_TEST_REQUIRE(!calls.empty());
            BOOST_TEST(calls.front().count == 1u);  // an idle queue starts with one request
            std::size_t requests = 0;
            for (const auto& c : calls) {
                BOOST_TEST(c.count <= std::max<std::size_t>(1, c.in_flight));
                requests += c.count;
            }
            BOOST_TEST(requests == 64u);
            BOOST_TEST(calls.size() < requests);        // not one call per request
            if (strategy == strategy_kind::sequential)  // rounds of 16: calls of 1, 1, 2, 4, 8
                BOOST_TEST(calls.size() == 4u * 5u);
        }
    }
}

// Records the least number of completions each reap asked for: 0 is a poll (never sleeps), more
// is a wait that may sleep in the kernel. A wait interrupted before it got them (-EINTR: a
// signal, or task work io_uring left this thread, ends libaio's io_getevents so) is the same wait
// asked again, and is not recorded twice. With `deaf_polls`, polls find nothing, as when a
// device is slower than the spin limit.
template <class Inner>
class wait_recorder {
  public:
    static inline std::vector<std::size_t> reaps;
    static inline bool deaf_polls = false;

    explicit wait_recorder(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        return real_.submit(requests, count);
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        const int rc = min == 0 && deaf_polls ? 0 : real_.reap(out, min, max, timeout);
        if (rc != -EINTR) reaps.push_back(min);
        return rc;
    }
    [[nodiscard]] unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

  private:
    Inner real_;
};

// Reads `blocks` blocks of a fresh file at queue depth 1 through a recording context polling for
// `spin`, checks the bytes, and returns the reaps' minimums.
template <class Backend>
std::vector<std::size_t> recorded_reaps(std::size_t blocks, std::chrono::microseconds spin,
                                        bool deaf_polls) {
    temp_path path("spin");
    const std::size_t size = blocks * 4096;
    const auto bytes = nvmeio_test::pattern(size, 9);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    basic_aio_context<wait_recorder<Backend>> context({1, 4096, spin});
    file in(path.str(), open_mode::read, direct_io::on);
    aligned_buffer target(size);
    wait_recorder<Backend>::reaps.clear();
    wait_recorder<Backend>::deaf_polls = deaf_polls;
    const transfer_result got = read(context, in, target, 0);
    BOOST_TEST(got.bytes == size);
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), size) == 0);
    return wait_recorder<Backend>::reaps;
}

BOOST_AUTO_TEST_CASE_TEMPLATE(without_spin_every_wait_sleeps_in_the_kernel, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    const auto reaps = recorded_reaps<TestType>(32, std::chrono::microseconds{0}, false);
    BOOST_TEST(reaps.size() == 32u);  // depth 1: one wait per request
    BOOST_TEST(std::count(reaps.begin(), reaps.end(), std::size_t{0}) == 0);
}

// With a limit no 4 KiB read of a local file comes near, every completion is found by polling:
// the engine never asks the kernel to wait.
BOOST_AUTO_TEST_CASE_TEMPLATE(with_spin_a_wait_polls_before_it_sleeps, TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    const auto reaps = recorded_reaps<TestType>(32, std::chrono::seconds{1}, false);
    BOOST_TEST(std::count(reaps.begin(), reaps.end(), std::size_t{0}) >= 32);
    BOOST_TEST(std::count_if(reaps.begin(), reaps.end(), [](std::size_t m) { return m > 0; }) == 0);
}

// The back-off rule alone: when every poll runs out of time, the waits that poll are the 1st and
// 2nd, then one after skipping 1, 2, 4, ... 64, and 64 from then on; a poll that succeeds starts
// the failures over but leaves the skips already due.
BOOST_AUTO_TEST_CASE(polls_that_run_out_of_time_back_off_1_2_4_up_to_64_waits) {
    detail::spin_backoff backoff;
    std::vector<std::size_t> polled;
    for (std::size_t wait = 1; wait <= 396; ++wait) {
        if (!backoff.should_poll()) continue;
        polled.push_back(wait);
        backoff.ran_out();
    }
    const std::vector<std::size_t> expected = {1, 2, 4, 7, 12, 21, 38, 71, 136, 201, 266, 331, 396};
    BOOST_TEST(polled == expected, boost::test_tools::per_element());

    // The poll at wait 396 ran out: 64 skips are due, and a success does not cancel them.
    backoff.succeeded();
    std::size_t skipped = 0;
    while (!backoff.should_poll() && skipped <= 1000)
        ++skipped;
    BOOST_TEST(skipped == 64u);
    backoff.ran_out();  // the first failure after a success skips nothing
    BOOST_TEST(backoff.should_poll());
    backoff.ran_out();  // the second skips one
    BOOST_TEST(!backoff.should_poll());
    BOOST_TEST(backoff.should_poll());
}

// Through the engine: with polls that never find anything (a device slower than the limit), a
// few of 200 waits poll, the first two among them, and the bytes are exact.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_device_slower_than_the_spin_limit_is_polled_for_few_waits, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    const std::size_t blocks = 200;
    const auto reaps = recorded_reaps<TestType>(blocks, std::chrono::microseconds{100}, true);
    // Each wait is one run of polls (maybe none) ended by one sleeping reap.
    std::vector<bool> polled;
    bool polling = false;
    for (const std::size_t min : reaps) {
        if (min == 0) {
            polling = true;
            continue;
        }
        polled.push_back(polling);
        polling = false;
    }
    // One wait per request (a request the kernel answers short or refuses for now is waited
    // for again: a few more).
    BOOST_TEST_REQUIRE(polled.size() >= blocks);
    BOOST_TEST(polled.size() <= blocks + 10);
    BOOST_TEST(polled[0]);
    BOOST_TEST(polled[1]);
    const auto waits_that_polled = std::count(polled.begin(), polled.end(), true);
    BOOST_TEST(waits_that_polled >= 8);  // 9 of exactly 200 waits (see the rule above)
    BOOST_TEST(waits_that_polled <= 10);
}

// The write-range reservation (fallocate) is for regular files: a character device, which
// fallocate refuses with ENODEV, is written without one.
BOOST_AUTO_TEST_CASE_TEMPLATE(writes_to_a_character_device_get_no_reservation, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    file null("/dev/null", open_mode::read_write, direct_io::automatic);
    BOOST_TEST_REQUIRE((null.kind() == file_kind::character_device));
    basic_aio_context<TestType> context({4, 64 * 1024});
    aligned_buffer buffer(256 * 1024 + 100);
    std::fill_n(buffer.data(), buffer.size(), std::byte{0x5a});  // valgrind: defined bytes only
    for (const transfer_config& config : every_config()) {
        BOOST_TEST(write(context, null, buffer, 0, config).bytes == buffer.size());
    }
}

namespace {

// The calls, as function objects, so that the compiler can be asked which arguments they take.
struct reading {
    template <class... Args>
    auto operator()(Args&&... args) const -> decltype(read(std::forward<Args>(args)...));
};
struct writing {
    template <class... Args>
    auto operator()(Args&&... args) const -> decltype(write(std::forward<Args>(args)...));
};
struct moving {
    template <class... Args>
    auto operator()(Args&&... args) const -> decltype(transfer(std::forward<Args>(args)...));
};
using std::is_invocable_v;

// Memory that is const is written from, never read into.
static_assert(is_invocable_v<reading, aio_context&, const file&, mutable_memory, std::uint64_t>);
static_assert(is_invocable_v<reading, aio_context&, const file&, aligned_buffer&, std::uint64_t>);
static_assert(!is_invocable_v<reading, aio_context&, const file&, const_memory, std::uint64_t>);
static_assert(
    !is_invocable_v<reading, aio_context&, const file&, const aligned_buffer&, std::uint64_t>);
static_assert(
    !is_invocable_v<moving, aio_context&, const file&, operation, const_memory, std::uint64_t>);
static_assert(
    !is_invocable_v<reading, parallel_context&, const stripe_set&, const_memory, std::uint64_t>);
static_assert(is_invocable_v<writing, aio_context&, const file&, const_memory, std::uint64_t>);
static_assert(
    is_invocable_v<writing, parallel_context&, const file&, const aligned_buffer&, std::uint64_t>);
// Only nvmeio's contexts and targets, with the settings each pair takes.
static_assert(
    !is_invocable_v<reading, aio_context&, const stripe_set&, mutable_memory, std::uint64_t>);
static_assert(!is_invocable_v<reading, int&, const file&, mutable_memory, std::uint64_t>);
static_assert(!is_invocable_v<reading, parallel_context&, const file&, mutable_memory,
                              std::uint64_t, const batch_options&>);
static_assert(!is_invocable_v<reading, parallel_context&, const stripe_set&, mutable_memory,
                              std::uint64_t, const transfer_config&>);
static_assert(is_invocable_v<reading, parallel_context&, const file&, mutable_memory, std::uint64_t,
                             const sequential&, std::error_code&>);
// A bare pointer is refused, whatever it points to (`memory(p, n)` says its size); a range of
// plain elements is taken whole. The old form, a length after the memory, is refused.
static_assert(!is_invocable_v<reading, aio_context&, const file&, aligned_buffer*, std::uint64_t>);
static_assert(
    !is_invocable_v<writing, aio_context&, const file&, const std::vector<char>*, std::uint64_t>);
static_assert(!is_invocable_v<reading, aio_context&, const file&, std::uint64_t*, std::uint64_t>);
static_assert(
    is_invocable_v<reading, aio_context&, const file&, std::vector<std::uint64_t>&, std::uint64_t>);
static_assert(!is_invocable_v<reading, aio_context&, const file&, aligned_buffer&, std::size_t,
                              std::uint64_t>);
// A class derived from a context, or from a pair's settings, is served as its base.
struct derived_context : parallel_context {
    using parallel_context::parallel_context;
};
struct derived_config : transfer_config {};
struct derived_options : batch_options {};
static_assert(
    is_invocable_v<reading, derived_context&, const file&, mutable_memory, std::uint64_t>);
static_assert(is_invocable_v<reading, parallel_context&, const file&, mutable_memory, std::uint64_t,
                             const derived_config&>);
static_assert(is_invocable_v<reading, derived_context&, const stripe_set&, mutable_memory,
                             std::uint64_t, const derived_options&>);
// A function named `route` in the namespace of a caller's context (found by argument-dependent
// lookup) does not stand in for nvmeio's routes.
namespace caller {
struct my_context : aio_context {
    using aio_context::aio_context;
};
template <class... T>
int route(T&&...) {
    return 0;
}
}  // namespace caller
static_assert(std::is_same_v<std::invoke_result_t<reading, caller::my_context&, const file&,
                                                  mutable_memory, std::uint64_t>,
                             transfer_result>);
static_assert(std::is_same_v<std::invoke_result_t<moving, caller::my_context&, const file&,
                                                  operation, mutable_memory, std::uint64_t,
                                                  const transfer_config&, std::error_code&>,
                             transfer_result>);

// Whether `call` is refused as a view of `size + 1` bytes of memory holding `size` is.
template <class Call>
bool refused_past(std::size_t size, Call call) {
    const std::string what = message_of<std::invalid_argument>(call);
    const std::string view = "a view of " + std::to_string(size + 1) + " bytes at byte 0";
    const std::string holder = "of memory holding " + std::to_string(size) + " bytes";
    return contains(what, view + " " + holder + " passes its end");
}

// Writes `size` bytes from an aligned_buffer to `target` through `context` and reads them back
// into another. A view one byte past a buffer's size (which its capacity would hold) is refused
// in both error forms, naming that size, before anything moves; `contents()` is what the target
// holds.
template <class Context, class Target, class Contents>
void round_trip_bounded_by_the_buffer(Context& context, const Target& target, std::size_t size,
                                      const Contents& contents) {
    aligned_buffer source(size);
    aligned_buffer other(size);
    nvmeio_test::fill_pattern(source.data(), size, 11);
    nvmeio_test::fill_pattern(other.data(), size, 12);
    BOOST_TEST(write(context, target, source, 0).bytes == size);
    const auto written = contents();
    std::error_code ec;
    const auto refused = [&](auto call) { return refused_past(size, call); };
    BOOST_TEST(
        refused([&] { (void)write(context, target, nvmeio::memory(other).first(size + 1), 0); }));
    BOOST_TEST(refused(
        [&] { (void)write(context, target, nvmeio::memory(other).first(size + 1), 0, {}, ec); }));
    BOOST_TEST(
        refused([&] { (void)read(context, target, nvmeio::memory(other).first(size + 1), 0); }));
    BOOST_TEST(refused(
        [&] { (void)read(context, target, nvmeio::memory(other).first(size + 1), 0, {}, ec); }));
    BOOST_TEST((contents() == written));
    BOOST_TEST(nvmeio_test::holds_pattern(other.data(), size, 12));
    BOOST_TEST(read(context, target, other, 0, {}, ec).bytes == size);
    BOOST_TEST(!ec);
    BOOST_TEST(nvmeio_test::holds_pattern(other.data(), size, 11));
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_aligned_buffer_bounds_the_length_on_every_context_and_target) {
    const std::size_t size = 5 * block + 123;
    aio_context single({4, block});
    parallel_context parallel({3, {4, block}, 4096});
    temp_path path("bounded");
    const file f(path.str(), open_mode::write);
    const auto file_contents = [&] { return nvmeio_test::slurp(path.str()); };
    BOOST_TEST_CONTEXT("aio context, file") {
        round_trip_bounded_by_the_buffer(single, f, size, file_contents);
    }
    BOOST_TEST_CONTEXT("parallel context, file") {
        round_trip_bounded_by_the_buffer(parallel, f, size, file_contents);
    }
    temp_path a("bounded_stripe");
    temp_path b("bounded_stripe");
    const stripe_set set({a.str(), b.str()}, open_mode::write, block);
    const auto set_contents = [&] {
        return std::vector{nvmeio_test::slurp(a.str()), nvmeio_test::slurp(b.str())};
    };
    BOOST_TEST_CONTEXT("parallel context, stripe set") {
        round_trip_bounded_by_the_buffer(parallel, set, size, set_contents);
    }
}

// Memory given with its size, `mutable_memory{p, n}` / `const_memory{p, n}`, bounds the length as
// an aligned_buffer does; a context and settings derived from nvmeio's move bytes as their bases.
BOOST_AUTO_TEST_CASE(memory_given_with_its_size_bounds_the_length) {
    const std::size_t size = 3 * block + 5;
    derived_context context({2, {4, block}});
    temp_path path("memory_size");
    const file f(path.str(), open_mode::write);
    aligned_buffer bytes(size + block);  // room past `size` that the length may not use
    nvmeio_test::fill_pattern(bytes.data(), bytes.size(), 3);
    BOOST_TEST(write(context, f, const_memory{bytes.data(), size}, 0, derived_config{}).bytes ==
               size);
    BOOST_TEST(refused_past(size, [&] {
        (void)read(context, f, mutable_memory{bytes.data(), size}.first(size + 1), 0);
    }));
    std::vector<char> back(size);
    BOOST_TEST(f.read_at(back, 0) == size);
    BOOST_TEST(nvmeio_test::holds_pattern(back.data(), size, 3));
}

// A backend that holds a completion of its own and leaves it out of in_flight(): a test of the
// engine, which must not wait forever for a request it is told is not in flight, nor report
// success without its bytes.
class undercounting_backend {
  public:
    static constexpr const char* name = "undercounting";
    explicit undercounting_backend(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        if (count == 0) return 0;
        if (!held_) {  // the first request "fails" without reaching the kernel
            held_ = io_completion{requests[0].user_data, -EIO};
            return 1;
        }
        return real_.submit(requests, count);
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        if (held_ && !handed_ && max > 0) {
            out[0] = *held_;
            handed_ = true;
            return 1;
        }
        return real_.reap(out, min, max, timeout);
    }
    [[nodiscard]] unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }  // wrong

  private:
    libaio_backend real_;
    std::optional<io_completion> held_;
    bool handed_ = false;
};

BOOST_AUTO_TEST_CASE(a_backend_that_miscounts_its_requests_in_flight_is_an_error_not_a_hang) {
    temp_path path("undercount");
    const std::size_t size = 5 * 4096;
    nvmeio_test::spew_pattern(path.str(), size, 5);
    for (strategy_kind strategy : {strategy_kind::sequential, strategy_kind::overlapped}) {
        BOOST_TEST_CONTEXT(to_string(strategy)) {
            basic_aio_context<undercounting_backend> context({1, 4096});
            file in(path.str(), open_mode::read, direct_io::on);
            aligned_buffer target(size);
            transfer_config config;
            config.strategy = strategy;
            nvmeio_test::within(std::chrono::seconds(60), "the read", [&] {
                try {
                    (void)read(context, in, target, 0, config);
                    BOOST_FAIL("the read succeeded without its first block");
                } catch (const io_error& e) {
                    BOOST_TEST((e.code() == std::errc::protocol_error), e.what());
                    BOOST_TEST(contains(e.operation(), "no request in flight"), e.what());
                }
                return 0;
            });
        }
    }
}

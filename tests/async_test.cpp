#define BOOST_TEST_MODULE async
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <nvmeio/async.hpp>
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
async_options options_for(unsigned threads) {
    return {threads, {8, block}};
}
}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(several_outstanding_transfers_complete_byte_exact, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    basic_async_context<TestType> context(options_for(2));
    constexpr int count = 6;
    std::vector<std::unique_ptr<temp_path>> paths;
    std::vector<file> files;
    std::vector<aligned_buffer> buffers;
    std::vector<std::vector<unsigned char>> expected;
    for (int i = 0; i < count; ++i) {
        const std::size_t size = (i + 1) * block + 333 * i;
        paths.push_back(std::make_unique<temp_path>("async_" + std::to_string(i)));
        files.emplace_back(paths.back()->str(), open_mode::read_write);
        expected.push_back(nvmeio_test::pattern(size, 40 + i));
        buffers.emplace_back(size);
        std::memcpy(buffers.back().data(), expected.back().data(), size);
    }
    std::vector<transfer_handle> writes;
    for (int i = 0; i < count; ++i)
        writes.push_back(async_write(context, files[i], buffers[i], 0));
    for (int i = 0; i < count; ++i) {
        BOOST_TEST(writes[i].valid());
        BOOST_TEST(writes[i].wait().bytes == buffers[i].size());
        BOOST_TEST(writes[i].ready());
        BOOST_TEST((nvmeio_test::slurp(paths[i]->str()) == expected[i]));
        std::memset(buffers[i].data(), 0, buffers[i].size());
    }
    std::vector<transfer_handle> reads;
    for (int i = 0; i < count; ++i)
        reads.push_back(async_read(context, files[i], buffers[i], 0));
    for (int i = count - 1; i >= 0; --i) {  // any order
        BOOST_TEST(reads[i].wait_for(std::chrono::seconds(60)));
        BOOST_TEST(reads[i].wait().bytes == buffers[i].size());
        BOOST_TEST(std::memcmp(buffers[i].data(), expected[i].data(), buffers[i].size()) == 0);
    }
}

BOOST_AUTO_TEST_CASE(failure_surfaces_at_wait_with_the_precise_error) {
    temp_path path("async_fault");
    const std::size_t size = 4 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 1).data(), size);
    basic_async_context<nvmeio_test::offset_fault_backend> context(options_for(1));
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    nvmeio_test::offset_fault_backend::fail_offset = 2 * block;
    transfer_handle handle = async_read(context, in, target, 0);
    try {
        (void)handle.wait();
        BOOST_ERROR("the injected failure was not reported");
    } catch (const io_error& e) {
        BOOST_TEST(e.code() == std::error_code(EIO, std::generic_category()));
        BOOST_TEST(e.operation() == "read");
        BOOST_TEST(e.offset() == 2 * block);
        BOOST_TEST(e.path() == path.str());
    }
    std::error_code ec;
    (void)handle.wait(ec);  // waiting again reports the same outcome
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
}

BOOST_AUTO_TEST_CASE(precondition_violation_throws_at_submit) {
    temp_path path("async_rules");
    nvmeio_test::spew(path.str(), std::string(block, 'x').data(), block);
    async_context context(options_for(1));
    file in(path.str(), open_mode::read);
    aligned_buffer target(2 * block);
    BOOST_CHECK_THROW((void)async_read(context, in, nvmeio::memory(target).slice(1, block), 0),
                      std::invalid_argument);
    BOOST_CHECK_THROW((void)async_write(context, in, nvmeio::memory(target).first(block), 0),
                      std::invalid_argument);  // opened for reading
    BOOST_CHECK_THROW(async_context bad(options_for(0)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(dropping_a_handle_waits_for_its_transfer) {
    temp_path path("async_drop");
    const std::size_t size = 32 * block;
    const auto expected = nvmeio_test::pattern(size, 8);
    aligned_buffer source(size);
    std::memcpy(source.data(), expected.data(), size);
    async_context context(options_for(1));
    {
        file out(path.str(), open_mode::write);
        (void)async_write(context, out, source, 0);  // handle dies at once
    }
    BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
}

BOOST_AUTO_TEST_CASE(destroying_the_context_finishes_queued_work_without_leaks) {
    const int fds = nvmeio_test::open_fd_count();
    const int threads = nvmeio_test::thread_count();
    temp_path path("async_teardown");
    const std::size_t size = 8 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 4).data(), size);
    {
        file in(path.str(), open_mode::read);
        std::vector<aligned_buffer> targets;
        for (int i = 0; i < 12; ++i)
            targets.emplace_back(size);
        std::vector<transfer_handle> handles;
        {
            async_context context(options_for(2));
            for (aligned_buffer& t : targets)
                handles.push_back(async_read(context, in, t, 0));
        }  // the context waits for all twelve
        for (transfer_handle& h : handles) {
            BOOST_TEST(h.ready());
            BOOST_TEST(h.wait().bytes == size);
        }
    }
    BOOST_TEST(nvmeio_test::open_fd_count() == fds);
    BOOST_TEST(nvmeio_test::thread_count() == threads);
}

// libaio whose submit waits at a gate the test opens, and says when a transfer reached it: the
// test knows which transfer runs while it cancels the others.
class gated_backend {
  public:
    static constexpr const char* name = "gated";
    static inline std::mutex mutex;
    static inline std::condition_variable changed;
    static inline bool reached = false;
    static inline bool open = true;

    explicit gated_backend(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        {
            std::unique_lock<std::mutex> lock(mutex);
            reached = true;
            changed.notify_all();
            changed.wait(lock, [] { return open; });
        }
        return real_.submit(requests, count);
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        return real_.reap(out, min, max, timeout);
    }
    unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

    static void close_gate() {
        std::lock_guard<std::mutex> lock(mutex);
        reached = false;
        open = false;
    }
    static void wait_until_reached() {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [] { return reached; });
    }
    static void open_gate() {
        std::lock_guard<std::mutex> lock(mutex);
        open = true;
        changed.notify_all();
    }

  private:
    libaio_backend real_;
};

// One worker holds the first transfer at the gate: the other nine are queued, and all nine are
// cancelled; the first finishes with every byte.
BOOST_AUTO_TEST_CASE(cancelled_transfers_report_operation_canceled) {
    temp_path path("async_cancel");
    const std::size_t size = 64 * block;
    const std::vector<unsigned char> expected = nvmeio_test::pattern(size, 6);
    nvmeio_test::spew(path.str(), expected.data(), size);
    file in(path.str(), open_mode::read);
    std::vector<aligned_buffer> targets;
    for (int i = 0; i < 10; ++i)
        targets.emplace_back(size);
    basic_async_context<gated_backend> context(options_for(1));
    gated_backend::close_gate();
    std::vector<transfer_handle> handles;
    for (aligned_buffer& t : targets)
        handles.push_back(async_read(context, in, t, 0));
    gated_backend::wait_until_reached();
    const std::size_t cancelled = context.cancel_pending();
    gated_backend::open_gate();
    BOOST_TEST(cancelled == 9u);
    for (std::size_t i = 0; i < handles.size(); ++i) {
        std::error_code ec;
        const transfer_result r = handles[i].wait(ec);
        if (i == 0) {
            BOOST_TEST(!ec, ec.message());
            BOOST_TEST(r.bytes == size);
            BOOST_TEST(std::memcmp(targets[i].data(), expected.data(), size) == 0);
        } else {
            BOOST_TEST(ec == std::make_error_code(std::errc::operation_canceled), "transfer " << i);
        }
    }
}

BOOST_AUTO_TEST_CASE(an_empty_handle_is_ready_and_moves) {
    transfer_handle empty;
    BOOST_TEST(!empty.valid());
    BOOST_TEST(empty.ready());
    BOOST_TEST(empty.wait().bytes == 0u);
    temp_path path("async_move");
    nvmeio_test::spew(path.str(), std::string(block, 'y').data(), block);
    async_context context(options_for(1));
    file in(path.str(), open_mode::read);
    aligned_buffer target(block);
    transfer_handle first = async_read(context, in, target, 0);
    transfer_handle second = std::move(first);
    BOOST_TEST(!first.valid());
    BOOST_TEST(second.wait().bytes == block);
}

BOOST_AUTO_TEST_CASE(several_threads_submit_to_one_context) {
    temp_path path("async_threads");
    const std::size_t size = 4 * block;
    const auto expected = nvmeio_test::pattern(size, 17);
    nvmeio_test::spew(path.str(), expected.data(), size);
    file in(path.str(), open_mode::read);
    async_context context(options_for(2));
    std::vector<int> good(4, 0);
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
        submitters.emplace_back([&, t] {
            std::vector<aligned_buffer> targets;
            std::vector<transfer_handle> handles;
            for (int i = 0; i < 5; ++i) {
                targets.emplace_back(size);
                handles.push_back(async_read(context, in, targets.back(), 0));
            }
            for (int i = 0; i < 5; ++i) {
                good[t] += handles[i].wait().bytes == size &&
                           std::memcmp(targets[i].data(), expected.data(), size) == 0;
            }
        });
    }
    for (std::thread& s : submitters)
        s.join();
    for (int t = 0; t < 4; ++t)
        BOOST_TEST(good[t] == 5, "thread " << t);
}

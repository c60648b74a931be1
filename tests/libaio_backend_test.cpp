#define BOOST_TEST_MODULE libaio_backend
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/backend/libaio.hpp>
#include <nvmeio/detail/pin_record.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <vector>

#include "test_support.hpp"

using namespace nvmeio;

namespace {

constexpr std::size_t block = 4096;

// Reaps with min = 0 (which never waits, so it only sees what is already in the ring) until
// `want` completions arrived or two seconds passed.
int poll_ready(libaio_backend& backend, io_completion* out, std::size_t want) {
    std::size_t got = 0;
    for (int attempt = 0; attempt < 20000 && got < want; ++attempt) {
        const int rc = backend.reap(out + got, 0, want - got, nullptr);
        if (rc < 0) return rc;
        got += static_cast<std::size_t>(rc);
        if (got < want) {
            const timespec pause{0, 100'000};
            ::nanosleep(&pause, nullptr);
        }
    }
    return static_cast<int>(got);
}

}  // namespace

BOOST_AUTO_TEST_CASE(completions_are_read_from_the_kernel_ring_in_user_space) {
    // Every Linux since 2.6 maps the ring with the layout the backend knows; if a kernel ever
    // stops doing so, reaping still works (through io_getevents) but this says it loudly.
    // Under valgrind the backend reaps through io_getevents on purpose (see libaio.hpp).
    libaio_backend backend(4);
    BOOST_TEST(backend.reaps_in_user_space() == !NVMEIO_DETAIL_RUNNING_ON_VALGRIND(),
               "the kernel's AIO completion ring has an unknown layout: every reap is a syscall");
}

BOOST_AUTO_TEST_CASE(every_completion_is_reaped_once_and_in_place_as_the_ring_wraps_around) {
    // Far more requests than the ring has slots, reaped alternately from user space (min = 0)
    // and through io_getevents (min = 1), which share the ring's head.
    constexpr std::size_t blocks = 64;
    constexpr unsigned depth = 8;
    constexpr std::size_t requests = 3000;
    nvmeio_test::temp_path path("libaio_ring");
    const auto bytes = nvmeio_test::pattern(blocks * block, 11);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    file in(path.str(), open_mode::read);
    aligned_buffer slots(depth * block);
    libaio_backend backend(depth);

    std::vector<unsigned> times_seen(requests, 0);
    std::vector<unsigned> free_slots;
    for (unsigned i = 0; i < depth; ++i)
        free_slots.push_back(i);
    std::vector<std::size_t> request_in_slot(depth);
    std::size_t next = 0;
    std::size_t done = 0;
    bool from_user_space = true;
    while (done < requests) {
        std::vector<io_request> batch;
        while (!free_slots.empty() && next < requests) {
            const unsigned slot = free_slots.back();
            free_slots.pop_back();
            request_in_slot[slot] = next;
            batch.push_back({in.native_handle(), operation::read, slots.data() + slot * block,
                             block, (next % blocks) * block, (std::uint64_t{next} << 8) | slot});
            ++next;
        }
        std::size_t sent = 0;
        while (sent < batch.size()) {
            const int rc = backend.submit(batch.data() + sent, batch.size() - sent);
            BOOST_TEST_REQUIRE(rc > 0, "io_submit: " << rc);
            sent += static_cast<std::size_t>(rc);
        }
        io_completion completions[depth];
        int got;
        if (from_user_space) {
            got = poll_ready(backend, completions, 1);
            BOOST_TEST_REQUIRE(got == 1, "no completion seen within 2 s");
        } else {
            do {
                got = backend.reap(completions, 1, depth, nullptr);
            } while (got == -EINTR);
            BOOST_TEST_REQUIRE(got > 0, "io_getevents: " << got);
        }
        from_user_space = !from_user_space;
        for (int i = 0; i < got; ++i) {
            const io_completion& c = completions[i];
            const std::size_t request = c.user_data >> 8;
            const unsigned slot = static_cast<unsigned>(c.user_data & 0xFF);
            BOOST_TEST_REQUIRE(request < requests);
            BOOST_TEST_REQUIRE(slot < depth);
            BOOST_TEST_REQUIRE(request_in_slot[slot] == request);
            BOOST_TEST_REQUIRE(c.result == static_cast<std::int64_t>(block));
            ++times_seen[request];
            BOOST_TEST_REQUIRE(std::memcmp(slots.data() + slot * block,
                                           bytes.data() + (request % blocks) * block, block) == 0);
            free_slots.push_back(slot);
            ++done;
        }
    }
    for (std::size_t i = 0; i < requests; ++i)
        BOOST_TEST_REQUIRE(times_seen[i] == 1u, "request " << i);
    io_completion extra[1];
    BOOST_TEST(backend.reap(extra, 0, 1, nullptr) == 0);
}

// A request keeps its iocb until its completion is reaped (the event points back at it, and
// valgrind reads that iocb to learn which buffer a read filled), so the backend takes no more
// than the queue depth of unreaped requests, however many calls they came in.
BOOST_AUTO_TEST_CASE(
    requests_hold_their_iocb_until_reaped_so_unreaped_requests_never_pass_the_depth) {
    constexpr unsigned depth = 2;
    nvmeio_test::temp_path path("libaio_iocbs");
    const auto bytes = nvmeio_test::pattern(4 * block, 12);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    file in(path.str(), open_mode::read);
    aligned_buffer target(4 * block);
    libaio_backend backend(depth);
    auto request = [&](std::size_t i) {
        return io_request{
            in.native_handle(), operation::read, target.data() + i * block, block, i * block, i};
    };
    for (std::size_t i = 0; i < depth; ++i) {  // one call each: an iocb each
        const io_request r = request(i);
        BOOST_TEST_REQUIRE(backend.submit(&r, 1) == 1);
    }
    const io_request third = request(2);
    BOOST_TEST(backend.submit(&third, 1) == -EAGAIN);  // no iocb is free until a reap
    io_completion completions[depth];
    int got;
    do {
        got = backend.reap(completions, 1, depth, nullptr);
    } while (got == -EINTR);
    BOOST_TEST_REQUIRE(got >= 1);
    BOOST_TEST_REQUIRE(backend.submit(&third, 1) == 1);
    std::size_t reaped = static_cast<std::size_t>(got);
    while (reaped < 3) {
        do {
            got = backend.reap(completions, 1, depth, nullptr);
        } while (got == -EINTR);
        BOOST_TEST_REQUIRE(got >= 1);
        reaped += static_cast<std::size_t>(got);
    }
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), 3 * block) == 0);
}

BOOST_AUTO_TEST_CASE(a_child_after_fork_cannot_take_the_parents_completions) {
    // The child shares the mapping of the completion ring; reaping there must not consume it.
    nvmeio_test::temp_path path("libaio_fork");
    const auto bytes = nvmeio_test::pattern(block, 12);
    nvmeio_test::spew(path.str(), bytes.data(), block);
    file in(path.str(), open_mode::read);
    aligned_buffer target(block);
    libaio_backend backend(2);
    const io_request request{in.native_handle(), operation::read, target.data(), block, 0, 3};
    BOOST_TEST_REQUIRE(backend.submit(&request, 1) == 1);
    const timespec settle{0, 200'000'000};  // let the read complete into the ring
    ::nanosleep(&settle, nullptr);
    const pid_t child = ::fork();
    BOOST_TEST_REQUIRE(child >= 0);
    if (child == 0) {
        io_completion stolen[2];
        const int rc = backend.reap(stolen, 0, 2, nullptr);
        ::_exit(rc > 0 ? 1 : 0);
    }
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST_REQUIRE(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, "the child reaped the parent's completion");
    io_completion done{};
    const timespec wait{5, 0};
    int rc;
    do {
        rc = backend.reap(&done, 1, 1, &wait);
    } while (rc == -EINTR);
    BOOST_TEST_REQUIRE(rc == 1, "the parent's completion is gone");
    BOOST_TEST(done.user_data == 3u);
    BOOST_TEST(done.result == static_cast<std::int64_t>(block));
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), block) == 0);
}

BOOST_AUTO_TEST_CASE(reap_with_nothing_in_flight_returns_zero) {
    libaio_backend backend(2);
    io_completion done[2];
    const timespec short_wait{0, 1'000'000};
    BOOST_TEST(backend.reap(done, 0, 2, nullptr) == 0);
    BOOST_TEST(backend.reap(done, 1, 2, &short_wait) == 0);
}

BOOST_AUTO_TEST_CASE(errors_come_back_as_negative_errno_in_the_completion) {
    nvmeio_test::temp_path path("libaio_ebadf");
    nvmeio_test::spew(path.str(), "abcd", 4);
    file in(path.str(), open_mode::read);
    aligned_buffer source(block);
    std::memset(source.data(), 0x5A, block);
    libaio_backend backend(1);
    // A write on a read-only descriptor: the kernel answers EBADF at submission or through the
    // completion, depending on the kernel.
    io_request request{in.native_handle(), operation::write, source.data(), block, 0, 7};
    const int submitted = backend.submit(&request, 1);
    if (submitted < 0) {
        BOOST_TEST(submitted == -EBADF);
        return;
    }
    BOOST_TEST_REQUIRE(submitted == 1);
    io_completion done{};
    BOOST_TEST_REQUIRE(poll_ready(backend, &done, 1) == 1);
    BOOST_TEST(done.user_data == 7u);
    BOOST_TEST(done.result == -EBADF);
}

// Buffers moved through libaio (or nowhere) are never looked at by a ring that pins, so freeing
// them takes no lock (detail/pin_record.hpp); making them took none either (their record is a
// plain allocation).
BOOST_AUTO_TEST_CASE(buffers_moved_only_through_libaio_are_freed_without_a_lock) {
    nvmeio_test::temp_path path("libaio_no_pins");
    const std::size_t size = 16 * block;
    aio_context context({4, block});
    aligned_buffer source(size);
    aligned_buffer sink(size, 4096, {true, true, false});
    nvmeio_test::fill_pattern(source.data(), size, 12);
    file f(path.str(), open_mode::write);
    for (int pass = 0; pass < 2; ++pass) {  // moved again, as pin once would pin it
        BOOST_TEST(write(context, f, source, 0).bytes == size);
        BOOST_TEST(read(context, f, sink, 0).bytes == size);
    }
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 12));
    BOOST_TEST_REQUIRE(source.pins() != nullptr);
    BOOST_TEST(!source.pins()->looked_at());
    BOOST_TEST(!sink.pins()->looked_at());
    aligned_buffer moved(std::move(sink));
    BOOST_TEST(sink.pins() == nullptr);
    BOOST_TEST(!moved.pins()->looked_at());
}

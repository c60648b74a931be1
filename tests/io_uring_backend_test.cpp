#define BOOST_TEST_MODULE io_uring_backend
#include <boost/test/unit_test.hpp>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <string>
#include <vector>

#include "backend_support.hpp"
#include "loop_device.hpp"
#include "test_support.hpp"

using namespace nvmeio;

BOOST_AUTO_TEST_CASE(setup_refusal_message_names_the_reason_and_the_fallback) {
    const std::string text = detail::describe_io_uring_setup_failure(EPERM, 8);
    BOOST_TEST(text.find("queue_depth=8") != std::string::npos, text);
    BOOST_TEST(text.find("refuses io_uring") != std::string::npos, text);
    BOOST_TEST(text.find("libaio_backend") != std::string::npos, text);
    const std::string memory = detail::describe_io_uring_setup_failure(ENOMEM, 8);
    BOOST_TEST(memory.find("RLIMIT_MEMLOCK") != std::string::npos, memory);
}

BOOST_AUTO_TEST_CASE(support_probe_agrees_with_the_build) {
    std::error_code why;
    const bool supported = io_uring_supported(why);
    BOOST_TEST(supported == !why);
    if (!io_uring_available) BOOST_TEST(!supported);
}

#if NVMEIO_HAS_IO_URING

BOOST_AUTO_TEST_CASE(zero_queue_depth_is_rejected) {
    BOOST_CHECK_THROW(io_uring_backend backend(0), std::invalid_argument);
}

// The kernel answers a bare EINVAL; the message must say what the limit is.
BOOST_AUTO_TEST_CASE(queue_depth_above_the_kernel_limit_is_rejected_naming_the_limit) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    const unsigned limit = io_uring_backend::max_queue_depth();
    BOOST_TEST_REQUIRE(limit >= 4096u);   // 4096 before Linux 5.4, 32768 since
    { io_uring_backend deepest(limit); }  // the limit itself is accepted
    for (const unsigned depth : {limit + 1, 2 * limit, 4'000'000'000u}) {
        try {
            io_uring_backend backend(depth);
            BOOST_ERROR("queue depth " << depth << " accepted");
        } catch (const std::invalid_argument& e) {
            const std::string text = e.what();
            BOOST_TEST(text.find(std::to_string(depth)) != std::string::npos, text);
            BOOST_TEST(text.find("limit of " + std::to_string(limit)) != std::string::npos, text);
        }
    }
}

namespace {

// Makes io_uring_setup fail with EPERM in this process, as a container's seccomp profile does.
bool refuse_io_uring_setup() {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_kernel_refusing_io_uring_gives_a_clear_error_and_the_probe_says_no) {
    // In a child process, so that the filter stays there.
    const pid_t child = ::fork();
    BOOST_TEST_REQUIRE(child >= 0);
    if (child == 0) {
        if (!refuse_io_uring_setup()) ::_exit(10);
        std::error_code why;
        if (io_uring_supported(why)) ::_exit(11);
        if (why != std::error_code(EPERM, std::generic_category())) ::_exit(12);
        try {
            io_uring_backend backend(8);
            ::_exit(13);
        } catch (const io_error& e) {
            const std::string what = e.what();
            if (e.code() != std::error_code(EPERM, std::generic_category())) ::_exit(14);
            if (what.find("refuses io_uring") == std::string::npos) ::_exit(15);
            if (what.find("libaio_backend") == std::string::npos) ::_exit(16);
        } catch (...) {
            ::_exit(17);
        }
        ::_exit(0);
    }
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST_REQUIRE(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, "child check " << WEXITSTATUS(status) << " failed");
}

BOOST_AUTO_TEST_CASE(requests_complete_with_their_user_data_and_byte_counts) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("uring_raw");
    const std::size_t size = 4 * 4096;
    const auto bytes = nvmeio_test::pattern(size, 3);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    io_uring_backend backend(4);
    BOOST_TEST(backend.queue_depth() == 4u);
    io_request requests[4];
    for (unsigned i = 0; i < 4; ++i) {
        requests[i] = {in.native_handle(),      operation::read, target.data() + i * 4096, 4096,
                       std::uint64_t{i} * 4096, 100 + i};
    }
    BOOST_TEST(backend.submit(requests, 4) == 4);
    io_completion done[4];
    std::size_t got = 0;
    while (got < 4) {
        const int rc = backend.reap(done + got, 4 - got, 4 - got, nullptr);
        if (rc == -EINTR) continue;
        BOOST_TEST_REQUIRE(rc > 0);
        got += static_cast<std::size_t>(rc);
    }
    unsigned seen = 0;
    for (const io_completion& c : done) {
        BOOST_TEST(c.result == 4096);
        BOOST_TEST_REQUIRE((c.user_data >= 100 && c.user_data < 104));
        seen |= 1u << (c.user_data - 100);
    }
    BOOST_TEST(seen == 0xFu);
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), size) == 0);
}

// With COOP_TASKRUN the kernel posts a completion finished outside the task (in an interrupt,
// or by a loop device's worker thread) only when the task next enters the kernel. A reap that
// polls (min 0, as a wait with context_options::spin does) must see a finished request without
// waiting for an unrelated entry such as the next timer tick (4 ms at HZ=250): the ring asks the
// kernel to flag that work (TASKRUN_FLAG) and the reap enters when it is flagged. Each of 100
// O_DIRECT reads of a loop device (its worker completes them, in RAM speed) is polled for up to
// 1 ms; without the flag most are not seen in time. Without root the same runs on a regular
// file, where the completion interrupt often lands on the polling CPU and shows it less.
BOOST_AUTO_TEST_CASE(a_polling_reap_sees_a_finished_request_without_waiting_for_a_tick) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    const std::size_t size = 64 * 4096;
    const auto bytes = nvmeio_test::pattern(size, 4);
    nvmeio_test::loop_device device(size, 4096, 4);
    nvmeio_test::temp_path path("uring_poll");
    std::string target_path = device.path();
    if (target_path.empty()) {
        const std::string why = "polling reaps tested on a regular file only: " + device.why_not();
        if (::geteuid() == 0 && device.why_not().find("does not exist") == std::string::npos) {
            BOOST_ERROR(why);
        } else {
            nvmeio_test::skip(why);
        }
        nvmeio_test::spew(path.str(), bytes.data(), size);
        target_path = path.str();
    }
    file in(target_path, open_mode::read, direct_io::on);
    BOOST_TEST_REQUIRE(in.is_direct());
    aligned_buffer target(4096);
    io_uring_backend backend(1);
    const int reads = 100;
    int seen_polling = 0;
    for (int i = 0; i < reads; ++i) {
        const io_request r{in.native_handle(),
                           operation::read,
                           target.data(),
                           4096,
                           std::uint64_t(i % 64) * 4096,
                           7};
        BOOST_TEST_REQUIRE(backend.submit(&r, 1) == 1);
        io_completion done{};
        timespec start{}, now{};
        ::clock_gettime(CLOCK_MONOTONIC, &start);
        int rc = 0;
        do {
            rc = backend.reap(&done, 0, 1, nullptr);
            ::clock_gettime(CLOCK_MONOTONIC, &now);
        } while (rc == 0 &&
                 (now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec) <
                     1'000'000L);
        if (rc == 1) {
            ++seen_polling;
        } else {
            do {
                rc = backend.reap(&done, 1, 1, nullptr);
            } while (rc == -EINTR);
            BOOST_TEST_REQUIRE(rc == 1);
        }
        BOOST_TEST(done.result == 4096);
        BOOST_TEST(std::memcmp(target.data(), bytes.data() + (i % 64) * 4096, 4096) == 0);
    }
    BOOST_TEST_MESSAGE(seen_polling << " of " << reads << " reads of " << target_path
                                    << " seen by polling within 1 ms");
    BOOST_TEST(seen_polling >= reads * 4 / 5);
}

BOOST_AUTO_TEST_CASE(a_child_after_fork_cannot_touch_the_parents_ring) {
    // The child shares the rings' mappings: reaping there would take the parent's completion,
    // submitting or unregistering would act on the parent's ring.
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("uring_fork");
    const std::size_t size = 4096;
    const auto bytes = nvmeio_test::pattern(size, 4);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    file in(path.str(), open_mode::read);
    aligned_buffer target(size);
    io_uring_backend backend(2);
    std::vector<aligned_buffer> buffers;
    buffers.emplace_back(size);
    backend.register_buffers(std::move(buffers));
    const io_request request{in.native_handle(), operation::read, target.data(), size, 0, 6};
    BOOST_TEST_REQUIRE(backend.submit(&request, 1) == 1);
    const timespec settle{0, 200'000'000};  // let the read complete into the ring
    ::nanosleep(&settle, nullptr);
    const pid_t child = ::fork();
    BOOST_TEST_REQUIRE(child >= 0);
    if (child == 0) {
        io_completion stolen[2];
        if (backend.reap(stolen, 0, 2, nullptr) != -EINVAL) ::_exit(1);
        if (backend.submit(&request, 1) != -EINVAL) ::_exit(2);
        try {
            (void)backend.unregister_buffers();
            ::_exit(3);
        } catch (const io_error& e) {
            if (e.code().value() != EINVAL) ::_exit(4);
        }
        ::_exit(0);
    }
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST_REQUIRE(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, "child check " << WEXITSTATUS(status) << " failed");
    io_completion done{};
    const timespec wait{5, 0};
    int rc;
    do {
        rc = backend.reap(&done, 1, 1, &wait);
    } while (rc == -EINTR);
    BOOST_TEST_REQUIRE(rc == 1, "the parent's completion is gone");
    BOOST_TEST(done.user_data == 6u);
    BOOST_TEST(std::memcmp(target.data(), bytes.data(), size) == 0);
    BOOST_TEST(backend.unregister_buffers().size() == 1u);
}

BOOST_AUTO_TEST_CASE(reap_with_a_timeout_and_nothing_in_flight_returns_zero) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    io_uring_backend backend(2);
    io_completion done[2];
    const timespec short_wait{0, 1'000'000};
    BOOST_TEST(backend.reap(done, 1, 2, &short_wait) == 0);
    BOOST_TEST(backend.reap(done, 0, 2, nullptr) == 0);
}

BOOST_AUTO_TEST_CASE(errors_come_back_as_negative_errno_in_the_completion) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("uring_ebadf");
    nvmeio_test::spew(path.str(), "abcd", 4);
    file in(path.str(), open_mode::read);
    aligned_buffer target(4096);
    io_uring_backend backend(1);
    // A write on a read-only descriptor: the kernel answers EBADF through the completion.
    io_request request{in.native_handle(), operation::write, target.data(), 4096, 0, 7};
    BOOST_TEST(backend.submit(&request, 1) == 1);
    io_completion done{};
    int rc;
    do {
        rc = backend.reap(&done, 1, 1, nullptr);
    } while (rc == -EINTR);
    BOOST_TEST(rc == 1);
    BOOST_TEST(done.user_data == 7u);
    BOOST_TEST(done.result == -EBADF);
}

#endif

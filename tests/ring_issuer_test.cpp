#define BOOST_TEST_MODULE ring_issuer
#include <boost/test/unit_test.hpp>

#include <malloc.h>

#include <condition_variable>

#include <cstddef>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

// An io_uring ring serves one thread: it is set up SINGLE_ISSUER | DEFER_TASKRUN where the kernel
// allows, bound to the first thread that moves bytes through it. A context that later moves to
// another thread gets a plain ring there, with its registrations; memory freed on another thread
// is forgotten at once and let go by the ring's own thread.

#if NVMEIO_HAS_IO_URING

using namespace nvmeio;
using uring_context = basic_aio_context<io_uring_backend>;

namespace {

constexpr std::size_t block = 64 * 1024;
constexpr unsigned one_thread = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;

// Whether this kernel sets up a ring with `flags` (DEFER_TASKRUN: Linux 6.1).
bool kernel_takes(unsigned flags) {
    io_uring ring{};
    io_uring_params params{};
    params.flags = flags;
    if (::io_uring_queue_init_params(4, &ring, &params) < 0) return false;
    ::io_uring_queue_exit(&ring);
    return true;
}

// Runs `f` on a thread of its own and waits for it; what it throws is thrown here.
void on_another_thread(const std::function<void()>& f) {
    std::exception_ptr thrown;
    std::thread t([&] {
        try {
            f();
        } catch (...) {
            thrown = std::current_exception();
        }
    });
    t.join();
    if (thrown) std::rethrow_exception(thrown);
}

// Pages of this process pinned for the kernel, in KiB (io_uring counts its registered buffers
// there).
long pinned_kib() {
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        long value = 0;
        if (key == "VmPin:" && status >> value) return value;
    }
    return -1;
}

// Runs what it is given on one thread of its own, one job at a time.
class worker_thread {
  public:
    worker_thread() : thread_([this] { serve(); }) {}
    worker_thread(const worker_thread&) = delete;
    worker_thread& operator=(const worker_thread&) = delete;
    ~worker_thread() {
        run({});
        thread_.join();
    }

    // Runs `f` there (an empty one ends the thread) and waits for it.
    void run(std::function<void()> f) {
        std::unique_lock<std::mutex> lock(mutex_);
        job_ = std::move(f);
        posted_ = true;
        changed_.notify_all();
        changed_.wait(lock, [this] { return !posted_; });
        if (thrown_) std::rethrow_exception(std::exchange(thrown_, nullptr));
    }

  private:
    void serve() {
        for (;;) {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock, [this] { return posted_; });
            const bool last = !job_;
            if (job_) {
                try {
                    job_();
                } catch (...) {
                    thrown_ = std::current_exception();
                }
            }
            posted_ = false;
            changed_.notify_all();
            if (last) return;
        }
    }

    std::mutex mutex_;
    std::condition_variable changed_;
    std::function<void()> job_;
    bool posted_ = false;
    std::exception_ptr thrown_;
    std::thread thread_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_ring_serves_the_first_thread_that_moves_bytes_with_the_newest_flags) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("issuer_first");
    nvmeio_test::spew_pattern(path.str(), 8 * block, 51);
    file f(path.str(), open_mode::read);
    aligned_buffer sink(8 * block);
    uring_context context({4, block});
    const bool newest = kernel_takes(one_thread);
    // Made on this thread, bound on the worker's first transfer: the worker is the issuer.
    on_another_thread([&] {
        BOOST_TEST(read(context, f, sink, 0).bytes == 8 * block);
        BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), 8 * block, 51));
    });
    const unsigned flags = context.backend().setup_flags();
    if (newest) {
        BOOST_TEST((flags & one_thread) == one_thread);
    } else {
        BOOST_TEST_MESSAGE("this kernel refuses SINGLE_ISSUER | DEFER_TASKRUN: a plain ring");
        BOOST_TEST((flags & IORING_SETUP_DEFER_TASKRUN) == 0u);
    }
    BOOST_TEST((flags & IORING_SETUP_R_DISABLED) != 0u);  // made disabled, enabled by its issuer
}

BOOST_AUTO_TEST_CASE(turned_off_the_ring_serves_any_thread_from_the_start) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("issuer_off");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 52);
    file f(path.str(), open_mode::read);
    aligned_buffer sink(4 * block);
    context_options options{4, block};
    options.single_issuer = false;
    uring_context context(options);
    BOOST_TEST((context.backend().setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0u);
    BOOST_TEST(read(context, f, sink, 0).bytes == 4 * block);
    on_another_thread([&] { BOOST_TEST(read(context, f, sink, 0).bytes == 4 * block); });
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), 4 * block, 52));
    BOOST_TEST((context.backend().setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0u);
}

// The context moves between threads, one at a time, carrying a registered file, a buffer
// registered by hand and pinned memory: exact bytes on every thread, and the registrations
// still serve requests after each move.
BOOST_AUTO_TEST_CASE(a_context_that_moves_to_another_thread_keeps_its_registrations) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path read_path("issuer_move_r");
    nvmeio_test::temp_path write_path("issuer_move_w");
    const std::size_t size = 16 * block;
    const std::size_t requests = size / block;
    nvmeio_test::spew_pattern(read_path.str(), size, 53);
    uring_context context({4, block});
    std::vector<file> files;
    files.emplace_back(read_path.str(), open_mode::read);
    context.backend().register_files(std::move(files));
    std::vector<aligned_buffer> by_hand;
    by_hand.emplace_back(size);
    context.backend().register_buffers(std::move(by_hand));
    const file& source = context.backend().registered_file(0);
    const registered_buffer mine = context.backend().registered_buffer_at(0);
    aligned_buffer pinned(size);
    file out(write_path.str(), open_mode::write);
    auto round = [&](int n) {
        const registration_use before = context.backend().registered_use();
        std::memset(mine.data, 0, size);
        BOOST_TEST(read(context, source, nvmeio::memory(mine.data, size), 0).bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(mine.data, size, 53), "round " << n);
        for (int pass = 0; pass < 2; ++pass) {  // pinned on the second pass of the first round
            std::memset(pinned.data(), 0, size);
            BOOST_TEST(read(context, source, pinned, 0).bytes == size);
            BOOST_TEST(nvmeio_test::holds_pattern(pinned.data(), size, 53),
                       "round " << n << " pass " << pass);
        }
        BOOST_TEST(write(context, out, pinned, 0).bytes == size);
        const registration_use after = context.backend().registered_use();
        BOOST_TEST(after.fixed_file_requests - before.fixed_file_requests == 3 * requests,
                   "round " << n);
        // The buffer registered by hand, and the pinned one from its second pass on.
        BOOST_TEST(after.fixed_buffer_requests - before.fixed_buffer_requests >= 3 * requests,
                   "round " << n);
    };
    round(0);  // binds the ring to this thread
    if (kernel_takes(one_thread))
        BOOST_TEST((context.backend().setup_flags() & one_thread) == one_thread);
    on_another_thread([&] { round(1); });
    BOOST_TEST((context.backend().setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0u);
    on_another_thread([&] { round(2); });
    round(3);
    BOOST_TEST(nvmeio_test::slurp(write_path.str()) == nvmeio_test::pattern(size, 53));
    const std::vector<aligned_buffer> back = context.backend().unregister_buffers();
    BOOST_TEST(back.size() == 1u);
    BOOST_TEST(context.backend().unregister_files().size() == 1u);
}

// Registering by hand on a thread other than the one the ring serves moves the ring there.
BOOST_AUTO_TEST_CASE(registering_on_another_thread_moves_the_ring_there) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("issuer_register");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 56);
    uring_context context({4, block});
    aligned_buffer sink(4 * block);
    file plain(path.str(), open_mode::read);
    BOOST_TEST(read(context, plain, sink, 0).bytes == 4 * block);  // binds
    on_another_thread([&] {
        std::vector<file> files;
        files.emplace_back(path.str(), open_mode::read);
        context.backend().register_files(std::move(files));
        std::memset(sink.data(), 0, 4 * block);
        BOOST_TEST(read(context, context.backend().registered_file(0), sink, 0).bytes == 4 * block);
        BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), 4 * block, 56));
    });
    BOOST_TEST(context.backend().registered_use().fixed_file_requests == 4u);
    BOOST_TEST(context.backend().unregister_files().size() == 1u);  // from this thread again
    BOOST_TEST(read(context, plain, sink, 0).bytes == 4 * block);
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), 4 * block, 56));
}

// A ring that serves a worker thread cannot change its table from the thread that frees a buffer
// it pinned: the slot is forgotten at once (no request reaches the old pages), and the worker lets
// the pages go before its next transfer.
BOOST_AUTO_TEST_CASE(memory_freed_on_another_thread_is_forgotten_at_once_and_let_go_later) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path first_path("issuer_free_a");
    nvmeio_test::temp_path second_path("issuer_free_b");
    const bool addresses_come_back = !nvmeio_test::sanitized;
    if (addresses_come_back) BOOST_TEST_REQUIRE(::mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    const std::size_t size = 8 << 20;
    nvmeio_test::spew_pattern(first_path.str(), size, 54);
    nvmeio_test::spew_pattern(second_path.str(), size, 55);
    file first(first_path.str(), open_mode::read);
    file second(second_path.str(), open_mode::read);
    uring_context context({8, 1 << 20});
    worker_thread worker;
    auto a = std::make_unique<aligned_buffer>(size);
    const std::byte* const old_address = a->data();
    worker.run([&] {
        for (int pass = 0; pass < 2; ++pass)  // the second pins it
            BOOST_TEST(read(context, first, *a, 0).bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(a->data(), size, 54));
    });
    BOOST_TEST_REQUIRE(context.backend().registered_use().pinned == 1u);
    const long held = pinned_kib();
    BOOST_TEST(held >= static_cast<long>(size >> 10));
    a.reset();                                                      // on this thread
    BOOST_TEST(context.backend().registered_use().unpinned == 1u);  // forgotten at once
    BOOST_TEST(pinned_kib() == held);  // but only the ring's own thread can let the pages go
    aligned_buffer b(size);
    if (addresses_come_back) {
        BOOST_TEST_REQUIRE(b.data() == old_address, "malloc did not give the address back");
    } else {
        nvmeio_test::skip(
            "a reused address not tested: this build's allocator never reuses one "
            "(bytes checked only)");
    }
    std::vector<std::byte, aligned_allocator<std::byte>> elsewhere(block);
    worker.run([&] {
        // Memory nvmeio did not allocate: nothing pinned, but the ring's thread lets go first.
        BOOST_TEST(read(context, second, elsewhere, 0).bytes == block);
        BOOST_TEST(pinned_kib() <= held - static_cast<long>(size >> 10));
        for (int pass = 0; pass < 2; ++pass) {  // through the old slot, were it left; then pinned
            std::memset(b.data(), 0, size);
            BOOST_TEST(read(context, second, b, 0).bytes == size);
            BOOST_TEST(nvmeio_test::holds_pattern(b.data(), size, 55), "pass " << pass);
        }
    });
    BOOST_TEST(context.backend().registered_use().pinned == 2u);
    if (kernel_takes(one_thread))  // the worker kept its ring throughout
        BOOST_TEST((context.backend().setup_flags() & one_thread) == one_thread);
}

#else

BOOST_AUTO_TEST_CASE(this_build_has_no_io_uring) {
    BOOST_TEST(!io_uring_available);
}

#endif

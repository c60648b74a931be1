#define BOOST_TEST_MODULE pin_once
#include <boost/test/unit_test.hpp>

#include <linux/capability.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/async.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/parallel_context.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

// Pin once: an io_uring context registers the memory nvmeio allocated when it moves bytes
// through it again, lets go of it before it is freed, and leaves other memory alone.

#if NVMEIO_HAS_IO_URING

using namespace nvmeio;
using uring_context = basic_aio_context<io_uring_backend>;

namespace {

constexpr std::size_t block = 64 * 1024;

// Sanitizers' allocators hold freed memory back, so the same address never comes again there.
constexpr bool addresses_come_back = !nvmeio_test::sanitized;

}  // namespace

BOOST_AUTO_TEST_CASE(an_aligned_buffer_is_pinned_when_it_moves_again_and_stays_pinned) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_first");
    const std::size_t size = 16 * block;
    uring_context context({8, block});
    aligned_buffer source(size);
    aligned_buffer sink(size);
    nvmeio_test::fill_pattern(source.data(), size, 31);
    file f(path.str(), open_mode::write);
    BOOST_TEST(write(context, f, source, 0).bytes == size);
    BOOST_TEST(read(context, f, sink, 0).bytes == size);
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 31));
    const registration_use first = context.backend().registered_use();
    BOOST_TEST(first.pinned == 0u);  // used once: nothing pinned, costs what it did unpinned
    BOOST_TEST(first.fixed_buffer_requests == 0u);
    std::memset(sink.data(), 0, size);
    BOOST_TEST(read(context, f, sink, 0).bytes == size);
    BOOST_TEST(write(context, f, source, 0).bytes == size);
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 31));
    const registration_use second = context.backend().registered_use();
    BOOST_TEST(second.pinned == 2u);  // one piece of each buffer, at its first request
    BOOST_TEST(second.fixed_buffer_requests == 32u);  // 16 requests each way, every one fixed
    BOOST_TEST(second.pin_refused == 0);
    BOOST_TEST(read(context, f, sink, 0).bytes == size);
    const registration_use third = context.backend().registered_use();
    BOOST_TEST(third.pinned == 2u);  // nothing pinned twice
    BOOST_TEST(third.fixed_buffer_requests == 48u);
    BOOST_TEST(nvmeio_test::slurp(path.str()) == nvmeio_test::pattern(size, 31));
}

BOOST_AUTO_TEST_CASE(memory_nvmeio_did_not_allocate_stays_unpinned) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_foreign");
    const std::size_t size = 8 * block;
    nvmeio_test::spew_pattern(path.str(), size, 32);
    uring_context context({4, block});
    file f(path.str(), open_mode::read);
    std::vector<std::byte, aligned_allocator<std::byte>> vector(size);
    void* mapped =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BOOST_TEST_REQUIRE(mapped != MAP_FAILED);
    for (int pass = 0; pass < 2; ++pass) {  // a second pass would pin nvmeio's memory
        BOOST_TEST(read(context, f, vector, 0).bytes == size);
        BOOST_TEST(read(context, f, nvmeio::memory(mapped, size), 0).bytes == size);
    }
    BOOST_TEST(nvmeio_test::holds_pattern(vector.data(), size, 32));
    BOOST_TEST(nvmeio_test::holds_pattern(mapped, size, 32));
    ::munmap(mapped, size);
    const registration_use use = context.backend().registered_use();
    BOOST_TEST(use.pinned == 0u);
    BOOST_TEST(use.fixed_buffer_requests == 0u);
}

// Pinning follows the view, not the address: the same aligned_buffer described by a bare pointer
// is never pinned (and its record never looked at), a view that names another buffer's record is
// not trusted, and a view made from the buffer pins it on its second pass.
BOOST_AUTO_TEST_CASE(only_a_view_made_from_the_buffer_pins_it) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_view");
    const std::size_t size = 8 * block;
    nvmeio_test::spew_pattern(path.str(), size, 43);
    uring_context context({4, block});
    file f(path.str(), open_mode::read);
    aligned_buffer sink(size);
    aligned_buffer other(size);
    for (int pass = 0; pass < 3; ++pass) {
        std::memset(sink.data(), 0, size);
        BOOST_TEST(read(context, f, nvmeio::memory(sink.data(), size), 0).bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 43));
        std::memset(sink.data(), 0, size);
        BOOST_TEST(read(context, f, mutable_memory(sink.data(), size, other.pins()), 0).bytes ==
                   size);
        BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 43));
    }
    BOOST_TEST(!sink.pins()->looked_at());
    BOOST_TEST(context.backend().registered_use().pinned == 0u);
    BOOST_TEST(context.backend().registered_use().fixed_buffer_requests == 0u);
    for (int pass = 0; pass < 2; ++pass)
        BOOST_TEST(read(context, f, nvmeio::memory(sink).first(size), 0).bytes == size);
    BOOST_TEST(sink.pins()->looked_at());
    BOOST_TEST(context.backend().registered_use().pinned == 1u);
}

// The record moves with the memory: a pinned buffer handed to another owner is let go when that
// owner frees it.
BOOST_AUTO_TEST_CASE(a_pinned_buffer_moved_to_another_owner_is_let_go_when_that_owner_frees_it) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_moved");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 44);
    uring_context context({4, block});
    file f(path.str(), open_mode::read);
    aligned_buffer first(4 * block);
    for (int pass = 0; pass < 2; ++pass)
        BOOST_TEST(read(context, f, first, 0).bytes == 4 * block);
    BOOST_TEST_REQUIRE(context.backend().registered_use().pinned == 1u);
    auto owner = std::make_unique<aligned_buffer>(std::move(first));
    BOOST_TEST(first.pins() == nullptr);
    std::memset(owner->data(), 0, 4 * block);
    BOOST_TEST(read(context, f, *owner, 0).bytes == 4 * block);  // still pinned, still right
    BOOST_TEST(nvmeio_test::holds_pattern(owner->data(), 4 * block, 44));
    BOOST_TEST(context.backend().registered_use().fixed_buffer_requests == 8u);
    owner.reset();
    BOOST_TEST(context.backend().registered_use().unpinned == 1u);
}

BOOST_AUTO_TEST_CASE(turned_off_it_leaves_every_request_plain) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_off");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 33);
    context_options options{4, block};
    options.pin_once = false;
    uring_context context(options);
    file f(path.str(), open_mode::read);
    aligned_buffer sink(4 * block);
    BOOST_TEST(read(context, f, sink, 0).bytes == 4 * block);
    BOOST_TEST(read(context, f, sink, 0).bytes == 4 * block);
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), 4 * block, 33));
    BOOST_TEST(context.backend().registered_use().pinned == 0u);
    BOOST_TEST(context.backend().registered_use().fixed_buffer_requests == 0u);
}

// The stale registration this design must never leave: memory freed and allocated again at the
// same address, moved through the ring that pinned the old memory.
BOOST_AUTO_TEST_CASE(memory_freed_and_allocated_again_at_the_same_address_gets_its_own_bytes) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path first_path("pin_stale_a");
    nvmeio_test::temp_path second_path("pin_stale_b");
    nvmeio_test::temp_path written_path("pin_stale_c");
    // Large buffers that malloc maps and unmaps (a fixed threshold stops glibc from raising its
    // own after the first free), so the memory at the old address is new pages.
    if (addresses_come_back) BOOST_TEST_REQUIRE(::mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
    const std::size_t size = 8 << 20;
    nvmeio_test::spew_pattern(first_path.str(), size, 34);
    nvmeio_test::spew_pattern(second_path.str(), size, 35);
    uring_context context({8, 1 << 20});
    file first(first_path.str(), open_mode::read);
    file second(second_path.str(), open_mode::read);

    const std::byte* old_address = nullptr;
    {
        aligned_buffer a(size);
        old_address = a.data();
        BOOST_TEST(read(context, first, a, 0).bytes == size);
        BOOST_TEST(read(context, first, a, 0).bytes == size);  // pins it
        BOOST_TEST(nvmeio_test::holds_pattern(a.data(), size, 34));
        BOOST_TEST(context.backend().registered_use().pinned == 1u);
    }
    BOOST_TEST(context.backend().registered_use().unpinned == 1u);  // let go before the free
    aligned_buffer b(size);
    if (addresses_come_back) {
        BOOST_TEST_REQUIRE(b.data() == old_address, "malloc did not give the address back");
    } else {
        nvmeio_test::skip(
            "a reused address not tested: this build's allocator never reuses one "
            "(bytes checked only)");
    }
    for (int pass = 0; pass < 2; ++pass) {  // through the old slot, were it left; then pinned
        std::memset(b.data(), 0, size);
        BOOST_TEST(read(context, second, b, 0).bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(b.data(), size, 35), "pass " << pass);
    }
    file written(written_path.str(), open_mode::write);
    BOOST_TEST(write(context, written, b, 0).bytes == size);
    BOOST_TEST(nvmeio_test::slurp(written_path.str()) == nvmeio_test::pattern(size, 35));
    BOOST_TEST(context.backend().registered_use().pinned == 2u);
}

BOOST_AUTO_TEST_CASE(a_buffer_may_outlive_the_rings_that_pinned_it_and_the_other_way_round) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_lifetimes");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 36);
    file f(path.str(), open_mode::read);
    aligned_buffer kept(4 * block);
    {
        uring_context brief({4, block});
        BOOST_TEST(read(brief, f, kept, 0).bytes == 4 * block);
        BOOST_TEST(read(brief, f, kept, 0).bytes == 4 * block);
        BOOST_TEST(brief.backend().registered_use().pinned == 1u);
    }  // the ring goes first: freeing `kept` later must not reach it
    uring_context lasting({4, block});
    {
        aligned_buffer brief(4 * block);
        BOOST_TEST(read(lasting, f, brief, 0).bytes == 4 * block);
        BOOST_TEST(read(lasting, f, brief, 0).bytes == 4 * block);
        BOOST_TEST(nvmeio_test::holds_pattern(brief.data(), 4 * block, 36));
    }
    BOOST_TEST(read(lasting, f, kept, 0).bytes == 4 * block);
    BOOST_TEST(nvmeio_test::holds_pattern(kept.data(), 4 * block, 36));
    BOOST_TEST(lasting.backend().registered_use().unpinned == 1u);
}

BOOST_AUTO_TEST_CASE(every_worker_of_a_parallel_context_pins_with_its_own_ring) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_parallel");
    const std::size_t size = 64 * block;
    nvmeio_test::spew_pattern(path.str(), size, 37);
    basic_parallel_context<io_uring_backend> context({2, {4, block}, block});
    file f(path.str(), open_mode::read);
    // Each worker's counts, read by one job per worker, held until both have started.
    auto each_worker = [&context] {
        std::mutex m;
        std::condition_variable started;
        unsigned arrived = 0;
        std::vector<registration_use> seen;
        context.run(2, [&](std::size_t, basic_aio_context<io_uring_backend>& worker) {
            std::unique_lock<std::mutex> lock(m);
            ++arrived;
            started.notify_all();
            started.wait(lock, [&] { return arrived == 2; });
            seen.push_back(worker.backend().registered_use());
        });
        return seen;
    };
    aligned_buffer sink(size);
    // From the second pass on, a worker pins the buffer with its first request. Which worker
    // takes which half is the pool's choice, and one may take both halves of a pass: passes go
    // on (up to 8) until both have had a pass after the first.
    std::vector<registration_use> seen;
    for (int pass = 0; pass < 8; ++pass) {
        std::memset(sink.data(), 0, size);
        BOOST_TEST(transfer(context, f, operation::read, sink, 0).bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 37), "pass " << pass);
        seen = each_worker();
        if (pass > 0 && seen.size() == 2 && seen[0].pinned != 0 && seen[1].pinned != 0) break;
    }
    BOOST_TEST_REQUIRE(seen.size() == 2u);
    for (const registration_use& use : seen) {
        BOOST_TEST(use.pinned == 1u);
        BOOST_TEST(use.fixed_buffer_requests >= 16u);  // at least half of one pass, 32 requests
    }
}

BOOST_AUTO_TEST_CASE(an_async_context_moves_exact_bytes_through_buffers_freed_and_made_again) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_async");
    const std::size_t size = 4 << 20;
    nvmeio_test::spew_pattern(path.str(), size, 38);
    basic_async_context<io_uring_backend> context({2, {8, 1 << 20}});
    file f(path.str(), open_mode::read);
    for (int round = 0; round < 6; ++round) {
        aligned_buffer sink(size);
        for (int pass = 0; pass < 2; ++pass) {  // the second pins it
            std::memset(sink.data(), 0, size);
            BOOST_TEST(context.submit(f, operation::read, sink, 0).wait().bytes == size);
            BOOST_TEST(nvmeio_test::holds_pattern(sink.data(), size, 38),
                       "round " << round << " pass " << pass);
        }
    }
}

BOOST_AUTO_TEST_CASE(a_batch_keeps_its_staging_slots_pinned_for_the_next_batch) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_batch");
    const std::size_t size = 16 * block;
    nvmeio_test::spew_pattern(path.str(), size, 39);
    uring_context context({8, block});
    file f(path.str(), open_mode::read);
    std::vector<unsigned char> storage(size + 1);
    unsigned char* const sink = storage.data() + 1;  // off any alignment: every byte bounces
    std::vector<batch_request> requests;
    for (std::size_t at = 0; at < size; at += 2 * block)
        requests.push_back({nvmeio::memory(sink + at, 2 * block), at});
    batch_options options;
    for (int round = 0; round < 3; ++round) {
        std::memset(sink, 0, size);
        const batch_outcome outcome = read_batch(context, f, requests, options);
        BOOST_TEST(outcome.bounced_bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(sink, size, 39));
    }
    const registration_use use = context.backend().registered_use();
    BOOST_TEST(use.pinned == 1u);  // the staging slots, on the second batch, kept for the third
    BOOST_TEST(use.unpinned == 0u);
    BOOST_TEST(use.fixed_buffer_requests >= 2 * 16u);
}

// Threads allocating, moving and freeing buffers through their own rings while one buffer pinned
// by every ring is freed under them: exact bytes throughout (run under TSan by test.sh).
BOOST_AUTO_TEST_CASE(threads_pinning_and_freeing_at_once_keep_exact_bytes) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_threads");
    const std::size_t size = 2 << 20;
    nvmeio_test::spew_pattern(path.str(), size, 40);
    constexpr int threads = 3;
    constexpr int rounds = 40;
    auto shared = std::make_unique<aligned_buffer>(threads * block);
    std::atomic<int> failures{0};
    std::atomic<int> ready{0};
    std::atomic<bool> freed{false};
    std::vector<std::thread> workers;
    std::vector<registration_use> uses(threads);
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            uring_context context({4, block});
            file f(path.str(), open_mode::read);
            // Pin the shared buffer in this ring too, then let the main thread free it. Each
            // thread moves its own block: the buffer is pinned once the bytes moved through all
            // rings cover the span moved so far, which takes this thread two to four reads,
            // depending on how the others' first reads fall in between.
            for (int pass = 0; pass < 8 && context.backend().registered_use().pinned == 0; ++pass) {
                if (read(context, f, nvmeio::memory(*shared).slice(t * block, block), 0).bytes !=
                    block)
                    ++failures;
            }
            ++ready;
            for (int r = 0; r < rounds; ++r) {
                const std::size_t length = block * static_cast<std::size_t>(1 + (r + t) % 8);
                aligned_buffer sink(length);
                const std::uint64_t offset = static_cast<std::uint64_t>(r % 16) * block;
                const auto expected = nvmeio_test::pattern(size, 40);
                for (int pass = 0; pass < 2; ++pass) {
                    std::memset(sink.data(), 0, length);
                    if (read(context, f, sink, offset).bytes != length) ++failures;
                    if (std::memcmp(sink.data(), expected.data() + offset, length) != 0) ++failures;
                }
            }
            while (!freed.load())
                std::this_thread::yield();
            uses[t] = context.backend().registered_use();
        });
    }
    while (ready.load() < threads)
        std::this_thread::yield();
    shared.reset();  // unpins it from every ring, whatever they are doing
    freed = true;
    for (std::thread& w : workers)
        w.join();
    BOOST_TEST(failures.load() == 0);
    for (const registration_use& use : uses) {
        BOOST_TEST(use.pinned == rounds + 1u);
        BOOST_TEST(use.unpinned == rounds + 1u);  // every round's buffer and the shared one
    }
}

// Stops `CAP_IPC_LOCK` from exempting this process from RLIMIT_MEMLOCK (root has it).
bool drop_ipc_lock() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) return false;
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    return ::syscall(SYS_capset, &header, data) == 0;
}

BOOST_AUTO_TEST_CASE(a_refused_pin_leaves_requests_plain_and_is_said_once) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_refused");
    nvmeio_test::temp_path said("pin_refused_stderr");
    const std::size_t size = 2 << 20;
    nvmeio_test::spew_pattern(path.str(), size, 41);
    const pid_t child = ::fork();
    BOOST_TEST_REQUIRE(child >= 0);
    if (child == 0) {
        // In the child: 512 KiB may be locked, and 2 MiB buffers are moved. The limit is
        // counted per user, so it leaves room for the rings (which Linux 6.13+ counts there too)
        // of other such children running at the same time.
        if (!drop_ipc_lock()) ::_exit(10);
        const rlimit small{512 << 10, 512 << 10};
        if (::setrlimit(RLIMIT_MEMLOCK, &small) != 0) ::_exit(11);
        if (std::freopen(said.str().c_str(), "w", stderr) == nullptr) ::_exit(12);
        try {
            uring_context context({8, block});
            file f(path.str(), open_mode::read);
            for (int round = 0; round < 3; ++round) {
                aligned_buffer sink(size);
                for (int pass = 0; pass < 2; ++pass) {  // the second tries to pin
                    if (read(context, f, sink, 0).bytes != size) ::_exit(13);
                    if (!nvmeio_test::holds_pattern(sink.data(), size, 41)) ::_exit(14);
                }
            }
            uring_context other({8, block});
            aligned_buffer sink(size);
            for (int pass = 0; pass < 2; ++pass) {  // refused too, and not said again
                if (read(other, f, sink, 0).bytes != size) ::_exit(15);
            }
            const registration_use use = context.backend().registered_use();
            if (use.pin_refused != ENOMEM) ::_exit(16);
            if (use.pinned != 0 || use.fixed_buffer_requests != 0) ::_exit(17);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "child: %s\n", e.what());
            std::fflush(stderr);
            ::_exit(18);
        }
        std::fflush(stderr);
        ::_exit(0);
    }
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST_REQUIRE(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, "child check " << WEXITSTATUS(status) << " failed");
    const auto text = nvmeio_test::slurp(said.str());
    const std::string message(text.begin(), text.end());
    BOOST_TEST_MESSAGE("stderr: " << message);
    std::size_t lines = 0;
    for (std::size_t at = message.find("nvmeio: io_uring did not pin"); at != std::string::npos;
         at = message.find("nvmeio: io_uring did not pin", at + 1))
        ++lines;
    BOOST_TEST(lines == 1u, message);
    BOOST_TEST(nvmeio_test::contains(message, "RLIMIT_MEMLOCK"), message);
}

BOOST_AUTO_TEST_CASE(a_child_after_fork_freeing_a_buffer_leaves_the_parents_ring_alone) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_fork");
    nvmeio_test::spew_pattern(path.str(), 4 * block, 42);
    uring_context context({4, block});
    file f(path.str(), open_mode::read);
    auto sink = std::make_unique<aligned_buffer>(4 * block);
    BOOST_TEST(read(context, f, *sink, 0).bytes == 4 * block);
    BOOST_TEST(read(context, f, *sink, 0).bytes == 4 * block);
    BOOST_TEST_REQUIRE(context.backend().registered_use().pinned == 1u);
    const pid_t child = ::fork();
    BOOST_TEST_REQUIRE(child >= 0);
    if (child == 0) {
        sink.reset();  // the child's copy only: the parent's ring must keep its slot
        ::_exit(0);
    }
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST(WIFEXITED(status));
    std::memset(sink->data(), 0, 4 * block);
    BOOST_TEST(read(context, f, *sink, 0).bytes == 4 * block);
    BOOST_TEST(nvmeio_test::holds_pattern(sink->data(), 4 * block, 42));
    BOOST_TEST(context.backend().registered_use().unpinned == 0u);
    BOOST_TEST(context.backend().registered_use().fixed_buffer_requests == 8u);
}

#else

BOOST_AUTO_TEST_CASE(this_build_has_no_io_uring_so_nothing_is_pinned) {
    nvmeio_test::skip("pin once not tested: it is io_uring's, and NVMEIO_HAS_IO_URING is 0");
}

#endif

// A record locked by a parent's thread at the fork is left alone in the child: freeing the
// buffer there neither waits for a thread the child does not have nor reads a half-changed list.
BOOST_AUTO_TEST_CASE(a_child_does_not_wait_for_a_record_its_parent_held_locked_at_the_fork) {
    struct pinner final : nvmeio::detail::memory_pinner {
        void unpin(nvmeio::detail::pin_record&) noexcept override {
            ::_exit(21);
        }  // never in the child
    } ring;
    nvmeio::aligned_buffer buffer(block);
    nvmeio::detail::pin_record& record = *buffer.pins();
    std::atomic<bool> inside{false};
    std::atomic<bool> leave{false};
    std::thread holder([&] {
        (void)record.pin(ring, [&](std::vector<nvmeio::detail::piece_use>&) {
            inside = true;
            while (!leave.load())
                std::this_thread::yield();
            return true;  // pinned: the ring is named, so a free must reach it
        });
    });
    while (!inside.load())
        std::this_thread::yield();
    const pid_t child = ::fork();  // with the record locked by `holder`
    if (child == 0) {
        ::alarm(10);  // a wait for the lock would end here, with SIGALRM
        { nvmeio::aligned_buffer gone(std::move(buffer)); }  // frees it
        ::_exit(0);
    }
    leave = true;
    holder.join();
    BOOST_TEST_REQUIRE(child > 0);
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST(WIFEXITED(status), "the child was killed by signal " << WTERMSIG(status));
    BOOST_TEST(WEXITSTATUS(status) == 0);
    record.forget(ring);  // the parent's buffer goes without calling the test's pinner
}

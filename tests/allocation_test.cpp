#define BOOST_TEST_MODULE allocation
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <memory>
#include <new>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/strategy.hpp>

#include "backend_support.hpp"
#include "test_support.hpp"

using namespace nvmeio;

// This program counts its heap allocations: every operator new of this thread. It is not run
// under valgrind, which replaces the allocator itself. (GCC at -O3
// inlines these replacements and then takes their malloc/free pairing for a mismatch.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
thread_local std::size_t allocations = 0;
thread_local std::size_t fail_at = 0;  // the allocation that throws std::bad_alloc; 0 for none
}  // namespace

void* operator new(std::size_t size) {
    if (++allocations == fail_at) throw std::bad_alloc();
    if (void* p = std::malloc(size != 0 ? size : 1)) return p;
    throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t alignment) {
    if (++allocations == fail_at) throw std::bad_alloc();
    const auto a = static_cast<std::size_t>(alignment);
    if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

// The engine keeps its working memory in the context: once a context has run a transfer, the
// next one of the same shape allocates nothing (at depth 1 the allocations were a third of the
// instructions of a call); io_uring's pinning (which allocates its bookkeeping) is done by the
// second. Both strategies and submit modes, both directions. (A ragged end goes
// through file.hpp's synchronous path, which allocates a one-unit bounce buffer per call.)
BOOST_AUTO_TEST_CASE_TEMPLATE(a_transfer_in_steady_state_allocates_nothing, TestType,
                              nvmeio_test::backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    nvmeio_test::temp_path path("steady");
    const std::size_t size = 64 * 4096;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 4).data(), size);
    basic_aio_context<TestType> context({8, 16384});
    file f(path.str(), open_mode::read_write);
    BOOST_TEST_REQUIRE(f.is_direct());  // O_DIRECT on the build tree
    aligned_buffer buffer(size);
    for (const transfer_config& config : nvmeio_test::every_config()) {
        for (const operation op : {operation::read, operation::write}) {
            // The first use, and the second, in which an io_uring ring pins the buffer.
            for (int use = 0; use < 2; ++use)
                (void)transfer(context, f, op, buffer, 0, config);
            const std::size_t before = allocations;
            const transfer_result again = transfer(context, f, op, buffer, 0, config);
            const std::size_t made = allocations - before;
            BOOST_TEST(again.bytes == size);
            BOOST_TEST(made == 0u, made << " allocations, " << to_string(config.strategy) << "/"
                                        << to_string(config.submit) << " " << to_string(op));
        }
    }
}

#if NVMEIO_HAS_IO_URING
// Pin once's bookkeeping allocates on a buffer's second pass. Each of those allocations fails in
// turn: the pass goes plain or throws std::bad_alloc, and in no case does the ring keep the
// buffer registered once it is freed (a later buffer at that address would read into the freed
// pages through the stale slot).
BOOST_AUTO_TEST_CASE(a_failed_allocation_while_pinning_leaves_no_registration_behind) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("pin_oom");
    const std::size_t size = 1 << 20;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 5).data(), size);
    file f(path.str(), open_mode::read);
    bool reached_end = false;
    std::uint64_t pinned = 0;
    for (std::size_t n = 1; n < 64 && !reached_end; ++n) {
        // A new ring each time, so that allocation n of the pass is the same one each time.
        basic_aio_context<io_uring_backend> context({8, 256 << 10});
        auto buffer = std::make_unique<aligned_buffer>(size);
        BOOST_TEST_REQUIRE(read(context, f, *buffer, 0).bytes == size);  // the first pass
        fail_at = allocations + n;
        try {
            (void)read(context, f, *buffer, 0);  // pins, unless allocation n fails
        } catch (const std::bad_alloc&) {
        }
        reached_end = allocations < fail_at;  // the pass needed fewer than n allocations
        fail_at = 0;
        const std::byte* const old = buffer->data();
        buffer.reset();
        BOOST_TEST(!context.backend().registers(old, size), "allocation " << n);
        pinned += context.backend().registered_use().pinned;
    }
    BOOST_TEST(reached_end);
    BOOST_TEST(pinned > 0u);  // the last pass, with no allocation failing, pinned
}
#endif

#define BOOST_TEST_MODULE registered
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/async.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

// Registered buffers and files of the io_uring backend: byte-exact transfers through them,
// ownership handed back on unregistration, misuse refused with a clear error.

#if NVMEIO_HAS_IO_URING

using namespace nvmeio;
using uring_context = basic_aio_context<io_uring_backend>;

namespace {

constexpr std::size_t block = 64 * 1024;

std::vector<aligned_buffer> two_buffers(std::size_t size) {
    std::vector<aligned_buffer> buffers;
    buffers.emplace_back(size);
    buffers.emplace_back(size);
    return buffers;
}

}  // namespace

BOOST_AUTO_TEST_CASE(transfers_through_registered_buffers_and_files_are_byte_exact) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("registered");
    const std::size_t size = 16 * block + 4096;
    const auto bytes = nvmeio_test::pattern(size, 21);
    nvmeio_test::spew(path.str(), std::vector<unsigned char>(size, 0).data(), size);

    uring_context context({8, block});
    io_uring_backend& backend = context.backend();
    std::vector<file> files;
    files.emplace_back(path.str(), open_mode::read_write);
    const int descriptor = files.front().native_handle();
    backend.register_files(std::move(files));
    BOOST_TEST(files.empty());
    backend.register_buffers(two_buffers(size));
    BOOST_TEST_REQUIRE(backend.registered_buffer_count() == 2u);
    BOOST_TEST_REQUIRE(backend.registered_file_count() == 1u);
    const file& target = backend.registered_file(0);
    BOOST_TEST(target.native_handle() == descriptor);

    const registered_buffer source = backend.registered_buffer_at(0);
    const registered_buffer sink = backend.registered_buffer_at(1);
    BOOST_TEST(source.size == size);
    std::memcpy(source.data, bytes.data(), size);
    for (const transfer_config& config : nvmeio_test::every_config()) {
        std::memset(sink.data, 0, size);
        const registration_use before = backend.registered_use();
        BOOST_TEST(write(context, target, nvmeio::memory(source.data, size), 0, config).bytes ==
                   size);
        BOOST_TEST(read(context, target, nvmeio::memory(sink.data, size), 0, config).bytes == size);
        BOOST_TEST(std::memcmp(sink.data, bytes.data(), size) == 0);
        // 17 requests each way, at least: every one of them used both registrations.
        const registration_use after = backend.registered_use();
        BOOST_TEST(after.fixed_buffer_requests - before.fixed_buffer_requests >= 34u);
        BOOST_TEST(after.fixed_file_requests - before.fixed_file_requests >= 34u);
    }
    BOOST_TEST(nvmeio_test::slurp(path.str()) == bytes);
}

// A ring set up for one thread is replaced by a plain one when asked (set_single_issuer(false));
// the caller's registered buffers are registered again in the new ring, and a buffer the old one
// pinned is read again byte-exact (pinned again as it moves).
BOOST_AUTO_TEST_CASE(registered_buffers_survive_the_ring_being_replaced) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("registered_replaced");
    const std::size_t size = 4 * block;
    nvmeio_test::spew_pattern(path.str(), size, 23);
    uring_context context({8, block});
    io_uring_backend& backend = context.backend();
    if ((backend.setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0) {
        BOOST_TEST_MESSAGE(
            "skipped: this kernel sets no ring up for one thread, so none is "
            "replaced");
        return;
    }
    file f(path.str(), open_mode::read);
    backend.register_buffers(two_buffers(size));
    aligned_buffer own(size);
    for (int pass = 0; pass < 2; ++pass)  // the second pins it
        BOOST_TEST_REQUIRE(read(context, f, own, 0).bytes == size);
    BOOST_TEST_REQUIRE(backend.registered_use().pinned == 1u);

    backend.set_single_issuer(false);
    BOOST_TEST((backend.setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0u);
    const registered_buffer sink = backend.registered_buffer_at(1);
    std::memset(sink.data, 0, size);
    const registration_use before = backend.registered_use();
    BOOST_TEST(read(context, f, nvmeio::memory(sink.data, size), 0).bytes == size);
    BOOST_TEST(nvmeio_test::holds_pattern(sink.data, size, 23));
    BOOST_TEST(backend.registered_use().fixed_buffer_requests - before.fixed_buffer_requests >= 4u);
    std::memset(own.data(), 0, size);
    BOOST_TEST(read(context, f, own, 0).bytes == size);
    BOOST_TEST(nvmeio_test::holds_pattern(own.data(), size, 23));
}

BOOST_AUTO_TEST_CASE(every_front_end_transfers_through_a_registered_file) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("registered_front_ends");
    const auto bytes = nvmeio_test::pattern(4 * block, 28);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    uring_context context({4, block});
    std::vector<file> files;
    files.emplace_back(path.str(), open_mode::read);
    context.backend().register_files(std::move(files));
    const file& target = context.backend().registered_file(0);
    aligned_buffer into(4 * block);

    const registration_use before = context.backend().registered_use();
    const batch_outcome batch = read_batch(context, target, {{into, 0}});
    BOOST_TEST(batch.results.at(0).bytes == 4 * block);
    BOOST_TEST(std::memcmp(into.data(), bytes.data(), 4 * block) == 0);
    BOOST_TEST(context.backend().registered_use().fixed_file_requests > before.fixed_file_requests);

    // Other rings see the descriptor as any other (byte-exact, not through the registration).
    basic_parallel_context<io_uring_backend> parallel({2, {4, block}});
    std::memset(into.data(), 0, 4 * block);
    BOOST_TEST(read(parallel, target, into, 0).bytes == 4 * block);
    BOOST_TEST(std::memcmp(into.data(), bytes.data(), 4 * block) == 0);
    basic_async_context<io_uring_backend> async({1, {4, block}});
    std::memset(into.data(), 0, 4 * block);
    BOOST_TEST(async_read(async, target, into, 0).wait().bytes == 4 * block);
    BOOST_TEST(std::memcmp(into.data(), bytes.data(), 4 * block) == 0);
}

BOOST_AUTO_TEST_CASE(memory_and_descriptors_outside_the_registrations_take_the_plain_path) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path registered_path("registered_a");
    nvmeio_test::temp_path other_path("registered_b");
    const auto a_bytes = nvmeio_test::pattern(2 * block, 22);
    const auto b_bytes = nvmeio_test::pattern(2 * block, 23);
    nvmeio_test::spew(registered_path.str(), a_bytes.data(), a_bytes.size());
    nvmeio_test::spew(other_path.str(), b_bytes.data(), b_bytes.size());

    uring_context context({4, block});
    io_uring_backend& backend = context.backend();
    std::vector<file> files;
    files.emplace_back(registered_path.str(), open_mode::read);
    backend.register_files(std::move(files));
    backend.register_buffers(two_buffers(block));
    file other(other_path.str(), open_mode::read);
    // Memory nvmeio did not allocate: no ring pins it on its own (an aligned_buffer it would).
    std::vector<std::byte, aligned_allocator<std::byte>> plain(2 * block);

    const registration_use before = backend.registered_use();
    BOOST_TEST(read(context, other, plain, 0).bytes == 2 * block);
    BOOST_TEST(std::memcmp(plain.data(), b_bytes.data(), 2 * block) == 0);
    BOOST_TEST(backend.registered_use().fixed_buffer_requests == before.fixed_buffer_requests);
    BOOST_TEST(backend.registered_use().fixed_file_requests == before.fixed_file_requests);
    // A registered buffer, but a range running past its end: that request goes plain too.
    const registered_buffer first = backend.registered_buffer_at(0);
    BOOST_TEST(
        read(context, backend.registered_file(0), nvmeio::memory(first.data, block), 0).bytes ==
        block);
    BOOST_TEST(std::memcmp(first.data, a_bytes.data(), block) == 0);
    BOOST_TEST(backend.registered_use().fixed_buffer_requests == before.fixed_buffer_requests + 1);
}

BOOST_AUTO_TEST_CASE(unregistering_hands_the_same_buffers_and_open_files_back) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("registered_back");
    const auto bytes = nvmeio_test::pattern(block, 24);
    nvmeio_test::spew(path.str(), bytes.data(), block);
    io_uring_backend backend(2);
    std::vector<aligned_buffer> buffers = two_buffers(block);
    const std::byte* addresses[] = {buffers[0].data(), buffers[1].data()};
    backend.register_buffers(std::move(buffers));
    std::vector<file> files;
    files.emplace_back(path.str(), open_mode::read);
    const int descriptor = files.front().native_handle();
    backend.register_files(std::move(files));

    std::vector<aligned_buffer> back = backend.unregister_buffers();
    BOOST_TEST_REQUIRE(back.size() == 2u);
    BOOST_TEST(back[0].data() == addresses[0]);
    BOOST_TEST(back[1].data() == addresses[1]);
    BOOST_TEST(back[0].size() == block);
    BOOST_TEST(backend.registered_buffer_count() == 0u);
    std::vector<file> files_back = backend.unregister_files();
    BOOST_TEST_REQUIRE(files_back.size() == 1u);
    BOOST_TEST(files_back[0].native_handle() == descriptor);
    BOOST_TEST(files_back[0].path() == path.str());
    BOOST_TEST(backend.registered_file_count() == 0u);
    // Still open and usable; nothing registered is used any more.
    uring_context context({2, block});
    BOOST_TEST(read(context, files_back[0], back[1], 0).bytes == block);
    BOOST_TEST(std::memcmp(back[1].data(), bytes.data(), block) == 0);
    BOOST_TEST(backend.unregister_buffers().empty());
    BOOST_TEST(backend.unregister_files().empty());
    // A new set can be registered after the old one came back.
    backend.register_buffers(std::move(back));
    BOOST_TEST(backend.registered_buffer_count() == 2u);
}

BOOST_AUTO_TEST_CASE(nothing_can_be_unregistered_while_requests_are_in_flight) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path path("registered_busy");
    const auto bytes = nvmeio_test::pattern(block, 25);
    nvmeio_test::spew(path.str(), bytes.data(), block);
    io_uring_backend backend(2);
    backend.register_buffers(two_buffers(block));
    std::vector<file> files;
    files.emplace_back(path.str(), open_mode::read);
    backend.register_files(std::move(files));
    const registered_buffer into = backend.registered_buffer_at(0);
    const io_request request{
        backend.registered_file(0).native_handle(), operation::read, into.data, block, 0, 5};
    BOOST_TEST_REQUIRE(backend.submit(&request, 1) == 1);
    for (int attempt = 0; attempt < 2; ++attempt) {
        try {
            if (attempt == 0) {
                (void)backend.unregister_buffers();
            } else {
                (void)backend.unregister_files();
            }
            BOOST_ERROR("unregistering with a request in flight was accepted");
        } catch (const io_error& e) {
            BOOST_TEST(e.code().value() == EBUSY);
            BOOST_TEST(nvmeio_test::contains(e.what(), "1 requests in flight"), e.what());
        }
    }
    io_completion done{};
    int rc;
    do {
        rc = backend.reap(&done, 1, 1, nullptr);
    } while (rc == -EINTR);
    BOOST_TEST_REQUIRE(rc == 1);
    BOOST_TEST(done.result == static_cast<std::int64_t>(block));
    BOOST_TEST(std::memcmp(into.data, bytes.data(), block) == 0);
    BOOST_TEST(backend.unregister_buffers().size() == 2u);
    BOOST_TEST(backend.unregister_files().size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_registrations_are_refused_and_leave_the_arguments_untouched) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    io_uring_backend backend(2);
    std::vector<aligned_buffer> none;
    BOOST_CHECK_THROW(backend.register_buffers(std::move(none)), std::invalid_argument);
    std::vector<aligned_buffer> with_empty = two_buffers(block);
    with_empty.emplace_back();
    BOOST_CHECK_THROW(backend.register_buffers(std::move(with_empty)), std::invalid_argument);
    BOOST_TEST(with_empty.size() == 3u);
    // Above the kernel's 1 GiB per buffer (address space only: never touched).
    std::vector<aligned_buffer> huge;
    huge.emplace_back((std::size_t{1} << 30) + 4096);
    BOOST_CHECK_THROW(backend.register_buffers(std::move(huge)), std::invalid_argument);
    BOOST_TEST(huge.size() == 1u);

    backend.register_buffers(two_buffers(block));
    std::vector<aligned_buffer> again = two_buffers(block);
    BOOST_CHECK_THROW(backend.register_buffers(std::move(again)), std::invalid_argument);
    BOOST_TEST(again.size() == 2u);
    BOOST_CHECK_THROW((void)backend.registered_buffer_at(2), std::invalid_argument);
    BOOST_CHECK_THROW((void)backend.registered_file(0), std::invalid_argument);

    std::vector<file> closed(1);
    BOOST_CHECK_THROW(backend.register_files(std::move(closed)), std::invalid_argument);
    BOOST_TEST(closed.size() == 1u);
    std::vector<file> no_files;
    BOOST_CHECK_THROW(backend.register_files(std::move(no_files)), std::invalid_argument);
}

// What registered_file() hands out cannot be bound to `file&`, closed, assigned or swapped: a file
// taking its place behind the same descriptor number would be read through the kernel's
// registration of the old.
template <class T, class = void>
struct can_close : std::false_type {};
template <class T>
struct can_close<T, std::void_t<decltype(std::declval<T>().close())>> : std::true_type {};
template <class T, class = void>
struct can_swap : std::false_type {};
template <class T>
struct can_swap<T, std::void_t<decltype(std::declval<T>().swap(std::declval<file&>()))>>
    : std::true_type {};
using handed_out = decltype(std::declval<io_uring_backend&>().registered_file(0));
static_assert(std::is_lvalue_reference_v<handed_out>);
static_assert(!std::is_convertible_v<handed_out, file&>);
static_assert(!std::is_assignable_v<handed_out, file>);
static_assert(!std::is_assignable_v<handed_out, file&&>);
static_assert(!can_close<handed_out>::value);
static_assert(!can_swap<handed_out>::value);
static_assert(std::is_convertible_v<file&, file&> && can_close<file&>::value &&
              can_swap<file&>::value && std::is_assignable_v<file&, file>);  // the checks see them
// Nor can a temporary file reach an asynchronous transfer, which outlives the call.
template <class F, class = void>
struct can_submit : std::false_type {};
template <class F>
struct can_submit<F, std::void_t<decltype(std::declval<async_context&>().submit(
                         std::declval<F>(), operation::read, mutable_memory(), 0))>>
    : std::true_type {};
static_assert(can_submit<const file&>::value && can_submit<file&>::value);
static_assert(!can_submit<file>::value);

BOOST_AUTO_TEST_CASE(a_registered_file_closed_behind_the_backend_is_never_used_for_its_number) {
    // Closing the backend's file takes a const_cast now (see above); even then, a new file which
    // gets the same descriptor number is read, not the registered one.
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    nvmeio_test::temp_path first_path("registered_first");
    nvmeio_test::temp_path second_path("registered_second");
    const auto first_bytes = nvmeio_test::pattern(block, 26);
    const auto second_bytes = nvmeio_test::pattern(block, 27);
    nvmeio_test::spew(first_path.str(), first_bytes.data(), block);
    nvmeio_test::spew(second_path.str(), second_bytes.data(), block);
    uring_context context({2, block});
    std::vector<file> files;
    files.emplace_back(first_path.str(), open_mode::read);
    const int number = files.front().native_handle();
    context.backend().register_files(std::move(files));
    const_cast<file&>(context.backend().registered_file(0)).close();
    file second(second_path.str(), open_mode::read);
    BOOST_TEST_REQUIRE(second.native_handle() == number, "the kernel did not reuse the number");
    aligned_buffer into(block);
    BOOST_TEST(read(context, second, into, 0).bytes == block);
    BOOST_TEST(std::memcmp(into.data(), second_bytes.data(), block) == 0);
    BOOST_TEST(context.backend().registered_use().fixed_file_requests == 0u);
}

#else

BOOST_AUTO_TEST_CASE(io_uring_is_not_in_this_build) {
    nvmeio_test::skip("registered buffers and files not tested: they need io_uring, not built");
    BOOST_TEST(!nvmeio::io_uring_available);
}

#endif

#define BOOST_TEST_MODULE memory
#include <boost/test/unit_test.hpp>

// The memory side of every byte-moving call is a view that carries its size (memory.hpp). The
// misuses a bare `void*` and a separate length allowed must not compile, or must throw
// std::invalid_argument before any I/O: a swapped length and offset, a struct's address, a
// length past a vector's end.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nvmeio/async.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <nvmeio/verify.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::temp_path;

namespace {

struct header {  // a trivially copyable struct a caller might write
    std::uint64_t fields[8];
};

// Whether `Call<A...>`, the type of a call below, names a call that compiles.
template <class, template <class...> class Call, class... A>
struct detect : std::false_type {};
template <template <class...> class Call, class... A>
struct detect<std::void_t<Call<A...>>, Call, A...> : std::true_type {};
template <template <class...> class Call, class... A>
inline constexpr bool compiles = detect<void, Call, A...>::value;

template <class... A>
using read_call = decltype(nvmeio::read(std::declval<A>()...));
template <class... A>
using write_call = decltype(nvmeio::write(std::declval<A>()...));
template <class... A>
using async_read_call = decltype(nvmeio::async_read(std::declval<A>()...));
template <class... A>
using async_write_call = decltype(nvmeio::async_write(std::declval<A>()...));
template <class... A>
using read_at_call = decltype(std::declval<const file&>().read_at(std::declval<A>()...));
template <class... A>
using view_call = decltype(nvmeio::memory(std::declval<A>()...));

using ctx = aio_context&;
using par = parallel_context&;
using f = const file&;
using u64 = std::uint64_t;
using std::size_t;

// The forms that compile: a buffer, a range, an explicit pointer and size; an offset after it.
static_assert(compiles<read_call, ctx, f, aligned_buffer&, u64>);
static_assert(compiles<read_call, ctx, f, std::vector<float>&, u64>);
static_assert(compiles<read_call, ctx, f, std::array<char, 8>&, u64>);
static_assert(compiles<read_call, ctx, f, mutable_memory, u64, transfer_config>);
static_assert(compiles<read_call, par, f, aligned_buffer&, u64>);
static_assert(compiles<write_call, ctx, f, const std::vector<float>&, u64>);
static_assert(compiles<write_call, ctx, f, const_memory, u64>);

// A bare pointer, with a length beside it in either order (the swap) or without one.
static_assert(!compiles<read_call, ctx, f, void*, size_t, u64>);
static_assert(!compiles<read_call, ctx, f, void*, u64>);
static_assert(!compiles<read_call, par, f, void*, size_t, u64>);
static_assert(!compiles<write_call, ctx, f, const void*, size_t, u64>);
static_assert(!compiles<async_read_call, async_context&, f, void*, size_t, u64>);
static_assert(!compiles<read_at_call, void*, size_t, u64>);
static_assert(!std::is_convertible_v<void*, mutable_memory>);
static_assert(!std::is_convertible_v<const void*, const_memory>);
// The old form with a buffer and a length: the length would be taken as the offset and the
// offset as settings, which no route takes.
static_assert(!compiles<read_call, ctx, f, aligned_buffer&, size_t, u64>);
// A struct's address, or the struct itself (no data() and size()).
static_assert(!compiles<read_call, ctx, f, header*, size_t, u64>);
static_assert(!compiles<read_call, ctx, f, header&, u64>);
static_assert(!std::is_constructible_v<mutable_memory, header*>);
// `&buffer` for `buffer.data()`, even with a size: the object's own bytes are not its memory.
static_assert(!compiles<view_call, aligned_buffer*, size_t>);
static_assert(!compiles<view_call, const std::vector<float>*, size_t>);
static_assert(!std::is_constructible_v<mutable_memory, aligned_buffer*, size_t>);
static_assert(!std::is_constructible_v<const_memory, const std::string*, size_t>);
static_assert(compiles<view_call, header*, size_t>);  // a struct's bytes, said explicitly
// Nor `&view` for `view.data()` with a view of someone else's memory (trivially copyable).
static_assert(!compiles<view_call, std::string_view*, size_t>);
static_assert(!compiles<view_call, mutable_memory*, size_t>);
// A string literal: its view would hold the terminating NUL.
static_assert(!compiles<write_call, ctx, f, const char (&)[6], u64>);
static_assert(!compiles<view_call, const char (&)[6]>);
// A temporary, const or not, is gone before an asynchronous transfer of it runs.
static_assert(compiles<async_write_call, async_context&, f, const std::vector<char>&, u64>);
static_assert(!compiles<async_write_call, async_context&, f, const std::vector<char>&&, u64>);
static_assert(!compiles<async_write_call, async_context&, f, std::vector<char>&&, u64>);
static_assert(!compiles<write_call, ctx, f, const std::vector<char>&&, u64>);
static_assert(!compiles<view_call, const std::vector<char>&&>);

// A range of objects that are not bytes, memory that is const, a temporary that would die.
static_assert(!compiles<read_call, ctx, f, std::vector<std::string>&, u64>);
static_assert(!compiles<read_call, ctx, f, const std::vector<float>&, u64>);
static_assert(!compiles<read_call, ctx, f, const_memory, u64>);
static_assert(!compiles<read_call, ctx, f, std::vector<float>&&, u64>);
static_assert(!std::is_convertible_v<const_memory, mutable_memory>);

constexpr std::size_t unit = 4096;

}  // namespace

BOOST_AUTO_TEST_CASE(a_range_is_viewed_whole_in_bytes) {
    std::vector<float> v(100);
    const mutable_memory m = v;
    BOOST_TEST(m.data() == static_cast<void*>(v.data()));
    BOOST_TEST(m.size() == 400u);
    const std::vector<float>& cv = v;
    BOOST_TEST(memory(cv).size() == 400u);
    static_assert(std::is_same_v<decltype(memory(cv)), const_memory>);
    static_assert(std::is_same_v<decltype(memory(v)), mutable_memory>);
    header h{};
    BOOST_TEST(memory(&h, sizeof h).size() == sizeof h);
    std::array<header, 3> hs{};
    BOOST_TEST(memory(hs).size() == 3 * sizeof(header));
}

BOOST_AUTO_TEST_CASE(sub_views_are_checked_before_any_io) {
    std::vector<unsigned char> v(unit, 7);
    const mutable_memory m = v;
    BOOST_TEST(m.first(unit).size() == unit);
    BOOST_TEST(m.slice(unit, 0).size() == 0u);
    BOOST_TEST(m.slice(100, 200).bytes() == reinterpret_cast<std::byte*>(v.data()) + 100);
    BOOST_CHECK_THROW((void)m.first(unit + 1), std::invalid_argument);
    BOOST_CHECK_THROW((void)m.slice(unit + 1, 0), std::invalid_argument);
    BOOST_CHECK_THROW((void)m.slice(1, unit), std::invalid_argument);
    // `at + n` would wrap past SIZE_MAX to a small number.
    constexpr auto huge = std::numeric_limits<std::size_t>::max();
    BOOST_CHECK_THROW((void)m.slice(16, huge - 8), std::invalid_argument);
    BOOST_CHECK_THROW((void)m.slice(huge, 1), std::invalid_argument);
    try {
        (void)m.first(unit + 4096);
        BOOST_FAIL("no error");
    } catch (const std::invalid_argument& e) {
        BOOST_TEST(contains(e.what(),
                            "a view of 8192 bytes at byte 0 of memory holding 4096 "
                            "bytes passes its end"),
                   e.what());
    }
}

// The write that put heap bytes past a vector's end into the file: now the length is the
// vector's, and a longer one is refused before the file is touched.
BOOST_AUTO_TEST_CASE(a_write_moves_exactly_the_vectors_bytes) {
    temp_path path("memory_vector.bin");
    std::vector<unsigned char> v(unit, 0x5a);
    {
        aio_context context;
        file out(path.str(), open_mode::write, direct_io::off);
        BOOST_CHECK_THROW(write(context, out, memory(v).first(v.size() + 4096), 0),
                          std::invalid_argument);
        BOOST_TEST(nvmeio_test::file_size(path.str()) == 0u);
        BOOST_TEST(write(context, out, v, 0).bytes == unit);
        out.close();
    }
    BOOST_TEST(nvmeio_test::file_size(path.str()) == unit);
    std::vector<unsigned char> back(2 * unit, 0);
    file in(path.str(), open_mode::read, direct_io::off);
    BOOST_TEST(in.read_at(back, 0) == unit);  // the file's end, not the vector's
    BOOST_TEST(std::equal(v.begin(), v.end(), back.begin()));
    BOOST_TEST(verify_read(path.str(), v, 0).equal());
}

// A read fills the view and nothing past it: the bytes after a sub-view stay as they were.
BOOST_AUTO_TEST_CASE(a_read_fills_its_view_and_nothing_past_it) {
    temp_path path("memory_read.bin");
    nvmeio_test::spew_pattern(path.str(), 4 * unit, 11);
    aligned_buffer buffer(4 * unit);
    std::memset(buffer.data(), 0xee, buffer.size());
    aio_context context;
    file in(path.str(), open_mode::read, direct_io::on);
    BOOST_TEST(read(context, in, memory(buffer).first(2 * unit), unit).bytes == 2 * unit);
    const std::vector<unsigned char> expected = nvmeio_test::pattern(4 * unit, 11);
    BOOST_TEST(std::memcmp(buffer.data(), expected.data() + unit, 2 * unit) == 0);
    for (std::size_t i = 2 * unit; i < buffer.size(); ++i) {
        if (buffer.data()[i] != std::byte{0xee}) BOOST_FAIL("byte " << i << " written");
    }
    // A batch request's length is its view's too.
    std::vector<batch_request> requests{{memory(buffer).slice(2 * unit, unit), 0}};
    BOOST_TEST(read_batch(context, in, requests).results[0].bytes == unit);
    BOOST_TEST(std::memcmp(buffer.data() + 2 * unit, expected.data(), unit) == 0);
    BOOST_TEST(std::to_integer<int>(buffer.data()[3 * unit]) == 0xee);
}

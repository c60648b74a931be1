#define BOOST_TEST_MODULE aligned_allocator
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <limits>
#include <nvmeio/aligned_allocator.hpp>
#include <string>
#include <vector>

using namespace nvmeio;

BOOST_AUTO_TEST_CASE(vector_with_aligned_allocator_is_aligned_for_every_size) {
    for (std::size_t n : {1u, 7u, 4096u, 100000u}) {
        std::vector<std::byte, aligned_allocator<std::byte>> v(n);
        BOOST_TEST(is_aligned(v.data(), 4096));
        std::vector<double, aligned_allocator<double, 512>> d(n);
        BOOST_TEST(is_aligned(d.data(), 512));
    }
    using rebound = std::allocator_traits<aligned_allocator<char, 8192>>::rebind_alloc<long>;
    static_assert(std::is_same_v<rebound, aligned_allocator<long, 8192>>);
    BOOST_TEST((aligned_allocator<char>{} == aligned_allocator<int>{}));
}

BOOST_AUTO_TEST_CASE(buffer_capacity_rounds_the_size_up_to_the_alignment) {
    aligned_buffer b(4097, 4096);
    BOOST_TEST(b.size() == 4097u);
    BOOST_TEST(b.capacity() == 8192u);
    BOOST_TEST(is_aligned(b.data(), 4096));
    aligned_buffer empty(0);
    BOOST_TEST(empty.empty());
    BOOST_TEST(empty.capacity() == 0u);
}

BOOST_AUTO_TEST_CASE(buffer_moves_leave_the_source_empty) {
    aligned_buffer a(10000);
    std::byte* p = a.data();
    aligned_buffer b(std::move(a));
    BOOST_TEST(a.data() == nullptr);
    BOOST_TEST(a.size() == 0u);
    BOOST_TEST(b.data() == p);
    aligned_buffer c(100);
    c = std::move(b);
    BOOST_TEST(c.data() == p);
    BOOST_TEST(c.size() == 10000u);
    static_assert(std::is_nothrow_move_constructible_v<aligned_buffer>);
    static_assert(!std::is_copy_constructible_v<aligned_buffer>);
}

BOOST_AUTO_TEST_CASE(bad_alignment_is_rejected_with_the_value) {
    try {
        aligned_buffer b(100, 3000);
        BOOST_FAIL("alignment 3000 accepted");
    } catch (const std::invalid_argument& e) {
        BOOST_TEST(std::string(e.what()).find("3000") != std::string::npos);
    }
}

// The rounded-up capacity used to wrap to 0: a "buffer" with a null pointer and a size near
// SIZE_MAX, which a transfer would then write through.
BOOST_AUTO_TEST_CASE(size_whose_capacity_passes_size_max_is_refused_not_an_empty_buffer) {
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    for (const std::size_t alignment : {std::size_t{64}, std::size_t{4096}, std::size_t{2} << 20}) {
        for (const std::size_t size : {max, max - 1, max - alignment + 2}) {
            BOOST_TEST_CONTEXT("size " << size << " alignment " << alignment) {
                try {
                    aligned_buffer b(size, alignment);
                    BOOST_ERROR("got a buffer of capacity " << b.capacity() << " at "
                                                            << static_cast<void*>(b.data()));
                } catch (const std::invalid_argument& e) {
                    BOOST_TEST(
                        std::string(e.what()).find(std::to_string(size)) != std::string::npos,
                        e.what());
                    BOOST_TEST(std::string(e.what()).find("does not fit") != std::string::npos,
                               e.what());
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(prefault_and_huge_pages_give_usable_zeroed_memory) {
    aligned_buffer b(std::size_t{8} << 20, 4096, buffer_options{true, true, false});
    BOOST_TEST(is_aligned(b.data(), std::size_t{2} << 20));  // huge pages want 2 MiB alignment
    BOOST_TEST(b.alignment() == 4096u);
    BOOST_TEST(std::to_integer<int>(b.data()[0]) == 0);
    BOOST_TEST(std::to_integer<int>(b.data()[b.capacity() - 4096]) == 0);
}

BOOST_AUTO_TEST_CASE(lock_pins_memory_or_says_why_not) {
    try {
        aligned_buffer b(1 << 16, 4096, buffer_options{false, false, true});
        BOOST_TEST(b.locked());
    } catch (const io_error& e) {
        // Only an unprivileged process with a small RLIMIT_MEMLOCK may be refused.
        BOOST_TEST(::geteuid() != 0u, e.what());
        BOOST_TEST(std::string(e.what()).find("mlock") != std::string::npos);
    }
}

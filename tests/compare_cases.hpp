#pragma once
// Test cases shared by compare_test.cpp (xsimd path) and compare_scalar_test.cpp (scalar path):
// every result of nvmeio's comparator is checked against a byte-by-byte reference.
// Include after <boost/test/unit_test.hpp> and <nvmeio/compare.hpp>.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace compare_cases {

/// The obviously correct answer: count, first and last differing byte.
struct reference_result {
    std::size_t count = 0;
    std::size_t first = nvmeio::no_mismatch;
    std::size_t last = nvmeio::no_mismatch;
};

inline reference_result reference(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
    reference_result r;
    for (std::size_t i = 0; i < n; ++i) {
        if (a[i] != b[i]) {
            if (r.count == 0) r.first = i;
            r.last = i;
            ++r.count;
        }
    }
    return r;
}

/// Checks all three functions against the reference; reports through Boost.Test and returns
/// false on the first disagreement so a broken loop stops after one message.
inline bool check(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
    const reference_result want = reference(a, b, n);
    const bool got_equal = nvmeio::equal(a, b, n);
    const std::size_t got_first = nvmeio::first_mismatch(a, b, n);
    const nvmeio::mismatch_summary got = nvmeio::count_mismatches(a, b, n);
    if (got_equal == (want.count == 0) && got_first == want.first && got.count == want.count &&
        got.first == want.first && got.last == want.last && got.equal() == (want.count == 0)) {
        return true;
    }
    const auto a_offset = reinterpret_cast<std::uintptr_t>(a) % 64;
    const auto b_offset = reinterpret_cast<std::uintptr_t>(b) % 64;
    BOOST_ERROR("n=" << n << " a%64=" << a_offset << " b%64=" << b_offset << " | want count="
                     << want.count << " first=" << want.first << " last=" << want.last
                     << " | got equal=" << got_equal << " first_mismatch=" << got_first
                     << " count=" << got.count << " first=" << got.first << " last=" << got.last);
    return false;
}

/// A pair of random, identical buffers of `size` bytes whose start can be placed at any
/// offset 0..63 from a 64-byte boundary, independently for each side.
class buffer_pair {
  public:
    buffer_pair(std::size_t size, std::uint32_t seed)
        : size_(size), a_storage_(size + 128), b_storage_(size + 128) {
        std::mt19937 random(seed);
        for (auto& byte : a_storage_)
            byte = static_cast<std::uint8_t>(random());
        b_storage_ = a_storage_;
    }

    /// Start of side a at `offset` bytes past a 64-byte boundary; `size` bytes are usable.
    std::uint8_t* a(std::size_t offset) { return aligned(a_storage_) + offset; }
    /// Start of side b at `offset` bytes past a 64-byte boundary.
    std::uint8_t* b(std::size_t offset) { return aligned(b_storage_) + offset; }

    /// Makes b's bytes at `offset` equal to a's again over the whole usable range.
    void reset(std::size_t a_offset, std::size_t b_offset) {
        std::memcpy(b(b_offset), a(a_offset), size_);
    }

  private:
    static std::uint8_t* aligned(std::vector<std::uint8_t>& storage) {
        const auto address = reinterpret_cast<std::uintptr_t>(storage.data());
        return storage.data() + (64 - address % 64) % 64;
    }

    std::size_t size_;
    std::vector<std::uint8_t> a_storage_;
    std::vector<std::uint8_t> b_storage_;
};

/// Flips that catch signed/unsigned and lane-width mistakes: low bit, sign bit, every bit.
inline constexpr std::uint8_t flips[] = {0x01, 0x80, 0xFF, 0x5A};

/// Offsets where SIMD kernels change behaviour: around register sizes (16/32/64), unrolled
/// strides and counting blocks (252 registers), measured from the start; callers mirror them
/// from the end.
inline std::vector<std::size_t> boundary_offsets() {
    std::vector<std::size_t> offsets;
    for (const std::size_t edge :
         {1u, 8u, 16u, 32u, 64u, 128u, 256u, 4032u, 8064u, 16128u, 32256u, 64512u}) {
        offsets.push_back(edge - 1);
        offsets.push_back(edge);
        offsets.push_back(edge + 1);
    }
    return offsets;
}

}  // namespace compare_cases

BOOST_AUTO_TEST_CASE(zero_length_is_equal_even_with_null_pointers) {
    BOOST_TEST(nvmeio::equal(nullptr, nullptr, 0));
    BOOST_TEST(nvmeio::first_mismatch(nullptr, nullptr, 0) == nvmeio::no_mismatch);
    const nvmeio::mismatch_summary summary = nvmeio::count_mismatches(nullptr, nullptr, 0);
    BOOST_TEST(summary.equal());
    BOOST_TEST(summary.count == 0u);
    BOOST_TEST(summary.first == nvmeio::no_mismatch);
    BOOST_TEST(summary.last == nvmeio::no_mismatch);
}

BOOST_AUTO_TEST_CASE(equal_buffers_of_every_length_and_alignment_have_no_mismatch) {
    compare_cases::buffer_pair buffers(300, 1);
    for (std::size_t n = 0; n <= 300; ++n) {
        for (std::size_t a_offset = 0; a_offset < 64; ++a_offset) {
            const std::size_t b_offset = (a_offset * 37 + n) % 64;
            buffers.reset(a_offset, b_offset);
            if (!compare_cases::check(buffers.a(a_offset), buffers.b(b_offset), n)) return;
        }
    }
}

BOOST_AUTO_TEST_CASE(a_single_difference_is_found_at_every_position_of_every_length) {
    // Covers first byte, last byte, the scalar head and tail, inside a register and at every
    // register and stride boundary, for each length up to 300.
    compare_cases::buffer_pair buffers(300, 2);
    for (std::size_t n = 1; n <= 300; ++n) {
        const std::size_t a_offset = n % 64;
        const std::size_t b_offset = (n * 7 + 3) % 64;
        buffers.reset(a_offset, b_offset);
        for (std::size_t position = 0; position < n; ++position) {
            std::uint8_t* b = buffers.b(b_offset);
            const std::uint8_t flip = compare_cases::flips[position % 4];
            b[position] ^= flip;
            if (!compare_cases::check(buffers.a(a_offset), b, n)) return;
            b[position] ^= flip;
        }
    }
}

BOOST_AUTO_TEST_CASE(every_pair_of_start_offsets_gives_the_same_answer) {
    compare_cases::buffer_pair buffers(4100, 3);
    std::mt19937 random(3);
    for (const std::size_t n : {1u, 15u, 16u, 17u, 63u, 64u, 65u, 255u, 256u, 257u, 300u, 4100u}) {
        for (std::size_t a_offset = 0; a_offset < 64; ++a_offset) {
            for (std::size_t b_offset = 0; b_offset < 64; ++b_offset) {
                buffers.reset(a_offset, b_offset);
                const std::size_t position = random() % n;
                buffers.b(b_offset)[position] ^= 0x80;
                if (!compare_cases::check(buffers.a(a_offset), buffers.b(b_offset), n)) return;
            }
        }
    }
}

// One difference at a time near every block boundary, at both ends and in the middle of `n`
// bytes, at two alignments; false after the first wrong answer (check() reports it).
inline bool differences_near_block_boundaries_are_found(std::size_t n) {
    compare_cases::buffer_pair buffers(n, 4);
    for (const std::size_t a_offset : {0u, 5u}) {
        const std::size_t b_offset = a_offset == 0 ? 0 : 61;
        buffers.reset(a_offset, b_offset);
        BOOST_TEST(nvmeio::equal(buffers.a(a_offset), buffers.b(b_offset), n));
        if (!compare_cases::check(buffers.a(a_offset), buffers.b(b_offset), n)) return false;
        std::vector<std::size_t> positions = compare_cases::boundary_offsets();
        for (const std::size_t from_start : compare_cases::boundary_offsets()) {
            positions.push_back(n - 1 - from_start);
        }
        positions.push_back(n / 2);
        for (const std::size_t position : positions) {
            std::uint8_t* b = buffers.b(b_offset);
            b[position] ^= 0x01;
            if (!compare_cases::check(buffers.a(a_offset), b, n)) return false;
            b[position] ^= 0x01;
        }
    }
    return true;
}

BOOST_AUTO_TEST_CASE(
    first_mismatch_finds_a_difference_near_every_block_boundary_of_a_large_buffer) {
    // Below and past the size from which memcmp leads in every build (detail::memory_bound).
    for (const std::size_t n : {(std::size_t{1} << 20) + 37, nvmeio::detail::memory_bound + 37}) {
        if (!differences_near_block_boundaries_are_found(n)) return;
    }
}

BOOST_AUTO_TEST_CASE(past_the_caches_all_different_buffers_are_counted_whole) {
    const std::size_t n = nvmeio::detail::memory_bound + 37;
    compare_cases::buffer_pair buffers(n, 9);
    buffers.reset(3, 60);
    std::uint8_t* b = buffers.b(60);
    for (std::size_t i = 0; i < n; ++i)
        b[i] ^= 0x80;
    if (!compare_cases::check(buffers.a(3), b, n)) return;
    const nvmeio::mismatch_summary summary = nvmeio::count_mismatches(buffers.a(3), b, n);
    BOOST_TEST(summary.count == n);
    BOOST_TEST(summary.first == 0u);
    BOOST_TEST(summary.last == n - 1);
}

BOOST_AUTO_TEST_CASE(a_difference_is_found_at_every_stride_boundary_of_mid_sized_buffers) {
    // Lengths around 32-192 KiB (where AVX-512 builds first skip the equal prefix with 32-byte
    // registers) and just outside: a single difference at 128-byte stride boundaries all along.
    constexpr std::size_t max_size = (std::size_t{192} << 10) + 1;
    compare_cases::buffer_pair buffers(max_size, 8);
    for (const std::size_t n :
         {std::size_t{32} << 10, (std::size_t{32} << 10) - 1, (std::size_t{64} << 10) + 37,
          (std::size_t{192} << 10) - 1, std::size_t{192} << 10, max_size}) {
        const std::size_t a_offset = n % 64;
        const std::size_t b_offset = (n * 7 + 3) % 64;
        buffers.reset(a_offset, b_offset);
        if (!compare_cases::check(buffers.a(a_offset), buffers.b(b_offset), n)) return;
        std::vector<std::size_t> positions = {0, 1, n / 2, n - 2, n - 1};
        for (std::size_t edge = 128; edge < n; edge += 128 * 61) {
            positions.push_back(edge - 1);
            positions.push_back(edge);
        }
        for (const std::size_t position : positions) {
            std::uint8_t* b = buffers.b(b_offset);
            b[position] ^= compare_cases::flips[position % 4];
            if (!compare_cases::check(buffers.a(a_offset), b, n)) return;
            b[position] ^= compare_cases::flips[position % 4];
        }
    }
}

BOOST_AUTO_TEST_CASE(count_mismatches_counts_several_scattered_differences) {
    constexpr std::size_t max_size = 100000;
    compare_cases::buffer_pair buffers(max_size, 5);
    std::mt19937 random(5);
    for (int round = 0; round < 300; ++round) {
        const std::size_t n = 1 + random() % (round < 200 ? 1000 : max_size);
        const std::size_t a_offset = random() % 64;
        const std::size_t b_offset = random() % 64;
        buffers.reset(a_offset, b_offset);
        const std::size_t planted = random() % 20;
        for (std::size_t k = 0; k < planted; ++k) {
            buffers.b(b_offset)[random() % n] ^= compare_cases::flips[k % 4];
        }
        if (!compare_cases::check(buffers.a(a_offset), buffers.b(b_offset), n)) return;
    }
}

BOOST_AUTO_TEST_CASE(clustered_differences_in_one_block_are_all_counted) {
    // Many mismatches in one counting block exercise the per-lane counters near their limit.
    constexpr std::size_t n = 70000;
    compare_cases::buffer_pair buffers(n, 6);
    for (const std::size_t start : {0u, 4000u, 16100u, 65000u}) {
        buffers.reset(0, 0);
        for (std::size_t i = start; i < std::min(n, start + 5000); i += 3) {
            buffers.b(0)[i] ^= 0x80;
        }
        if (!compare_cases::check(buffers.a(0), buffers.b(0), n)) return;
    }
}

BOOST_AUTO_TEST_CASE(all_different_buffers_mismatch_at_every_byte) {
    constexpr std::size_t large = (std::size_t{1} << 20) + 37;
    compare_cases::buffer_pair buffers(large, 7);
    for (const std::uint8_t flip : compare_cases::flips) {
        for (std::size_t offset = 0; offset < 64; offset += 9) {
            buffers.reset(offset, 63 - offset);
            std::uint8_t* b = buffers.b(63 - offset);
            for (std::size_t i = 0; i < large; ++i)
                b[i] ^= flip;
            for (std::size_t n = 1; n <= 300; ++n) {
                if (!compare_cases::check(buffers.a(offset), b, n)) return;
            }
            if (!compare_cases::check(buffers.a(offset), b, large)) return;
            const nvmeio::mismatch_summary summary =
                nvmeio::count_mismatches(buffers.a(offset), b, large);
            BOOST_TEST(summary.count == large);
            BOOST_TEST(summary.first == 0u);
            BOOST_TEST(summary.last == large - 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(overlapping_ranges_are_compared_as_they_are) {
    std::vector<std::uint8_t> bytes(1000, 0x42);
    BOOST_TEST(nvmeio::equal(bytes.data(), bytes.data() + 1, 999));
    BOOST_TEST(nvmeio::equal(bytes.data(), bytes.data(), 1000));
    bytes[700] = 0;
    // a[i] = bytes[i], b[i] = bytes[i + 1]: they differ at i = 699 and i = 700.
    const nvmeio::mismatch_summary summary =
        nvmeio::count_mismatches(bytes.data(), bytes.data() + 1, 999);
    BOOST_TEST(summary.count == 2u);
    BOOST_TEST(summary.first == 699u);
    BOOST_TEST(summary.last == 700u);
    BOOST_TEST(nvmeio::first_mismatch(bytes.data(), bytes.data() + 1, 999) == 699u);
}

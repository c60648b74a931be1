#pragma once
// CRC-32 as zip and zlib's crc32 compute it, at memory speed where the CPU multiplies without
// carries (x86 PCLMULQDQ): the data is folded 64 bytes a step into a 128-bit remainder that has
// the same CRC, and only that remainder and the last bytes go through the byte-at-a-time table.
// A checkpoint's save computes the CRC of every byte it writes; zlib's table loop is what
// limited it on a machine whose device is fast next to its CPUs.

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace nvmeio_torch::crc32 {

// The byte-at-a-time table of the reflected polynomial 0xEDB88320.
struct byte_table {
    std::uint32_t entry[256] = {};
    constexpr byte_table() {
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int bit = 0; bit < 8; ++bit)
                c = (c & 1) != 0 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
            entry[i] = c;
        }
    }
};
inline constexpr byte_table table{};

// The CRC of `n` bytes at `p` continuing `crc` (0 to start), as zlib.crc32(data, crc).
inline std::uint32_t bytewise(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
    crc = ~crc;
    for (; n != 0; --n, ++p)
        crc = table.entry[(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)

// x^n modulo the polynomial, in the reflected order of a folded register's 64-bit half: the
// coefficient of x^d at bit 63 - d. Carry-less multiplying such halves gives x times their
// product, so folding a half forward by k bits multiplies it by x^(k - 1).
constexpr std::uint64_t fold_constant(unsigned n) {
    std::uint64_t r = 1;  // x^0, the coefficient of x^d at bit d
    for (unsigned i = 0; i < n; ++i) {
        r <<= 1;
        if ((r >> 32) != 0) r ^= 0x104C11DB7ull;
    }
    std::uint64_t reflected = 0;
    for (unsigned d = 0; d < 32; ++d)
        reflected |= ((r >> d) & 1) << (63 - d);
    return reflected;
}

// The constants that fold a block forward by 512 and by 128 bits: {low half, high half}.
inline constexpr std::uint64_t fold_by_512[2] = {fold_constant(575), fold_constant(511)};
inline constexpr std::uint64_t fold_by_128[2] = {fold_constant(191), fold_constant(127)};

// A 16-byte block holds x^127 (bit 0) down to x^0; its low half is x^64 times a 64-bit half.
// Folding it forward by `bits` multiplies the low half by x^(bits + 64) and the high half by
// x^bits, each less the x that the multiplication adds.
__attribute__((target("pclmul,sse2"))) inline __m128i fold(__m128i block, __m128i constants) {
    return _mm_xor_si128(_mm_clmulepi64_si128(block, constants, 0x00),
                         _mm_clmulepi64_si128(block, constants, 0x11));
}

// The CRC of `n` >= 64 bytes: four blocks in flight, folded by 512 bits a step, then into one.
__attribute__((target("pclmul,sse2"))) inline std::uint32_t folded(std::uint32_t crc,
                                                                   const unsigned char* p,
                                                                   std::size_t n) noexcept {
    const __m128i by512 = _mm_set_epi64x(static_cast<long long>(fold_by_512[1]),
                                         static_cast<long long>(fold_by_512[0]));
    const __m128i by128 = _mm_set_epi64x(static_cast<long long>(fold_by_128[1]),
                                         static_cast<long long>(fold_by_128[0]));
    const auto load = [](const unsigned char* at) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
    };
    __m128i x0 = load(p), x1 = load(p + 16), x2 = load(p + 32), x3 = load(p + 48);
    // The register starts as ~crc: the same as XOR-ing it into the first four bytes.
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128(static_cast<int>(~crc)));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x0 = _mm_xor_si128(fold(x0, by512), load(p));
        x1 = _mm_xor_si128(fold(x1, by512), load(p + 16));
        x2 = _mm_xor_si128(fold(x2, by512), load(p + 32));
        x3 = _mm_xor_si128(fold(x3, by512), load(p + 48));
    }
    __m128i a = _mm_xor_si128(fold(x0, by128), x1);
    a = _mm_xor_si128(fold(a, by128), x2);
    a = _mm_xor_si128(fold(a, by128), x3);
    for (; n >= 16; p += 16, n -= 16)
        a = _mm_xor_si128(fold(a, by128), load(p));
    // The remainder has the message's CRC when read from a zero register (~0 in zlib's terms).
    alignas(16) unsigned char remainder[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(remainder), a);
    return bytewise(bytewise(0xFFFFFFFFu, remainder, 16), p, n);
}

// Whether this CPU has the instructions `folded` uses.
inline bool has_fold() noexcept {
    static const bool has = __builtin_cpu_supports("pclmul");
    return has;
}

#else

inline bool has_fold() noexcept {
    return false;
}

#endif

// The CRC of `n` bytes at `p` continuing `crc`, as zlib.crc32(data, crc).
inline std::uint32_t compute(std::uint32_t crc, const void* data, std::size_t n) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
    if (n >= 64 && has_fold()) return folded(crc, p, n);
#endif
    return bytewise(crc, p, n);
}

}  // namespace nvmeio_torch::crc32

#pragma once
/// \file memory.hpp
/// The memory side of every call that moves bytes: a view that carries its own size, so that a
/// transfer's length is the view's and can never pass the end of what the caller owns.
/// `mutable_memory` (read into) and `const_memory` (written from) are made from an aligned_buffer,
/// from any contiguous range of trivially copyable elements (std::vector, std::array, a C array,
/// std::span), or explicitly from a pointer and a size (`memory(p, n)`). A shorter transfer takes
/// a checked sub-view: `memory(v).first(n)`, `memory(v).slice(at, n)`. A view of an aligned_buffer
/// (and every sub-view of it) also carries the buffer's pin record, through which an io_uring
/// context may pin the buffer once (detail/pin_record.hpp); a view from a pointer carries none.

#include <cstddef>
#include <iterator>
#include <string>
#include <type_traits>

#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

class pin_record;

// The element type of a contiguous range `R` with `data()` and `size()`, or void.
template <class R, class = void>
struct contiguous_element {
    using type = void;
};
template <class R>
struct contiguous_element<R, std::void_t<decltype(std::data(std::declval<R&>())),
                                         decltype(std::size(std::declval<R&>()))>> {
    using type = std::remove_pointer_t<decltype(std::data(std::declval<R&>()))>;
};

// A range whose bytes a view may cover as `Void` (void or const void): contiguous, of trivially
// copyable elements (no vector<std::string>), whose constness `Void` keeps. Not a string literal
// (an array of const char), whose view would hold its terminating NUL.
template <class R, class Void, class E = typename contiguous_element<R>::type>
inline constexpr bool bytes_of_range =
    !std::is_void_v<E> && std::is_trivially_copyable_v<E> && std::is_convertible_v<E*, Void*> &&
    !(std::is_array_v<R> && std::is_same_v<E, const char>);

// An object whose address is not its memory: a class that is not trivially copyable (an
// aligned_buffer, a vector) or that has data() and size() (a string_view, a span, a view), so
// that `&object` for `object.data()` does not compile.
template <class T, class = void>
struct has_data_and_size : std::false_type {};
template <class T>
struct has_data_and_size<
    T, std::void_t<decltype(std::declval<T&>().data()), decltype(std::declval<T&>().size())>>
    : std::true_type {};
// The pin record of a range that has one (an aligned_buffer's `pins()`), or null.
template <class R, class = void>
struct has_pins : std::false_type {};
template <class R>
struct has_pins<R, std::void_t<decltype(std::declval<R&>().pins())>>
    : std::is_same<decltype(std::declval<R&>().pins()), pin_record*> {};
template <class R>
pin_record* pins_of(R& range) noexcept {
    if constexpr (has_pins<R>::value) {
        return range.pins();
    } else {
        return nullptr;
    }
}

template <class T>
inline constexpr bool not_its_memory = std::is_class_v<T> && (!std::is_trivially_copyable_v<T> ||
                                                              has_data_and_size<T>::value);

}  // namespace detail

/// `size()` bytes at `data()`, writable when `Void` is void.
template <class Void>
class basic_memory {
  public:
    using byte_type = std::conditional_t<std::is_const_v<Void>, const std::byte, std::byte>;

    /// No bytes.
    constexpr basic_memory() noexcept = default;
    /// `size` bytes at `data`: the caller vouches for them. Explicit, so that braces cannot
    /// pass for it (`{p, offset}` with the length after it).
    constexpr explicit basic_memory(Void* data, std::size_t size) noexcept
        : data_(data), size_(size) {}
    /// The same, inside the aligned_buffer whose pin record is `pins` (a ring pins nothing
    /// outside the record's buffer).
    constexpr explicit basic_memory(Void* data, std::size_t size, detail::pin_record* pins) noexcept
        : data_(data), size_(size), pins_(pins) {}
    /// `&buffer` for `buffer.data()` would cover the object's own bytes: refused.
    template <class T, std::enable_if_t<detail::not_its_memory<T>, int> = 0>
    basic_memory(T* object, std::size_t size) = delete;
    /// Every byte of a contiguous range (an aligned_buffer, a vector, an array, a span).
    template <class R, std::enable_if_t<detail::bytes_of_range<R, Void>, int> = 0>
    constexpr basic_memory(R& range) noexcept  // NOLINT(google-explicit-constructor): a range
        : data_(std::data(range)),
          size_(std::size(range) * sizeof(*std::data(range))),
          pins_(detail::pins_of(range)) {}
    /// A temporary range dies before an asynchronous transfer of it runs: refused (a non-const
    /// one binds to no `R&`).
    template <class R, std::enable_if_t<detail::bytes_of_range<const R, Void>, int> = 0>
    basic_memory(const R&& range) = delete;
    /// Writable memory is also readable.
    template <class V = Void, std::enable_if_t<std::is_const_v<V>, int> = 0>
    constexpr basic_memory(const basic_memory<void>& other) noexcept  // NOLINT: a conversion
        : data_(other.data()), size_(other.size()), pins_(other.pins()) {}

    /// The first byte (null for an empty view made so).
    [[nodiscard]] constexpr Void* data() const noexcept { return data_; }
    /// The first byte, as bytes.
    [[nodiscard]] byte_type* bytes() const noexcept { return static_cast<byte_type*>(data_); }
    /// The bytes it covers.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return size_; }
    [[nodiscard]] constexpr bool empty() const noexcept { return size_ == 0; }
    /// The pin record of the aligned_buffer it views, or null (see the file comment).
    [[nodiscard]] constexpr detail::pin_record* pins() const noexcept { return pins_; }

    /// The first `n` bytes; std::invalid_argument when it holds fewer.
    [[nodiscard]] basic_memory first(std::size_t n) const { return slice(0, n); }
    /// `n` bytes from byte `at`; std::invalid_argument when they pass its end.
    [[nodiscard]] basic_memory slice(std::size_t at, std::size_t n) const {
        if (at > size_ || n > size_ - at) {
            detail::throw_invalid("a view of " + std::to_string(n) + " bytes at byte " +
                                  std::to_string(at) + " of memory holding " +
                                  std::to_string(size_) + " bytes passes its end");
        }
        return basic_memory(bytes() + at, n, pins_);
    }

  private:
    Void* data_ = nullptr;
    std::size_t size_ = 0;
    detail::pin_record* pins_ = nullptr;
};

/// Memory a transfer may write into.
using mutable_memory = basic_memory<void>;
/// Memory a transfer only reads.
using const_memory = basic_memory<const void>;

/// `size` bytes at `data`, said explicitly.
[[nodiscard]] constexpr mutable_memory memory(void* data, std::size_t size) noexcept {
    return mutable_memory(data, size);
}
/// `size` bytes at `data`, said explicitly.
[[nodiscard]] constexpr const_memory memory(const void* data, std::size_t size) noexcept {
    return const_memory(data, size);
}
/// `&object` for `object.data()`: see basic_memory.
template <class T, std::enable_if_t<detail::not_its_memory<T>, int> = 0>
mutable_memory memory(T* object, std::size_t size) = delete;
/// A view, as it is (so that `memory(view).first(n)` reads as for a range).
[[nodiscard]] constexpr mutable_memory memory(mutable_memory view) noexcept {
    return view;
}
/// A view, as it is.
[[nodiscard]] constexpr const_memory memory(const_memory view) noexcept {
    return view;
}
/// Every byte of a contiguous range; const when the range is.
template <class R, std::enable_if_t<detail::bytes_of_range<R, const void>, int> = 0>
[[nodiscard]] constexpr auto memory(R& range) noexcept {
    if constexpr (detail::bytes_of_range<R, void>) {
        return mutable_memory(range);
    } else {
        return const_memory(range);
    }
}
/// A temporary range: see basic_memory.
template <class R, std::enable_if_t<detail::bytes_of_range<const R, const void>, int> = 0>
void memory(const R&& range) = delete;

namespace detail {
// The engine moves bytes both ways through one kind of view; a write only reads them.
inline mutable_memory unconst(const_memory m) noexcept {
    return mutable_memory(const_cast<void*>(m.data()), m.size(), m.pins());
}
}  // namespace detail

NVMEIO_END_NAMESPACE

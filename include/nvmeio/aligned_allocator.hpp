#pragma once
/// \file aligned_allocator.hpp
/// Memory that O_DIRECT accepts: a standard allocator and an owning, move-only buffer.

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "nvmeio/alignment.hpp"
#include "nvmeio/detail/pin_record.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// A standard-conforming allocator whose storage is aligned to `Alignment` bytes, so that a
/// `std::vector<std::byte, aligned_allocator<std::byte>>` can be handed to an O_DIRECT transfer.
/// `Alignment` must be a power of two no smaller than `alignof(T)`.
template <class T, std::size_t Alignment = 4096>
class aligned_allocator {
    static_assert(Alignment != 0 && (Alignment & (Alignment - 1)) == 0,
                  "aligned_allocator: Alignment must be a power of two");
    static_assert(Alignment >= alignof(T), "aligned_allocator: Alignment below alignof(T)");

  public:
    using value_type = T;                                           ///< Allocator requirement.
    using size_type = std::size_t;                                  ///< Allocator requirement.
    using difference_type = std::ptrdiff_t;                         ///< Allocator requirement.
    using propagate_on_container_move_assignment = std::true_type;  ///< Stateless: always.
    using is_always_equal = std::true_type;              ///< Stateless: every instance is equal.
    static constexpr std::size_t alignment = Alignment;  ///< The guaranteed alignment.

    /// Rebinds to another element type with the same alignment.
    template <class U>
    struct rebind {
        using other = aligned_allocator<U, Alignment>;  ///< The rebound allocator.
    };

    constexpr aligned_allocator() noexcept = default;
    /// Converting constructor required by the Allocator requirements.
    template <class U>
    constexpr aligned_allocator(const aligned_allocator<U, Alignment>&) noexcept {}  // NOLINT

    /// Allocates storage for `count` objects aligned to `Alignment`; throws std::bad_alloc.
    [[nodiscard]] T* allocate(std::size_t count) {
        if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
            throw std::bad_array_new_length();
        return static_cast<T*>(::operator new (count * sizeof(T), std::align_val_t{Alignment}));
    }

    /// Releases storage obtained from `allocate`.
    void deallocate(T* pointer, std::size_t) noexcept {
        ::operator delete (pointer, std::align_val_t{Alignment});
    }
};

/// Every aligned_allocator of the same alignment can free the others' memory.
template <class T, class U, std::size_t A>
constexpr bool operator==(const aligned_allocator<T, A>&, const aligned_allocator<U, A>&) noexcept {
    return true;
}
/// See operator==.
template <class T, class U, std::size_t A>
constexpr bool operator!=(const aligned_allocator<T, A>&, const aligned_allocator<U, A>&) noexcept {
    return false;
}

/// How an `aligned_buffer` prepares its memory before the first transfer.
struct buffer_options {
    /// Touch every page now, so the first transfer does not pay page faults inside the I/O.
    bool prefault = false;
    /// Ask for transparent huge pages (`madvise(MADV_HUGEPAGE)`); a hint, ignored if refused.
    bool huge_pages = false;
    /// `mlock` the memory; throws `io_error` if the lock is refused (see RLIMIT_MEMLOCK).
    bool lock = false;
};

/// An owning, move-only block of aligned memory for O_DIRECT transfers. `size()` is what the
/// caller asked for; `capacity()` is `size()` rounded up to `alignment()`, so an aligned
/// over-read of a file tail always lands inside the buffer.
///
/// An io_uring context that moves bytes through it again may pin it once: the buffer's pin record
/// (`pins()`) travels with every view made from it, and freeing the buffer first makes every
/// ring that pinned it let go (detail/pin_record.hpp).
class aligned_buffer {
  public:
    /// An empty buffer.
    aligned_buffer() noexcept = default;

    /// Allocates `size` bytes aligned to `alignment` (a power of two, at least 64, default 4096).
    /// Throws std::invalid_argument for a bad alignment or a size whose rounded-up capacity does
    /// not fit in `std::size_t`, std::bad_alloc when memory is short, and io_error when
    /// `options.lock` is set and `mlock` fails.
    explicit aligned_buffer(std::size_t size, std::size_t alignment = 4096,
                            buffer_options options = {})
        : size_(size), alignment_(alignment) {
        if (alignment < 64 || (alignment & (alignment - 1)) != 0) {
            detail::throw_invalid("aligned_buffer: alignment " + std::to_string(alignment) +
                                  " is not a power of two >= 64");
        }
        if (size > std::numeric_limits<std::size_t>::max() - (alignment - 1)) {
            detail::throw_invalid("aligned_buffer: size " + std::to_string(size) +
                                  " rounded up to the alignment " + std::to_string(alignment) +
                                  " does not fit in std::size_t");
        }
        capacity_ = static_cast<std::size_t>(align_up(size, alignment));
        if (capacity_ == 0) return;
        // Huge pages need 2 MiB-aligned regions to be of any use.
        const std::size_t huge = std::size_t{2} << 20;
        const std::size_t real_alignment =
            options.huge_pages && capacity_ >= huge && alignment < huge ? huge : alignment;
        allocation_alignment_ = real_alignment;
        data_ =
            static_cast<std::byte*>(::operator new (capacity_, std::align_val_t{real_alignment}));
        if (options.huge_pages) (void)::madvise(data_, capacity_, MADV_HUGEPAGE);
        if (options.prefault) {
            const std::size_t step = page_size();
            for (std::size_t at = 0; at < capacity_; at += step)
                data_[at] = std::byte{0};
        }
        if (options.lock) {
            if (::mlock(data_, capacity_) != 0) {
                const int error = errno;
                release();
                throw io_error({detail::errno_code(error), "mlock of buffer", "", 0, capacity_});
            }
            locked_ = true;
        }
        try {
            pins_ = detail::pin_record::make(data_, capacity_);
        } catch (...) {
            release();
            throw;
        }
    }

    aligned_buffer(const aligned_buffer&) = delete;
    aligned_buffer& operator=(const aligned_buffer&) = delete;

    /// Takes the other buffer's memory; the other is left empty.
    aligned_buffer(aligned_buffer&& other) noexcept { swap(other); }
    /// Frees this buffer's memory and takes the other's.
    aligned_buffer& operator=(aligned_buffer&& other) noexcept {
        if (this != &other) {
            release();
            swap(other);
        }
        return *this;
    }
    ~aligned_buffer() { release(); }

    /// The first byte; aligned to `alignment()`. Null for an empty buffer.
    [[nodiscard]] std::byte* data() noexcept { return data_; }
    /// The first byte; aligned to `alignment()`. Null for an empty buffer.
    [[nodiscard]] const std::byte* data() const noexcept { return data_; }
    /// The size asked for.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// The usable size: `size()` rounded up to `alignment()`.
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    /// The alignment of `data()`.
    [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
    /// True when the memory is `mlock`ed.
    [[nodiscard]] bool locked() const noexcept { return locked_; }
    /// True for a buffer of size zero.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// What io_uring rings that pin this memory share with it (views made from the buffer carry
    /// it); null for an empty buffer.
    [[nodiscard]] detail::pin_record* pins() const noexcept { return pins_; }

    /// Exchanges two buffers.
    void swap(aligned_buffer& other) noexcept {
        std::swap(data_, other.data_);
        std::swap(size_, other.size_);
        std::swap(capacity_, other.capacity_);
        std::swap(alignment_, other.alignment_);
        std::swap(allocation_alignment_, other.allocation_alignment_);
        std::swap(locked_, other.locked_);
        std::swap(pins_, other.pins_);
    }

  private:
    void release() noexcept {
        if (data_ == nullptr) return;
        // No ring keeps it pinned past here, whichever copy of nvmeio made the ring.
        if (pins_ != nullptr) {
            if (pins_->free_memory()) pins_->drop();  // else a child leaves its ancestor's record
            pins_ = nullptr;
        }
        if (locked_) (void)::munlock(data_, capacity_);
        ::operator delete (data_, std::align_val_t{allocation_alignment_});
        data_ = nullptr;
        size_ = capacity_ = 0;
        locked_ = false;
    }

    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    std::size_t alignment_ = 4096;
    std::size_t allocation_alignment_ = 4096;
    bool locked_ = false;
    detail::pin_record* pins_ = nullptr;  // shared with the rings that pin it
};

NVMEIO_END_NAMESPACE

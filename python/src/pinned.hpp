#pragma once
/// \file pinned.hpp
/// DeepSpeed's `new_cpu_locked_tensor` / `free_cpu_locked_tensor`: tensors over page-aligned,
/// page-locked `nvmeio::aligned_buffer`s, which O_DIRECT moves without a copy.
///
/// As DeepSpeed's, the registry is process-wide: a tensor one handle (or `pin_handle`) hands out
/// is recognised, and may be freed, by every other.
///
/// A tensor owns its memory: it is unlocked and freed when the last tensor viewing it goes, so
/// `free_cpu_locked_tensor` can never leave a tensor pointing at freed memory (DeepSpeed's frees
/// at once). What `free` does is disown the tensor: the registry forgets it, and it says whether
/// the tensor was one it handed out.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include <sys/mman.h>

#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/alignment.hpp>
#include <nvmeio/error.hpp>

#include <torch/types.h>

#include "own_storage.hpp"
#include "storage_hold.hpp"

namespace nvmeio_torch {

/// Refuses a caller's value: pybind11 raises std::invalid_argument as ValueError.
[[noreturn]] inline void throw_invalid(const std::string& message) {
    throw std::invalid_argument("nvmeio: " + message);
}

/// Fresh page-aligned memory of `bytes` bytes; locked where `lock` asks and the kernel allows
/// (RLIMIT_MEMLOCK): where it refuses, the memory is still page-aligned, which is all O_DIRECT
/// needs to move it without a copy.
inline nvmeio::aligned_buffer page_aligned(std::size_t bytes, bool lock) {
    if (lock) {
        try {
            return nvmeio::aligned_buffer(bytes, 4096, {false, false, true});
        } catch (const nvmeio::io_error&) {  // mlock refused
        }
    }
    return nvmeio::aligned_buffer(bytes, 4096);
}

namespace detail {
// What a tensor over nvmeio's memory owns, and what runs when the last tensor viewing it goes.
struct owned_memory {
    nvmeio::aligned_buffer memory;
    std::function<void(void*)> on_free;
};

inline void free_owned(void* context) {
    std::unique_ptr<owned_memory> owned(static_cast<owned_memory*>(context));
    if (owned->on_free) owned->on_free(owned->memory.data());
}
}  // namespace detail

/// A tensor of `count` elements of `type` over `memory`, which it owns: `on_free` (if any) runs
/// with the memory's address when the last tensor viewing it goes, then the memory is freed.
inline torch::Tensor tensor_over(nvmeio::aligned_buffer memory, std::int64_t count,
                                 c10::ScalarType type, std::function<void(void*)> on_free = {}) {
    void* data = memory.data();
    const std::size_t bytes = memory.size();
    auto owned = std::make_unique<detail::owned_memory>(
        detail::owned_memory{std::move(memory), std::move(on_free)});
    c10::DataPtr pointer(data, owned.get(), &detail::free_owned, c10::Device(c10::kCPU));
    owned.release();  // the DataPtr deletes it from here on
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(pointer), nullptr,
                         false);
    return torch::empty({0}, torch::TensorOptions().dtype(type)).set_(storage, 0, {count}, {1});
}

namespace detail {
// The memory `tensor_over` made under `tensor`, seen through a pending request's hold
// (storage_hold.hpp) and through a storage of part of it (own_storage.hpp); else null.
inline owned_memory* owned_memory_of(const torch::Tensor& tensor) {
    if (!tensor.has_storage()) return nullptr;
    const c10::Storage* storage = &tensor.storage();
    for (int depth = 0; depth < 2; ++depth) {  // a piece of an arena, then the arena
        const c10::DataPtr& memory = storage_hold::allocation_of(*storage);
        if (memory.get_deleter() == &free_owned) {
            return static_cast<owned_memory*>(memory.get_context());
        }
        storage = storage_of_piece(memory);
        if (storage == nullptr) return nullptr;
    }
    return nullptr;
}
}  // namespace detail

/// True when `tensor` views memory that `tensor_over` made.
[[nodiscard]] inline bool owned_by_nvmeio(const torch::Tensor& tensor) {
    return detail::owned_memory_of(tensor) != nullptr;
}

/// The bytes of a contiguous CPU tensor as a view. Over nvmeio's memory (tensor_over) the view
/// carries the buffer's pin record, so that an io_uring handle may pin it once; other tensors'
/// memory is never pinned behind torch's back.
inline nvmeio::mutable_memory memory_of(const torch::Tensor& tensor) {
    void* data = tensor.numel() == 0 ? nullptr : tensor.data_ptr();
    const std::size_t bytes = tensor.nbytes();
    detail::owned_memory* owned = data == nullptr ? nullptr : detail::owned_memory_of(tensor);
    if (owned == nullptr) return nvmeio::memory(data, bytes);
    const auto at =
        static_cast<std::size_t>(static_cast<const std::byte*>(data) - owned->memory.data());
    return nvmeio::memory(owned->memory).slice(at, bytes);
}

/// A uint8 tensor of `bytes` bytes over fresh page-aligned memory (locked as `page_aligned`
/// says) that it owns: the memory goes with the last tensor viewing it. The arena that loaded
/// tensors view, and what O_DIRECT reads into without a copy.
inline torch::Tensor aligned_tensor(std::int64_t bytes, bool lock) {
    if (bytes < 0)
        throw_invalid("aligned_tensor: nbytes must not be negative (got " + std::to_string(bytes) +
                      ")");
    return tensor_over(page_aligned(static_cast<std::size_t>(bytes), lock), bytes, torch::kUInt8);
}

/// Brings bytes [offset, offset + length) of one of nvmeio's contiguous tensors into use for
/// writing without changing them (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14+), so that a read
/// into fresh memory finds its pages there instead of faulting them in one by one as it pins
/// them. Only whole pages of the tensor's own memory are touched. False where the kernel cannot
/// or will not (EINVAL before 5.14, ENOMEM, a signal): a hint whose failure changes nothing.
inline bool populate(const torch::Tensor& tensor, std::int64_t offset, std::int64_t length) {
    if (!owned_by_nvmeio(tensor)) throw_invalid("populate: the tensor is not one of nvmeio's");
    if (!tensor.is_contiguous()) throw_invalid("populate: the tensor is not contiguous");
    const std::int64_t bytes = tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
    if (offset < 0 || length < 0 || offset > bytes || length > bytes - offset)
        throw_invalid("populate: bytes [" + std::to_string(offset) + ", +" +
                      std::to_string(length) + ") are not within the tensor's " +
                      std::to_string(bytes));
    using nvmeio::align_down;
    using nvmeio::align_up;
    const std::uint64_t page = nvmeio::page_size();
    const auto own = reinterpret_cast<std::uintptr_t>(tensor.storage().data());
    const std::uint64_t first =
        reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) + static_cast<std::uint64_t>(offset);
    // The pages the range touches, less any that reach outside the storage: a partial last page
    // (the read faults that one), and more where pages are larger than nvmeio's 4096 alignment.
    const std::uint64_t begin = std::max(align_down(first, page), align_up(own, page));
    const std::uint64_t end = std::min(align_up(first + static_cast<std::uint64_t>(length), page),
                                       align_down(own + tensor.storage().nbytes(), page));
    if (length == 0 || begin >= end) return true;
#ifndef MADV_POPULATE_WRITE
    constexpr int MADV_POPULATE_WRITE = 23;  // Linux's value, for headers older than 5.14's
#endif
    return ::madvise(reinterpret_cast<void*>(static_cast<std::uintptr_t>(begin)),
                     static_cast<std::size_t>(end - begin), MADV_POPULATE_WRITE) == 0;
}

/// The locked tensors handed out and not yet given back.
class pinned_registry {
  public:
    /// The process's registry (shared by every handle, as DeepSpeed's pinned-tensor manager).
    static pinned_registry& shared() {
        static pinned_registry* registry = new pinned_registry;  // never destroyed: deleters of
        return *registry;  // tensors that outlive the interpreter's teardown may still call it
    }

    /// A tensor of `count` elements of `type` over fresh page-aligned memory, locked where the
    /// kernel allows (`page_aligned`): locking is what DeepSpeed's callers ask for.
    torch::Tensor allocate(std::int64_t count, c10::ScalarType type) {
        if (count < 0) {
            throw_invalid(
                "new_cpu_locked_tensor: num_elem must not be negative "
                "(got " +
                std::to_string(count) + ")");
        }
        const auto item = static_cast<std::size_t>(c10::elementSize(type));
        if (static_cast<std::uint64_t>(count) > SIZE_MAX / item) {
            throw_invalid("new_cpu_locked_tensor: " + std::to_string(count) + " elements of " +
                          std::to_string(item) + " bytes do not fit in memory");
        }
        const std::size_t bytes = static_cast<std::size_t>(count) * item;
        // At least one byte, so that every tensor, an empty one too, has an address of its own
        // in the registry.
        nvmeio::aligned_buffer memory = page_aligned(std::max<std::size_t>(bytes, 1), true);
        {
            std::lock_guard<std::mutex> lock(state_->mutex);
            state_->live[memory.data()] = bytes;
        }
        // The deleter may run on any thread; it touches only the registry and the memory.
        std::shared_ptr<shared_state> state = state_;
        return tensor_over(std::move(memory), count, type, [state](void* p) {
            std::lock_guard<std::mutex> lock(state->mutex);
            state->live.erase(p);
        });
    }

    /// Disowns `tensor` when it is one of this handle's (viewed from its start); says whether.
    bool release(const torch::Tensor& tensor) {
        if (!tensor.defined() || !tensor.is_cpu()) return false;
        std::lock_guard<std::mutex> lock(state_->mutex);
        return state_->live.erase(tensor.storage().data()) != 0;
    }

    /// True when `tensor`'s bytes lie inside memory this handle handed out and still owns.
    bool owns(const torch::Tensor& tensor) const {
        if (!tensor.defined() || !tensor.is_cpu() || !tensor.has_storage()) return false;
        const auto* p = static_cast<const std::byte*>(tensor.data_ptr());
        std::lock_guard<std::mutex> lock(state_->mutex);
        auto it = state_->live.upper_bound(p);
        if (it == state_->live.begin()) return false;
        --it;
        const auto* base = static_cast<const std::byte*>(it->first);
        return p + tensor.nbytes() <= base + it->second;
    }

    /// Tensors handed out and not released (for tests of leaks).
    [[nodiscard]] std::size_t live() const {
        std::lock_guard<std::mutex> lock(state_->mutex);
        return state_->live.size();
    }

  private:
    struct shared_state {
        mutable std::mutex mutex;
        std::map<const void*, std::size_t> live;  // base address -> bytes
    };
    std::shared_ptr<shared_state> state_ = std::make_shared<shared_state>();
};

}  // namespace nvmeio_torch

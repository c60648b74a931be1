#pragma once
/// \file own_storage.hpp
/// A tensor over part of another (a load's arena) whose storage is exactly those bytes and not
/// resizable: a loaded tensor that views an arena neither carries the rest of it into
/// `torch.save` nor reaches its neighbours through `resize_`. The piece's storage keeps the
/// arena's alive; nothing is copied.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <torch/types.h>

namespace nvmeio_torch {

namespace detail {

// A piece's deleter: its context is the arena's storage, kept for the piece's life.
inline void release_arena(void* context) noexcept {
    delete static_cast<c10::Storage*>(context);
}

}  // namespace detail

/// The arena's storage under a piece that `own_storage` made, or null for any other memory.
[[nodiscard]] inline const c10::Storage* storage_of_piece(const c10::DataPtr& memory) noexcept {
    if (memory.get_deleter() != &detail::release_arena) return nullptr;
    return static_cast<const c10::Storage*>(memory.get_context());
}

/// A uint8 tensor over bytes [at, at + length) of the contiguous CPU tensor `arena`, with a
/// storage of exactly those bytes. std::invalid_argument for bytes outside the arena, or an
/// arena whose storage could be resized (and its memory freed) under the piece.
inline torch::Tensor own_storage(const torch::Tensor& arena, std::int64_t at, std::int64_t length) {
    if (!arena.defined() || !arena.is_cpu() || !arena.is_contiguous()) {
        throw std::invalid_argument(
            "nvmeio: own_storage: the arena must be a contiguous CPU tensor");
    }
    if (arena.storage().resizable()) {  // resizing it would free the memory under the piece
        throw std::invalid_argument(
            "nvmeio: own_storage: the arena's storage must not be resizable");
    }
    const auto bytes = static_cast<std::int64_t>(arena.nbytes());
    if (at < 0 || length < 0 || at > bytes || length > bytes - at) {
        throw std::invalid_argument("nvmeio: own_storage: bytes [" + std::to_string(at) + ", +" +
                                    std::to_string(length) + ") are not within the arena's " +
                                    std::to_string(bytes));
    }
    auto kept = std::make_unique<c10::Storage>(arena.storage());
    void* data = static_cast<std::byte*>(arena.data_ptr()) + at;
    c10::DataPtr pointer(data, kept.get(), &detail::release_arena, c10::Device(c10::kCPU));
    kept.release();  // the DataPtr deletes it from here on
    c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<std::size_t>(length),
                         std::move(pointer), nullptr, false);
    return torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8))
        .set_(storage, 0, {length}, {1});
}

}  // namespace nvmeio_torch

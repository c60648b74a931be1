#pragma once
/// \file staging_ring.hpp
/// The ring of a staged transfer (staged.hpp): K aligned host slots attached to a copy engine,
/// which moves bytes between a slot and memory the kernel cannot reach (a GPU's).
///
/// A copy engine is any type with these members (`host_copy_engine` below is the reference;
/// cuda.hpp has the GPU's; slots are numbered 0..K-1):
/// - `attach(std::byte* memory, std::size_t slot_size, unsigned slots)`: the ring's memory,
///   once (page-lock it, make one completion marker per slot); `detach() noexcept` undoes it
///   after waiting for every copy started, recorded or not;
/// - `copy_from_slot(slot, std::uintptr_t to, const std::byte* from, n)` and
///   `copy_to_slot(slot, std::byte* to, std::uintptr_t from, n)`: start a copy (it may complete
///   later, and may read or write the slot until then); one that throws started nothing;
/// - `record(slot)`: the slot's copies started so far complete together;
/// - `wait(slot)`: blocks until they have (throws if one failed); `ready(slot)`: asks, without
///   blocking;
/// - `bool wait_all() noexcept`: blocks until every copy started so far has ended, recorded or
///   not; false if one failed (or the wait did). A transfer that fails calls it before the
///   exception leaves, so no copy outlives the call that started it, even when `record` threw.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// The reference copy engine: memcpy between slots and host addresses, complete at once.
class host_copy_engine {
  public:
    /// Nothing to lock or mark.
    void attach(std::byte*, std::size_t, unsigned) noexcept {}
    /// Nothing to undo.
    void detach() noexcept {}
    /// Copies `n` bytes of the slot to host address `to`.
    void copy_from_slot(unsigned, std::uintptr_t to, const std::byte* from, std::size_t n) {
        std::memcpy(reinterpret_cast<void*>(to), from, n);
    }
    /// Copies `n` bytes at host address `from` into the slot.
    void copy_to_slot(unsigned, std::byte* to, std::uintptr_t from, std::size_t n) {
        std::memcpy(to, reinterpret_cast<const void*>(from), n);
    }
    /// Copies are complete when started.
    void record(unsigned) noexcept {}
    /// Copies are complete when started.
    void wait(unsigned) noexcept {}
    /// Copies are complete when started.
    bool wait_all() noexcept { return true; }
    /// Always.
    [[nodiscard]] bool ready(unsigned) const noexcept { return true; }
};

/// K aligned slots attached to a copy engine (page-locked by a GPU's) for as long as the ring
/// lives; reused by every staged transfer through it, one at a time (a second `staged_run` on a
/// ring in use is an std::logic_error). Move-only.
template <class CopyEngine>
class staging_ring {
  public:
    /// Allocates `options.slots × options.slot_size` bytes and attaches them to `engine`, which
    /// must outlive the ring. std::invalid_argument for a bad option, naming it.
    staging_ring(CopyEngine& engine, ring_options options)
        : engine_(&engine),
          options_(checked(options)),
          memory_(options_.slot_size * options_.slots) {
        engine_->attach(memory_.data(), options_.slot_size, options_.slots);
    }
    staging_ring(const staging_ring&) = delete;
    staging_ring& operator=(const staging_ring&) = delete;
    /// Takes the other's memory and attachment (the other must not be in use).
    staging_ring(staging_ring&& other) noexcept
        : engine_(std::exchange(other.engine_, nullptr)),
          options_(other.options_),
          memory_(std::move(other.memory_)) {}
    staging_ring& operator=(staging_ring&&) = delete;
    /// Detaches the memory (the engine waits for every slot) and frees it.
    ~staging_ring() {
        if (engine_ != nullptr) engine_->detach();
    }

    /// The copy engine.
    [[nodiscard]] CopyEngine& engine() const noexcept { return *engine_; }
    /// Slots and their size.
    [[nodiscard]] const ring_options& options() const noexcept { return options_; }
    /// The first byte of slot `slot`.
    [[nodiscard]] std::byte* slot(unsigned slot) noexcept {
        return memory_.data() + std::size_t{slot} * options_.slot_size;
    }
    /// The first `length` bytes of slot `slot`, as a view of the ring's memory (which an io_uring
    /// context may then pin once); std::invalid_argument past the slot's end.
    [[nodiscard]] mutable_memory slot_memory(unsigned slot, std::size_t length) {
        if (length > options_.slot_size) {
            detail::throw_invalid("staging_ring: " + std::to_string(length) +
                                  " bytes do not fit in a slot of " +
                                  std::to_string(options_.slot_size));
        }
        return memory(memory_).slice(std::size_t{slot} * options_.slot_size, length);
    }
    /// Host bytes the ring holds.
    [[nodiscard]] std::size_t bytes() const noexcept { return memory_.size(); }

    /// Marks the ring in use by one transfer; std::logic_error when another has it.
    void take() {
        if (in_use_.exchange(true)) {
            throw std::logic_error("staging_ring: another transfer is using this ring");
        }
    }
    /// Lets the next transfer take the ring.
    void give_back() noexcept { in_use_ = false; }

  private:
    static ring_options checked(ring_options options) {
        if (options.slots == 0) detail::throw_invalid("staging_ring: slots must be at least 1");
        if (options.slot_size == 0 || options.slot_size % 4096 != 0 ||
            options.slot_size > std::numeric_limits<std::size_t>::max() / options.slots) {
            detail::throw_invalid("staging_ring: slot_size " + std::to_string(options.slot_size) +
                                  " is not a positive multiple of 4096 whose " +
                                  std::to_string(options.slots) + " slots fit in memory");
        }
        return options;
    }

    CopyEngine* engine_;
    ring_options options_;
    aligned_buffer memory_;
    std::atomic<bool> in_use_{false};
};

NVMEIO_END_NAMESPACE

#pragma once
/// \file storage_hold.hpp
/// What a pending operation keeps of the tensors it moves: each one's storage and the memory
/// under it, until the operation has finished. A request that kept only the tensor would lose
/// its memory to `t.data = other` or `t.set_(...)` (the tensor points elsewhere and the old
/// storage may be freed), to `t.resize_(larger)` or `t.storage().resize_(0)` (the storage's
/// memory is replaced in place), or to `share_memory_()` (moved into shared memory in place)
/// while the kernel or a copy engine still uses it. Held:
///  - the storage stays alive, so `.data =` and `set_` leave it to the operation;
///  - it is not resizable, so `resize_` raises torch's "not resizable" error;
///  - a CPU storage's memory is kept apart from the storage (the storage gets a pointer to the
///    same bytes whose deleter drops one of two references to the original allocation, the
///    hold having the other), so what replaces the memory in place leaves the original to the
///    operation until the hold ends. The storage gets its own allocation back then, if it still
///    has the hold's pointer.
///
/// Made and destroyed with the GIL held. The registry of held storages is process-wide (several
/// handles may hold one storage); a child after fork that abandons its parent's requests leaves
/// their storages held.

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <torch/types.h>

namespace nvmeio_torch {

class storage_hold {
  public:
    storage_hold() = default;
    /// Holds the storage of every defined tensor of `tensors` (each storage once).
    explicit storage_hold(const std::vector<torch::Tensor>& tensors) {
        try {
            for (const torch::Tensor& t : tensors) {
                if (!t.defined() || !t.has_storage()) continue;
                c10::Storage storage = t.storage();
                c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
                bool seen = false;
                for (const c10::Storage& held : storages_)
                    seen = seen || held.unsafeGetStorageImpl() == impl;
                if (seen) continue;
                storages_.reserve(storages_.size() + 1);  // before the hold: nothing throws after
                registry().hold(impl);
                storages_.push_back(std::move(storage));
            }
        } catch (...) {
            release();
            throw;
        }
    }
    storage_hold(const storage_hold&) = delete;
    storage_hold& operator=(const storage_hold&) = delete;
    storage_hold(storage_hold&& other) noexcept : storages_(std::move(other.storages_)) {
        other.storages_.clear();
    }
    storage_hold& operator=(storage_hold&& other) noexcept {
        if (this != &other) {
            release();
            storages_ = std::move(other.storages_);
            other.storages_.clear();
        }
        return *this;
    }
    ~storage_hold() { release(); }

    /// The allocation under `storage`: its own pointer, or while a hold keeps it apart, the
    /// original (so that what recognises memory by its deleter sees through a hold).
    static const c10::DataPtr& allocation_of(const c10::Storage& storage) noexcept {
        const c10::DataPtr& memory = storage.data_ptr();
        if (memory.get_deleter() != &drop) return memory;
        return static_cast<const kept_allocation*>(memory.get_context())->original;
    }

    /// Lets go of the storages: once no hold has one, it is resizable again (where it was) and
    /// has its own allocation back (where nothing replaced it meanwhile).
    void release() noexcept {
        for (const c10::Storage& s : storages_)
            registry().release(s.unsafeGetStorageImpl());
        storages_.clear();
    }

  private:
    // A CPU storage's original allocation while held: one reference from the pointer the
    // storage was given, one from the registry.
    struct kept_allocation {
        c10::DataPtr original;
        std::atomic<int> references{2};
    };
    static void drop(void* context) noexcept {
        auto* kept = static_cast<kept_allocation*>(context);
        if (--kept->references == 0) delete kept;
    }

    class held_storages {
      public:
        void hold(c10::StorageImpl* impl) {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto [found, added] = entries_.try_emplace(impl);
            entry& e = found->second;
            if (!added) {
                ++e.holds;
                return;
            }
            try {
                const c10::DataPtr& memory = impl->data_ptr();
                if (memory.device().is_cpu() && memory.get() != nullptr) {
                    auto kept = std::make_unique<kept_allocation>();
                    c10::DataPtr shared(memory.get(), kept.get(), &drop, memory.device());
                    kept->original = impl->set_data_ptr(std::move(shared));
                    e.kept = kept.release();
                }
            } catch (...) {
                entries_.erase(found);
                throw;
            }
            e.was_resizable = impl->resizable();
            if (e.was_resizable) impl->set_resizable(false);
        }

        void release(c10::StorageImpl* impl) noexcept {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto found = entries_.find(impl);
            if (found == entries_.end() || --found->second.holds != 0) return;
            entry& e = found->second;
            if (e.kept != nullptr) {
                const c10::DataPtr& memory = impl->data_ptr();
                if (memory.get_context() == e.kept && memory.get_deleter() == &drop) {
                    // Still the hold's pointer: the storage takes its allocation back, and the
                    // pointer it had drops its reference as it goes.
                    (void)impl->set_data_ptr(std::move(e.kept->original));
                }
                drop(e.kept);  // the registry's reference: the last one frees what was replaced
            }
            // Resizable again only with an allocator to resize with (share_memory_ leaves none).
            if (e.was_resizable && impl->allocator() != nullptr) impl->set_resizable(true);
            entries_.erase(found);
        }

      private:
        struct entry {
            std::size_t holds = 1;
            bool was_resizable = false;
            kept_allocation* kept = nullptr;
        };
        std::mutex mutex_;
        std::unordered_map<c10::StorageImpl*, entry> entries_;
    };

    static held_storages& registry() {
        static held_storages* storages = new held_storages;  // never destroyed: holds may end
        return *storages;                                    // during the interpreter's teardown
    }

    std::vector<c10::Storage> storages_;
};

}  // namespace nvmeio_torch

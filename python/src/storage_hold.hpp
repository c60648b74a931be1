#pragma once
/// \file storage_hold.hpp
/// What a pending operation keeps of the tensors it moves: each one's storage, alive and not
/// resizable until the operation has finished. A request that kept only the tensor would lose
/// its memory to `t.data = other`, `t.set_(...)` (the tensor then points elsewhere and the old
/// storage may be freed), `t.resize_(larger)` or `t.storage().resize_(0)` (the storage's memory
/// is replaced in place) while the kernel or a copy engine still uses it. Held, the first two
/// leave the old storage to the operation, and the last two raise torch's "storage that is not
/// resizable" error instead of freeing memory in use.
///
/// Made and destroyed with the GIL held (the storages' counts are torch's; the registry of
/// storages made unresizable is process-wide, as several handles may hold one storage).

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
        for (const torch::Tensor& t : tensors) {
            if (!t.defined() || !t.has_storage()) continue;
            c10::Storage storage = t.storage();
            c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
            bool seen = false;
            for (const c10::Storage& held : storages_)
                seen = seen || held.unsafeGetStorageImpl() == impl;
            if (seen) continue;
            registry().hold(impl);
            storages_.push_back(std::move(storage));
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

    /// Lets go of the storages (they become resizable again once no hold has them).
    void release() noexcept {
        for (const c10::Storage& s : storages_)
            registry().release(s.unsafeGetStorageImpl());
        storages_.clear();
    }

  private:
    // Per storage held: how many holds have it, and whether it was resizable before the first.
    class held_storages {
      public:
        void hold(c10::StorageImpl* impl) {
            std::lock_guard<std::mutex> lock(mutex_);
            entry& e = entries_[impl];
            if (e.holds++ == 0) {
                e.was_resizable = impl->resizable();
                if (e.was_resizable) impl->set_resizable(false);
            }
        }
        void release(c10::StorageImpl* impl) noexcept {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto found = entries_.find(impl);
            if (found == entries_.end()) return;
            if (--found->second.holds == 0) {
                if (found->second.was_resizable) impl->set_resizable(true);
                entries_.erase(found);
            }
        }

      private:
        struct entry {
            std::size_t holds = 0;
            bool was_resizable = false;
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

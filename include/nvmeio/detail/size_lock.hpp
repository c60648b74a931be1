#pragma once
/// \file detail/size_lock.hpp
/// One mutex per file (device and inode number) in this process, shared by every `file` handle
/// of that file. nvmeio holds it around every change it makes to a file's size, so that a
/// writer that must grow the file by a whole O_DIRECT unit and trim it back (file::write_at)
/// never trims below the end another writer has reserved (file::reserve_range). See file.hpp.
///
/// fork: the prepare handler takes the registry and every file's mutex, so that a child never
/// inherits one locked by a thread that does not exist in it.

#include <pthread.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE
namespace detail {

class size_lock_registry {
  public:
    /// The process's registry (never destroyed: handles in static objects may outlive main).
    static size_lock_registry& instance() {
        static size_lock_registry* const registry = [] {
            auto* r = new size_lock_registry;
            ::pthread_atfork(&before_fork, &after_fork, &after_fork);
            return r;
        }();
        return *registry;
    }

    /// The mutex of the file `(device, inode)`, created with its first handle.
    std::shared_ptr<std::mutex> lock_for(dev_t device, ino_t inode) {
        const key id{device, inode};
        std::lock_guard<std::mutex> guard(mutex_);
        auto found = locks_.find(id);
        if (found != locks_.end()) {
            if (std::shared_ptr<std::mutex> existing = found->second.lock()) return existing;
        }
        std::shared_ptr<std::mutex> created(new std::mutex, [id](std::mutex* m) {
            instance().forget(id);
            delete m;
        });
        locks_[id] = created;
        return created;
    }

  private:
    using key = std::pair<dev_t, ino_t>;

    size_lock_registry() = default;

    // The last handle of a file is gone; a newer entry for the same file stays.
    void forget(const key& id) {
        std::lock_guard<std::mutex> guard(mutex_);
        auto found = locks_.find(id);
        if (found != locks_.end() && found->second.expired()) locks_.erase(found);
    }

    static void before_fork() {
        size_lock_registry& r = instance();
        r.mutex_.lock();
        for (auto& entry : r.locks_) {
            if (std::shared_ptr<std::mutex> m = entry.second.lock())
                r.held_.push_back(std::move(m));
        }
        for (auto& m : r.held_)
            m->lock();
    }

    static void after_fork() {  // in the parent and in the child: the same thread unlocks
        size_lock_registry& r = instance();
        std::vector<std::shared_ptr<std::mutex>> held;
        held.swap(r.held_);
        for (auto& m : held)
            m->unlock();
        r.mutex_.unlock();
        // `held` releases its references here, after the registry is unlocked: the last one
        // of a file erases its entry under the registry's mutex.
    }

    std::mutex mutex_;
    std::map<key, std::weak_ptr<std::mutex>> locks_;
    std::vector<std::shared_ptr<std::mutex>> held_;  // locked across a fork
};

}  // namespace detail
NVMEIO_END_NAMESPACE

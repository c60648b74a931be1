#pragma once
/// \file backend/io_uring_registered.hpp
/// What is registered with an io_uring ring, so that the kernel pins pages or looks a descriptor
/// up once instead of per request: buffers (the caller's, and nvmeio's own memory pinned once it
/// moves again) and files. Pin once's rules: docs/perf/pin_once.md; its promises:
/// docs/GUARANTEES.md.

#include "nvmeio/backend/io_uring_support.hpp"
#include "nvmeio/version.hpp"

#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/detail/pin_record.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Where a buffer registered with an io_uring_backend lives; the backend owns the memory.
struct registered_buffer {
    std::byte* data = nullptr;  ///< First byte (aligned as the aligned_buffer was).
    std::size_t size = 0;       ///< The aligned_buffer's size().
};

/// How an io_uring_backend used its registrations so far.
struct registration_use {
    std::uint64_t fixed_buffer_requests = 0;  ///< READ_FIXED / WRITE_FIXED (pinned or by hand).
    std::uint64_t fixed_file_requests = 0;    ///< IOSQE_FIXED_FILE.
    std::uint64_t pinned = 0;    ///< Pieces of nvmeio's memory this ring pinned on its own.
    std::uint64_t unpinned = 0;  ///< Of those, let go because their memory was being freed.
    int pin_refused = 0;         ///< The errno with which the kernel refused to pin; 0 if never.
};

#if NVMEIO_HAS_IO_URING

namespace detail {

// One ring's registered buffers, in a sparse table of `slots`. Pin once takes the 64 MiB `piece`
// of an aligned_buffer a request falls in (one that straddles two goes plain), found through the
// request's pin record (detail/pin_record.hpp), which the ring shares while it holds the buffer.
// Thread-safe: the ring's thread looks up and pins, any thread freeing an aligned_buffer unpins;
// table changes from threads other than the ring's issuer wait for it (let_go).
class ring_buffers final : public memory_pinner {
  public:
    static constexpr unsigned slots = 4096;
    static constexpr std::size_t max_length = std::size_t{1} << 30;  // the kernel's, per buffer
    static constexpr std::size_t piece = std::size_t{64} << 20;

    ring_buffers(io_uring& ring, creator_process creator) noexcept
        : ring_(ring), creator_(creator) {}
    ring_buffers(const ring_buffers&) = delete;
    ring_buffers& operator=(const ring_buffers&) = delete;
    ~ring_buffers() { detach(); }

    // Before the ring is torn down: no freed buffer reaches it any more, and it shares no
    // record. One record at a time leaves `held_` under the ring's mutex, and then the ring's
    // share of it is this function's alone (unpin no longer finds it there).
    void detach() noexcept {
        for (;;) {
            pin_record* record = nullptr;
            {
                const std::lock_guard<std::mutex> lock(mutex_);
                if (held_.empty()) return;
                record = held_.back();
                held_.pop_back();
            }
            record->forget(*this);
            record->drop();
        }
    }

    void set_pin_once(bool on) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        pin_once_ = on;
    }

    // The slot of the registered buffer holding [buffer, buffer + length), or -1; an
    // aligned_buffer that moves again (note_move) is pinned here, through its record `pins`.
    int pin_or_find(const void* buffer, std::size_t length, pin_record* pins) noexcept {
        const auto begin = reinterpret_cast<std::uintptr_t>(buffer);
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            const int found = lookup(begin, length);
            if (found >= 0 || pins == nullptr || !pin_once_ || refused_ != 0) return found;
        }
        if (begin < pins->begin() || begin >= pins->end() || length > pins->end() - begin)
            return -1;  // not in the record's buffer: a view made by hand, wrongly
        int slot = -1;
        try {
            if (!pins->pin(*this, [&](std::vector<piece_use>& uses) {
                    return pin(*pins, uses, begin, length, slot);
                }))
                return -1;
        } catch (...) {  // out of memory for the bookkeeping: go plain
            return -1;
        }
        return slot;
    }

    // Whether a registered buffer holds [buffer, buffer + length) now (pins nothing).
    bool holds(const void* buffer, std::size_t length) const noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        return lookup(reinterpret_cast<std::uintptr_t>(buffer), length) >= 0;
    }

    // Called with `record` locked, before its buffer's memory is freed.
    void unpin(pin_record& record) noexcept override {
        if (!creator_.is_current()) return;  // the parent's ring: not ours to change
        const std::lock_guard<std::mutex> lock(mutex_);
        const pid_t issuer = issuer_.load(std::memory_order_relaxed);
        const bool here = issuer == 0 || issuer == this_thread_id();
        for (auto r = regions_.begin(); r != regions_.end();) {
            if (r->pins != &record) {
                ++r;
                continue;
            }
            if (here) {
                (void)set_slot(r->slot, 0, 0);  // refused, it is refilled or dies with the ring
                free_.push_back(r->slot);
            } else {
                later_.push_back(r->slot);  // for the ring's thread (let_go)
                has_later_.store(true, std::memory_order_release);
            }
            ++unpinned_;
            r = regions_.erase(r);
        }
        // The ring's share: the buffer still holds its own while it frees, so this is not the
        // last, and the record no longer names the ring (the caller clears its pinners).
        if (const auto h = std::find(held_.begin(), held_.end(), &record); h != held_.end()) {
            held_.erase(h);
            record.drop();
        }
    }

    // The thread the ring serves (SINGLE_ISSUER, once enabled), or 0 for any.
    [[nodiscard]] pid_t issuer() const noexcept { return issuer_.load(std::memory_order_relaxed); }

    // Enables the ring with `enable` and makes the calling thread, `me`, its issuer, with no
    // unpin in between; 0 or what `enable` returned.
    template <class Enable>
    int bind(pid_t me, Enable&& enable) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        const int rc = enable();
        if (rc == 0) issuer_.store(me, std::memory_order_relaxed);
        return rc;
    }

    // On the ring's thread: empties the slots of memory freed on other threads.
    void let_go() noexcept {
        if (!has_later_.load(std::memory_order_acquire)) return;
        const std::lock_guard<std::mutex> lock(mutex_);
        for (const unsigned slot : later_)
            (void)empty_slot(slot);  // refused, it stays out of use until the ring goes
        later_.clear();
        has_later_.store(false, std::memory_order_relaxed);
    }

    // Runs `replace`, which sets a new ring up in place of the old one and tears the old one
    // down (with every registration it held), with no table change in between; then fills the
    // new ring's table with the caller's buffers. Pinned memory is pinned again as it moves.
    template <class Replace>
    void replace_ring(Replace&& replace) noexcept {
        const std::lock_guard<std::mutex> lock(mutex_);
        replace();
        issuer_.store(0, std::memory_order_relaxed);
        later_.clear();
        has_later_.store(false, std::memory_order_relaxed);
        table_made_ = false;
        free_.clear();
        // The caller's buffers stay (still in address order), filtered in place: the one
        // allocation left here is refuse's message, once a process (make_table's free_ has had
        // its room since add(), reserve_bookkeeping).
        regions_.erase(std::remove_if(regions_.begin(), regions_.end(),
                                      [](const region& r) { return r.pins != nullptr; }),
                       regions_.end());
        if (regions_.empty()) return;
        int error = make_table();
        for (const region& r : regions_) {
            if (error == 0) error = set_slot(r.slot, r.begin, r.end - r.begin);
            if (error != 0) break;
            free_.erase(std::find(free_.begin(), free_.end(), r.slot));
        }
        if (error != 0) {  // the caller's buffers go plain, and nothing is pinned any more
            regions_.clear();
            (void)refuse(error);
        }
    }

    // Registers the caller's buffers (io_uring_backend::register_buffers documents the rules).
    void add(std::vector<aligned_buffer>&& buffers) {
        if (buffers.empty()) throw_invalid("register_buffers: no buffers given");
        for (std::size_t i = 0; i < buffers.size(); ++i) {
            if (buffers[i].capacity() == 0 || buffers[i].capacity() > max_length) {
                throw_invalid("register_buffers: buffer " + std::to_string(i) + " has " +
                              std::to_string(buffers[i].capacity()) +
                              " bytes; each must hold 1 byte to 1 GiB");
            }
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!owned_.empty()) throw_invalid("register_buffers: buffers are already registered");
        reserve_bookkeeping();
        if (const int rc = make_table(); rc != 0) throw refused(rc, buffers.size());
        if (buffers.size() > free_.size()) {
            throw_invalid("register_buffers: " + std::to_string(buffers.size()) +
                          " buffers, but only " + std::to_string(free_.size()) + " of the ring's " +
                          std::to_string(slots) + " slots are free");
        }
        std::vector<region> added;
        for (aligned_buffer& b : buffers) {
            const auto at = reinterpret_cast<std::uintptr_t>(b.data());
            const int rc = set_slot(free_.back(), at, b.capacity());
            if (rc != 0) {
                for (const region& r : added)
                    (void)empty_slot(r.slot);
                throw refused(rc, buffers.size());
            }
            added.push_back({at, at + b.capacity(), free_.back(), nullptr});
            free_.pop_back();
        }
        for (const region& r : added)
            insert(r);
        owned_ = std::move(buffers);
        buffers.clear();
    }

    // Unregisters the caller's buffers and hands them back (the caller checked that none is in
    // flight).
    std::vector<aligned_buffer> unregister_all() {
        const std::lock_guard<std::mutex> lock(mutex_);
        for (auto r = regions_.begin(); r != regions_.end();) {
            if (r->pins != nullptr) {
                ++r;
                continue;
            }
            if (const int error = empty_slot(r->slot); error != 0)
                throw io_error({errno_code(error), "io_uring_register_buffers_update", "", 0, 0});
            r = regions_.erase(r);
        }
        return std::exchange(owned_, {});
    }

    [[nodiscard]] std::size_t owned_count() const {
        const std::lock_guard<std::mutex> lock(mutex_);
        return owned_.size();
    }

    [[nodiscard]] registered_buffer owned_at(std::size_t index) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (index >= owned_.size()) {
            throw_invalid("registered_buffer_at(" + std::to_string(index) +
                          "): " + std::to_string(owned_.size()) + " buffers are registered");
        }
        return {const_cast<std::byte*>(owned_[index].data()), owned_[index].size()};
    }

    void count(registration_use& use) const {
        const std::lock_guard<std::mutex> lock(mutex_);
        use.pinned = pinned_;
        use.unpinned = unpinned_;
        use.pin_refused = refused_;
    }

  private:
    struct region {
        std::uintptr_t begin;
        std::uintptr_t end;
        unsigned slot;
        pin_record* pins;  // the pinned buffer's record; null for a caller's buffer
    };

    // Called with `record` locked; takes mutex_. Pins the piece of the record's buffer that holds
    // [begin, begin + length) when it moves again (into `slot`), and shares the record while it
    // holds it. The piece is not pinned yet: pin_or_find's lookup found no slot holding it, and
    // only this thread pins.
    bool pin(pin_record& record, std::vector<piece_use>& uses, std::uintptr_t begin,
             std::size_t length, int& slot) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!pin_once_ || refused_ != 0) return false;
        const std::uintptr_t from = record.begin() + (begin - record.begin()) / piece * piece;
        const std::uintptr_t to = std::min<std::uintptr_t>(record.end(), from + piece);
        if (length > to - begin) return false;  // straddles two pieces
        if (!note_move(uses, from, begin, length)) return false;
        reserve_bookkeeping();
        if (const int rc = make_table(); rc != 0) return refuse(rc);
        if (free_.empty()) return false;
        const bool shared = std::find(held_.begin(), held_.end(), &record) != held_.end();
        held_.reserve(held_.size() + 1);  // may throw: nothing is registered yet
        regions_.reserve(regions_.size() + 1);
        if (const int rc = set_slot(free_.back(), from, to - from); rc != 0) return refuse(rc);
        if (!shared) {  // from here on nothing allocates: the record names this ring at once
            held_.push_back(&record);
            record.retain();
        }
        insert({from, to, free_.back(), &record});
        slot = static_cast<int>(free_.back());
        free_.pop_back();
        ++pinned_;
        return true;
    }

    // Stops pinning, saying once per process that it was refused and what happens instead.
    bool refuse(int error) noexcept {
        refused_ = error;
        static std::once_flag said;
        std::call_once(said, [error] {
            std::string why = std::system_category().message(error);
            if (error == ENOMEM) why += ": pinning would pass RLIMIT_MEMLOCK (ulimit -l)";
            if (error == EINVAL) why += ": this kernel has no sparse buffer tables (Linux 5.19+)";
            std::fprintf(stderr,
                         "nvmeio: io_uring did not pin buffers (%s); requests go on unpinned, "
                         "each pinning its pages as it runs\n",
                         why.c_str());
        });
        return false;
    }

    io_error refused(int error, std::size_t count) const {
        std::string what = "io_uring_register_buffers (" + std::to_string(count) + " buffers)";
        if (error == ENOMEM)
            what += " (pinning them would pass RLIMIT_MEMLOCK; raise it or register less)";
        return io_error({errno_code(error), what, "", 0, 0});
    }

    // Room for every slot in the lists of free slots and of slots to empty later, before the
    // table is made: make_table and unpin, which may not throw, then never allocate. Throws
    // std::bad_alloc.
    void reserve_bookkeeping() {
        free_.reserve(slots);
        later_.reserve(slots);
    }

    // A sparse table of `slots` empty slots, made on first need; 0 or the kernel's errno.
    int make_table() noexcept {
        if (table_made_) return 0;
        const int rc = ::io_uring_register_buffers_sparse(&ring_, slots);
        if (rc < 0) return -rc;
        free_.clear();
        for (unsigned s = slots; s-- > 0;)
            free_.push_back(s);
        table_made_ = true;
        return 0;
    }

    // Sets `slot` to [begin, begin + length), or empties it for 0; 0 or the kernel's errno.
    // A signal that interrupts the call (one without SA_RESTART) does not stop it.
    int set_slot(unsigned slot, std::uintptr_t begin, std::size_t length) noexcept {
        iovec v{reinterpret_cast<void*>(begin), length};
        int rc;
        do {
            rc = ::io_uring_register_buffers_update_tag(&ring_, slot, &v, nullptr, 1);
        } while (rc == -EINTR);
        return rc < 0 ? -rc : 0;
    }

    int empty_slot(unsigned slot) noexcept {
        const int error = set_slot(slot, 0, 0);
        if (error == 0) free_.push_back(slot);
        return error;
    }

    void insert(const region& r) {
        regions_.insert(
            std::upper_bound(regions_.begin(), regions_.end(), r.begin,
                             [](std::uintptr_t a, const region& x) { return a < x.begin; }),
            r);
    }

    // With mutex_ held: the slot holding [begin, begin + length), or -1.
    int lookup(std::uintptr_t begin, std::size_t length) const noexcept {
        auto after =
            std::upper_bound(regions_.begin(), regions_.end(), begin,
                             [](std::uintptr_t a, const region& x) { return a < x.begin; });
        if (after == regions_.begin()) return -1;
        const region& r = *(after - 1);
        if (begin >= r.end || length > r.end - begin) return -1;
        return static_cast<int>(r.slot);
    }

    io_uring& ring_;
    const creator_process creator_;
    mutable std::mutex mutex_;
    bool pin_once_ = true;
    bool table_made_ = false;
    int refused_ = 0;
    std::atomic<pid_t> issuer_{0};  // the thread the ring serves; 0 for any
    std::vector<unsigned> later_;   // slots of memory freed on other threads, to empty
    std::atomic<bool> has_later_{false};
    std::vector<region> regions_;        // sorted by address
    std::vector<unsigned> free_;         // empty slots
    std::vector<aligned_buffer> owned_;  // the caller's, while registered
    std::vector<pin_record*> held_;      // records of buffers it pinned: one share of each
    std::uint64_t pinned_ = 0;
    std::uint64_t unpinned_ = 0;
};

// The files registered with one ring, in registration order. Not thread-safe: the ring's
// thread uses it.
class ring_files {
  public:
    // Registers `files` with `ring`; on success `files` is left empty, on failure untouched.
    // Throws std::invalid_argument when files are already registered, when `files` is empty or
    // one is not open; io_error when the kernel refuses.
    void add(io_uring& ring, std::vector<file>&& files) {
        if (!files_.empty()) throw_invalid("register_files: files are already registered");
        if (files.empty()) throw_invalid("register_files: no files given");
        std::vector<int> descriptors;
        descriptors.reserve(files.size());
        for (std::size_t i = 0; i < files.size(); ++i) {
            if (!files[i].is_open()) {
                throw_invalid("register_files: file " + std::to_string(i) + " (" + files[i].path() +
                              ") is not open");
            }
            descriptors.push_back(files[i].native_handle());
        }
        const int rc = ::io_uring_register_files(&ring, descriptors.data(),
                                                 static_cast<unsigned>(descriptors.size()));
        if (rc < 0) {
            throw io_error({errno_code(-rc),
                            "io_uring_register_files (" + std::to_string(files.size()) + " files)",
                            files.front().path(), 0, 0});
        }
        files_ = std::exchange(files, {});
        descriptors_ = std::move(descriptors);
    }

    // Registers the same descriptors with a new ring (one that takes the old one's place);
    // 0 or -errno.
    int add_again(io_uring& ring) const noexcept {
        if (descriptors_.empty()) return 0;
        const int rc = ::io_uring_register_files(&ring, descriptors_.data(),
                                                 static_cast<unsigned>(descriptors_.size()));
        return rc < 0 ? rc : 0;
    }

    // Unregisters the files from `ring` and gives them back, still open (the caller checked
    // that none is in flight). Throws io_error when the kernel refuses.
    std::vector<file> unregister_all(io_uring& ring) {
        if (files_.empty()) return {};
        const int rc = ::io_uring_unregister_files(&ring);
        if (rc < 0) throw io_error({errno_code(-rc), "io_uring_unregister_files", "", 0, 0});
        descriptors_.clear();
        return std::exchange(files_, {});
    }

    [[nodiscard]] std::size_t count() const noexcept { return files_.size(); }

    // File `index`, const so that no one closes or replaces it; throws std::invalid_argument
    // past the registered ones.
    [[nodiscard]] const file& at(std::size_t index) const {
        if (index >= files_.size()) {
            throw_invalid("registered_file(" + std::to_string(index) +
                          "): " + std::to_string(files_.size()) + " files are registered");
        }
        return files_[index];
    }

    // The registered index of descriptor `fd`, or -1. The file's current descriptor must still
    // be the registered one: a registered file closed behind the backend (through a const_cast)
    // matches nothing, whatever file reuses its number.
    [[nodiscard]] int index_of(int fd) const noexcept {
        for (std::size_t i = 0; i < descriptors_.size(); ++i) {
            if (descriptors_[i] == fd && files_[i].native_handle() == fd)
                return static_cast<int>(i);
        }
        return -1;
    }

  private:
    std::vector<file> files_;
    std::vector<int> descriptors_;  // files_' descriptors as registered
};

}  // namespace detail

#endif  // NVMEIO_HAS_IO_URING

NVMEIO_END_NAMESPACE

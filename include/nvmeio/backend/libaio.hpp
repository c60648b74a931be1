#pragma once
/// \file backend/libaio.hpp
/// The default Backend policy: Linux native AIO through libaio.
///
/// Only io_setup, io_destroy, io_submit and io_getevents are used: they are in every libaio
/// since 0.3.110 (io_pgetevents is not, e.g. 0.3.111 on RHEL 9).

#include <libaio.h>
#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

#include "nvmeio/alignment.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/version.hpp"

// Under valgrind memcheck, only its io_getevents wrapper tells it that the kernel wrote the
// bytes of a read; reaping from the ring in user space would leave them "uninitialised".
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define NVMEIO_DETAIL_RUNNING_ON_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#else
#define NVMEIO_DETAIL_RUNNING_ON_VALGRIND() false
#endif

NVMEIO_BEGIN_NAMESPACE

/// The system-wide limit on AIO events (`/proc/sys/fs/aio-max-nr`), or 0 when unreadable.
[[nodiscard]] inline unsigned long aio_max_nr() {
    return detail::read_number("/proc/sys/fs/aio-max-nr", 0ul);
}

/// Native Linux AIO. One kernel context per instance; not thread-safe (one per thread).
class libaio_backend {
  public:
    /// The backend's name in reports.
    static constexpr const char* name = "libaio";

    /// Creates a kernel AIO context for up to `queue_depth` requests in flight.
    /// Throws std::invalid_argument for 0 or a depth above aio-max-nr, io_error when io_setup
    /// fails (EAGAIN: the system-wide aio-nr would pass aio-max-nr).
    explicit libaio_backend(unsigned queue_depth)
        : iocbs_(checked_queue_depth(queue_depth)), iocb_pointers_(queue_depth) {
        free_iocbs_.reserve(queue_depth);
        for (unsigned i = queue_depth; i > 0; --i)
            free_iocbs_.push_back(i - 1);
        const int rc = ::io_setup(static_cast<int>(queue_depth), &context_);
        if (rc < 0) {
            std::string operation = "io_setup(queue_depth=" + std::to_string(queue_depth) + ")";
            if (rc == -EAGAIN) {
                operation += " (all processes' AIO contexts together would pass fs.aio-max-nr = " +
                             std::to_string(aio_max_nr()) +
                             "; lower the queue depth or raise the limit)";
            }
            throw io_error({detail::errno_code(-rc), operation, "", 0, 0});
        }
        if (!NVMEIO_DETAIL_RUNNING_ON_VALGRIND()) ring_ = known_ring();
    }

    libaio_backend(const libaio_backend&) = delete;
    libaio_backend& operator=(const libaio_backend&) = delete;

    /// Destroys the kernel context; the kernel waits for requests still in flight.
    ~libaio_backend() { (void)::io_destroy(context_); }

    /// Submits up to `count` requests (at most as many as the queue depth leaves room for: a
    /// request holds its iocb until its completion is reaped); returns how many the kernel
    /// accepted, or -errno when it accepted none.
    int submit(const io_request* requests, std::size_t count) noexcept {
        if (count > free_iocbs_.size()) count = free_iocbs_.size();
        if (count == 0) return -EAGAIN;
        const std::size_t top = free_iocbs_.size() - 1;
        for (std::size_t i = 0; i < count; ++i) {
            const io_request& r = requests[i];
            iocb& cb = iocbs_[free_iocbs_[top - i]];
            if (r.op == operation::read) {
                ::io_prep_pread(&cb, r.fd, r.buffer, r.length, static_cast<long long>(r.offset));
            } else {
                ::io_prep_pwrite(&cb, r.fd, r.buffer, r.length, static_cast<long long>(r.offset));
            }
            cb.aio_rw_flags = static_cast<unsigned>(r.rw_flags);
            cb.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(r.user_data));
            iocb_pointers_[i] = &cb;
        }
        const int accepted = ::io_submit(context_, static_cast<long>(count), iocb_pointers_.data());
        if (accepted > 0)
            free_iocbs_.resize(free_iocbs_.size() - static_cast<std::size_t>(accepted));
        return accepted;
    }

    /// Waits for between `min` and `max` completions; returns how many were stored, or -errno.
    /// Completions already in the kernel's completion ring are taken without a system call;
    /// io_getevents is called only to wait for the rest.
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        if (max > events_capacity) max = events_capacity;
        if (min > max) min = max;
        completion_ring* const ring = user_ring();
        const std::size_t ready = take_ready(ring, out, max);
        if (ring != nullptr && ready >= min) return static_cast<int>(ready);
        io_event events[events_capacity];
        timespec wait{};
        if (timeout != nullptr) wait = *timeout;
        const int got =
            ::io_getevents(context_, static_cast<long>(min - ready), static_cast<long>(max - ready),
                           events, timeout != nullptr ? &wait : nullptr);
        if (got < 0) return ready > 0 ? static_cast<int>(ready) : got;
        for (int i = 0; i < got; ++i)
            out[ready + static_cast<std::size_t>(i)] = complete(events[i]);
        return static_cast<int>(ready) + got;
    }

    /// True when completions are read from the kernel's ring in user space (the kernel maps it
    /// at the context's address with a known layout, the program does not run under valgrind,
    /// and this is the process that created the backend); otherwise every reap is io_getevents.
    [[nodiscard]] bool reaps_in_user_space() const noexcept { return user_ring() != nullptr; }

    /// The queue depth the context was created for.
    [[nodiscard]] unsigned queue_depth() const noexcept {
        return static_cast<unsigned>(iocbs_.size());
    }

    /// Requests accepted by submit and not reaped yet: those holding an iocb.
    [[nodiscard]] std::size_t in_flight() const noexcept {
        return iocbs_.size() - free_iocbs_.size();
    }

  private:
    static unsigned checked_queue_depth(unsigned queue_depth) {
        if (queue_depth == 0) detail::throw_invalid("queue_depth must be at least 1 (got 0)");
        const unsigned long limit = aio_max_nr();
        if (limit != 0 && queue_depth > limit) {
            detail::throw_invalid(
                "queue_depth " + std::to_string(queue_depth) +
                " exceeds the system's AIO limit fs.aio-max-nr = " + std::to_string(limit));
        }
        return queue_depth;
    }

    static constexpr std::size_t events_capacity = 256;  // per reap call; callers loop for more

    // The head of the completion ring the kernel maps at an io_context_t's address (struct
    // aio_ring in fs/aio.c, stable ABI since Linux 2.6). The io_event array follows the header.
    struct completion_ring {
        unsigned id;
        unsigned nr;    // slots
        unsigned head;  // next slot to consume: written by the consumer (us, or io_getevents)
        unsigned tail;  // next slot the kernel fills, published after the event is written
        unsigned magic;
        unsigned compat_features;
        unsigned incompat_features;
        unsigned header_length;
    };
    static constexpr unsigned completion_ring_magic = 0xa10a10a1;

    // A reaped event gives its iocb back.
    io_completion complete(const io_event& event) noexcept {
        const auto index =
            static_cast<std::size_t>(static_cast<const iocb*>(event.obj) - iocbs_.data());
        if (index < iocbs_.size()) free_iocbs_.push_back(static_cast<unsigned>(index));
        return {static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(event.data)),
                static_cast<std::int64_t>(static_cast<long>(event.res))};
    }

    // The ring when its layout is the one we know, else nullptr (then io_getevents does it all).
    completion_ring* known_ring() const noexcept {
        auto* ring = reinterpret_cast<completion_ring*>(context_);
        if (ring == nullptr || ring->magic != completion_ring_magic ||
            ring->incompat_features != 0 || ring->header_length != sizeof(completion_ring) ||
            ring->nr == 0) {
            return nullptr;
        }
        return ring;
    }

    // Moves up to `max` completions that are already in the ring into `out`, without a system
    // call. Only one thread reaps a context (the backend is not thread-safe), and the kernel
    // only writes `head` from io_getevents, which that same thread calls, so a plain store of
    // the new head after the copies is enough; the acquire load of `tail` orders the reads of
    // the events after the kernel's writes of them.
    std::size_t take_ready(completion_ring* ring, io_completion* out, std::size_t max) noexcept {
        if (ring == nullptr || max == 0) return 0;
        const unsigned slots = ring->nr;
        unsigned head = __atomic_load_n(&ring->head, __ATOMIC_RELAXED);
        const unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
        if (head >= slots || tail >= slots) return 0;  // not a state the kernel leaves: ask it
        const auto* events = reinterpret_cast<const io_event*>(ring + 1);
        std::size_t got = 0;
        while (head != tail && got < max) {
            out[got++] = complete(events[head]);
            head = head + 1 == slots ? 0 : head + 1;
        }
        if (got > 0) __atomic_store_n(&ring->head, head, __ATOMIC_RELEASE);
        return got;
    }

    // A child made by fork shares the parent's mapping of the ring but not its kernel context:
    // reading the ring there would take the parent's completions. So only the creating process
    // reads it; elsewhere io_getevents answers (EINVAL in a child).
    completion_ring* user_ring() const noexcept {
        return ring_ != nullptr && creator_.is_current() ? ring_ : nullptr;
    }

    io_context_t context_ = nullptr;
    completion_ring* ring_ = nullptr;
    detail::creator_process creator_;
    // A request keeps its iocb from io_submit until its completion is reaped: the kernel copies
    // it at submit, but the event points back at it (`obj`), and valgrind reads the iocb that
    // pointer names to learn which buffer a read filled.
    std::vector<iocb> iocbs_;
    std::vector<unsigned> free_iocbs_;  // indices of iocbs no request holds
    std::vector<iocb*> iocb_pointers_;
};

NVMEIO_END_NAMESPACE

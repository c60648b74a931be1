#pragma once
/// \file backend/io_uring.hpp
/// The second Backend policy: io_uring through liburing (optional; whether this build and this
/// kernel have it: backend/io_uring_support.hpp).

#include "nvmeio/backend/io_uring_pagemap.hpp"
#include "nvmeio/backend/io_uring_registered.hpp"
#include "nvmeio/backend/io_uring_support.hpp"
#include "nvmeio/version.hpp"

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/alignment.hpp"
#include "nvmeio/backend/request.hpp"
#include "nvmeio/detail/process.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"

#if NVMEIO_HAS_IO_URING
#include <liburing.h>
#endif

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// How long io_uring's requests may be: on a block device under O_DIRECT, cut to what the device
// takes whole (why: docs/perf/causes.md, "Cause 5"; the promise: docs/GUARANTEES.md §5b).

/// Pieces a block of registered memory must make, at least, to go out whole at depth 1.
inline constexpr std::size_t whole_registered_pieces = 4;

/// Request size and requests in flight at most.
struct request_plan {
    std::size_t request_size = 0;
    unsigned slots = 0;
};

/// The length from which a block of registered memory stays whole when blocks are cut to
/// `piece`: at depth 1 from whole_registered_pieces pieces (nothing overlaps the worker's
/// hand-off there), deeper from two.
[[nodiscard]] inline std::size_t registered_whole_from(std::size_t piece,
                                                       unsigned queue_depth) noexcept {
    return queue_depth > 1 ? piece + 1 : whole_registered_pieces * piece;
}

/// What a block of a `queue_depth` x `block_size` context is cut to unless it stays whole, and
/// how many requests are in flight at most, through a backend holding `completion_capacity`
/// (>= queue_depth) completions.
[[nodiscard]] inline request_plan plan_requests(const queue_limits& limits, bool direct,
                                                std::size_t unit, std::size_t block_size,
                                                unsigned queue_depth,
                                                std::size_t completion_capacity) {
    const std::size_t whole = limits.unsplit_request_bytes;
    if (!direct || whole < unit || whole % unit != 0 || whole >= block_size)
        return {block_size, queue_depth};
    // Divisions only: a block size may be near SIZE_MAX.
    const std::size_t pieces = block_size / whole + (block_size % whole != 0 ? 1 : 0);
    std::size_t slots = pieces > completion_capacity / queue_depth
                            ? completion_capacity
                            : std::size_t{queue_depth} * pieces;
    if (limits.requests > 0)
        slots = std::min(slots, std::max<std::size_t>(queue_depth, limits.requests));
    return {whole, static_cast<unsigned>(std::max<std::size_t>(queue_depth, slots))};
}

}  // namespace detail

#if NVMEIO_HAS_IO_URING

/// io_uring. One ring per instance; not thread-safe (one per thread, like libaio_backend).
///
/// Where the kernel allows, the ring serves one thread (SINGLE_ISSUER | DEFER_TASKRUN), the first
/// that submits; used later from another thread, or for uncached I/O, the backend sets up a plain
/// ring in its place, once, with its registrations (docs/perf/ring_flags.md). A request `submit`
/// accepted is never lost nor submitted twice. -EINTR and -ECANCELED go to the engine, which
/// calls again or resubmits. Pin once: backend/io_uring_registered.hpp.
class io_uring_backend {
  public:
    /// The backend's name in reports.
    static constexpr const char* name = "io_uring";

    /// Creates a ring for up to `queue_depth` requests in flight. Throws std::invalid_argument
    /// for 0 or a depth above the kernel's limit (the message names the limit: 32768 since Linux
    /// 5.4), io_error when the kernel refuses (the message says why and names the fallback).
    explicit io_uring_backend(unsigned queue_depth) : queue_depth_(queue_depth) {
        if (queue_depth == 0) detail::throw_invalid("queue_depth must be at least 1 (got 0)");
        // The completion ring holds 16 per queue entry: the engine cuts a request a block device
        // cannot take whole into pieces and keeps as many bytes in flight (up to 16 pieces each).
        const unsigned completions =
            queue_depth > max_completions / 16 ? max_completions : queue_depth * 16;
        io_uring_params params{};
        const int rc = detail::setup_ring(ring_, params, queue_depth, completions, true);
        if (rc == -EINVAL) {
            const unsigned limit = max_queue_depth();
            if (limit != 0 && queue_depth > limit) {
                detail::throw_invalid("queue_depth " + std::to_string(queue_depth) +
                                      " exceeds this kernel's io_uring limit of " +
                                      std::to_string(limit) +
                                      " entries (IORING_MAX_ENTRIES); lower the queue depth");
            }
        }
        if (rc < 0) {
            throw io_error({detail::errno_code(-rc),
                            detail::describe_io_uring_setup_failure(-rc, queue_depth), "", 0, 0});
        }
        completion_capacity_ = params.cq_entries;
        flags_ = params.flags;
    }

    io_uring_backend(const io_uring_backend&) = delete;
    io_uring_backend& operator=(const io_uring_backend&) = delete;

    /// Tears the ring down; the kernel cancels or waits for requests still in flight.
    ~io_uring_backend() {
        if (creator_.is_current()) {
            buffers_->detach();
        } else {
            // A child after fork: a thread of the parent may have held the table's mutex at the
            // fork, so the child neither waits for it nor frees the table, which buffers the
            // parent pinned may still name; freeing one there reaches it, and it does nothing.
            (void)buffers_.release();
        }
        ::io_uring_queue_exit(&ring_);
    }

    /// Queues up to `count` requests (at most the free queue depth) and hands them to the kernel;
    /// returns how many were queued, or -errno when none could be (-EINVAL in a child after
    /// fork: the rings it shares with its parent are the parent's).
    int submit(const io_request* requests, std::size_t count) noexcept {
        if (!creator_.is_current()) return -EINVAL;
        if (count > 0 && (requests[0].rw_flags & detail::rwf_dontcache) != 0 &&
            (flags_ & IORING_SETUP_DEFER_TASKRUN) != 0 && in_flight_ == 0) {
            if (const int rc = replace_ring(); rc < 0) return rc;  // see the class comment
        }
        if (const int rc = serve_this_thread(); rc < 0) return rc;
        buffers_->let_go();
        std::size_t queued = 0;
        for (; queued < count; ++queued) {
            io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
            if (sqe == nullptr) break;  // the submission ring is full
            prepare(sqe, requests[queued]);
        }
        const int rc = ::io_uring_submit(&ring_);
        in_flight_ += queued;
        if (queued > 0) return static_cast<int>(queued);  // in the ring now, whatever rc says
        return rc < 0 ? rc : -EAGAIN;
    }

    /// Waits for between `min` and `max` completions; returns how many were stored, or -errno
    /// (-EINVAL in a child after fork, which must not take its parent's completions).
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        if (!creator_.is_current()) return -EINVAL;
        if (const int rc = serve_this_thread(); rc < 0) return rc;
        if (min > max) min = max;
        std::size_t got = move_ready(out, max);
        if (got == 0 && min == 0 && max > 0 && task_work_flagged()) {
            // A poll: the kernel holds finished requests it posts only when this task enters
            // it (COOP_TASKRUN), so enter once. A wait below enters anyway.
            (void)::io_uring_get_events(&ring_);
            got = move_ready(out, max);
        }
        if (got >= min) return static_cast<int>(got);
        const auto wanted = static_cast<unsigned>(min - got);
        int rc;
        if (timeout != nullptr) {
            __kernel_timespec limit{timeout->tv_sec, timeout->tv_nsec};
            io_uring_cqe* first = nullptr;
            rc = ::io_uring_submit_and_wait_timeout(&ring_, &first, wanted, &limit, nullptr);
            if (rc == -ETIME) rc = 0;
        } else {
            rc = ::io_uring_submit_and_wait(&ring_, wanted);  // also flushes queued requests
        }
        got += move_ready(out + got, max - got);
        if (got == 0 && rc < 0) return rc;
        return static_cast<int>(got);
    }

    /// The queue depth the ring was created for.
    [[nodiscard]] unsigned queue_depth() const noexcept { return queue_depth_; }

    /// Requests accepted by submit and not reaped yet.
    [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }

    /// The deepest ring this kernel creates, or 0 when it cannot tell (asked with
    /// IORING_SETUP_CLAMP, which shrinks a too-deep ring to the limit instead of refusing it, so
    /// this briefly creates a ring of that depth).
    [[nodiscard]] static unsigned max_queue_depth() noexcept {
        io_uring ring{};
        io_uring_params params{};
        params.flags = IORING_SETUP_CLAMP;
        if (::io_uring_queue_init_params(1u << 30, &ring, &params) < 0) return 0;
        const unsigned limit = params.sq_entries;
        ::io_uring_queue_exit(&ring);
        return limit;
    }

    /// Registers `buffers` with the kernel and keeps them until unregister_buffers(); on success
    /// `buffers` is left empty, on failure untouched. Use registered_buffer_at(i) to reach them.
    /// Throws std::invalid_argument when buffers are already registered, when `buffers` is
    /// empty, when one is empty or larger than 1 GiB (the kernel's limit), or when the ring's
    /// 4096 slots, less those pinned, cannot hold them; io_error when the kernel refuses (ENOMEM:
    /// pinning them would pass RLIMIT_MEMLOCK; EINVAL: a kernel before 5.19).
    void register_buffers(std::vector<aligned_buffer>&& buffers) {
        refuse_in_child("register_buffers");
        take_to_this_thread("register_buffers");
        buffers_->add(std::move(buffers));
    }

    /// Whether the ring pins memory nvmeio allocated on its own (see the class comment).
    void set_pin_once(bool on) noexcept { buffers_->set_pin_once(on); }

    /// Whether a request on [memory, memory + length) goes out registered now (pins nothing).
    [[nodiscard]] bool registers(const void* memory, std::size_t length) const noexcept {
        return creator_.is_current() && buffers_->holds(memory, length);
    }

    /// How a transfer of `block_size` blocks on `f` is cut (detail::plan_requests; why: the
    /// comment above it), unless request_length keeps a block whole.
    [[nodiscard]] request_limits limits_for(const file& f, std::size_t block_size) const noexcept {
        const detail::request_plan plan =
            detail::plan_requests(f.queue_limits(), f.is_direct(), f.required_alignment(),
                                  block_size, queue_depth_, completion_capacity_);
        return {plan.request_size, plan.slots};
    }

    /// Whether every block of the `length`-byte segment at `segment` goes out whole: huge pages
    /// back it, so a failed try is cheap. Asked once per segment that has blocks to cut.
    [[nodiscard]] bool segment_stays_whole(const std::byte* segment, std::size_t length,
                                           const request_limits& limits) noexcept {
        return length > limits.request_size && pages_.huge_pages_back(segment, length);
    }

    /// How long the requests of the `length`-byte block at `block` may be, under `limits` (from
    /// limits_for): `length` when the block goes out whole, else the cut piece. Whole where its
    /// segment stays whole, or where the block is registered and at least
    /// registered_whole_from long (asked at every block, so memory pinned during a transfer goes
    /// whole from its next one).
    [[nodiscard]] std::size_t request_length(const request_limits& limits, bool segment_whole,
                                             const std::byte* block,
                                             std::size_t length) const noexcept {
        const bool whole = segment_whole || (length >= detail::registered_whole_from(
                                                           limits.request_size, queue_depth_) &&
                                             registers(block, length));
        return whole ? length : limits.request_size;
    }

    /// Whether the ring serves one thread (see the class comment). Turned off, a ring set up
    /// for one thread is replaced by a plain one now (turned on, a plain ring stays plain).
    /// Throws io_error when the kernel refuses the new ring, or (EBUSY) with requests in flight.
    void set_single_issuer(bool on) {
        if (on || (flags_ & IORING_SETUP_SINGLE_ISSUER) == 0) return;
        refuse_while_in_flight("io_uring_setup");
        if (const int rc = replace_ring(); rc < 0)
            throw io_error({detail::errno_code(-rc), "io_uring_setup (a plain ring)", "", 0, 0});
    }

    /// The ring's IORING_SETUP_* flags (R_DISABLED stays among them once enabled).
    [[nodiscard]] unsigned setup_flags() const noexcept { return flags_; }

    /// Number of registered buffers (0 when none are).
    [[nodiscard]] std::size_t registered_buffer_count() const { return buffers_->owned_count(); }

    /// Where registered buffer `index` is (in registration order). Throws std::invalid_argument
    /// for an index past the registered ones.
    [[nodiscard]] registered_buffer registered_buffer_at(std::size_t index) const {
        return buffers_->owned_at(index);
    }

    /// Unregisters the buffers and gives them back, in registration order (empty when none were
    /// registered). Throws io_error (EBUSY) while requests are in flight: the kernel may still
    /// be moving bytes into them.
    std::vector<aligned_buffer> unregister_buffers() {
        refuse_in_child("unregister_buffers");
        if (buffers_->owned_count() == 0) return {};
        take_to_this_thread("unregister_buffers");
        refuse_while_in_flight("io_uring_unregister_buffers");
        return buffers_->unregister_all();
    }

    /// Registers the descriptors of `files` and keeps the files (open) until unregister_files();
    /// on success `files` is left empty, on failure untouched. Transfer through registered_file(i).
    /// Throws std::invalid_argument when files are already registered, when `files` is empty or
    /// one is not open; io_error when the kernel refuses.
    void register_files(std::vector<file>&& files) {
        refuse_in_child("register_files");
        take_to_this_thread("register_files");
        files_.add(ring_, std::move(files));
    }

    /// Number of registered files (0 when none are).
    [[nodiscard]] std::size_t registered_file_count() const noexcept { return files_.count(); }

    /// Registered file `index` (in registration order), to transfer through. The backend owns
    /// it; it is const so that it cannot be closed or replaced while the kernel holds its
    /// descriptor. Throws std::invalid_argument for an index past the registered ones.
    [[nodiscard]] const file& registered_file(std::size_t index) const { return files_.at(index); }

    /// Unregisters the files and gives them back, still open, in registration order (empty
    /// when none were registered). Throws io_error (EBUSY) while requests are in flight.
    std::vector<file> unregister_files() {
        refuse_in_child("unregister_files");
        if (files_.count() == 0) return {};
        take_to_this_thread("unregister_files");
        refuse_while_in_flight("io_uring_unregister_files");
        return files_.unregister_all(ring_);
    }

    /// How requests used the registrations so far, and what the ring pinned on its own.
    [[nodiscard]] registration_use registered_use() const {
        registration_use use = use_;
        buffers_->count(use);
        return use;
    }

  private:
    void prepare(io_uring_sqe* sqe, const io_request& r) noexcept {
        // An SQE holds a 32-bit length; a shorter transfer is a short result the caller
        // already continues from.
        const auto length = static_cast<unsigned>(r.length < max_length ? r.length : max_length);
        const int buffer_index = buffers_->pin_or_find(r.buffer, length, r.pins);
        if (buffer_index >= 0) {
            if (r.op == operation::read) {
                ::io_uring_prep_read_fixed(sqe, r.fd, r.buffer, length, r.offset, buffer_index);
            } else {
                ::io_uring_prep_write_fixed(sqe, r.fd, r.buffer, length, r.offset, buffer_index);
            }
            ++use_.fixed_buffer_requests;
        } else if (r.op == operation::read) {
            ::io_uring_prep_read(sqe, r.fd, r.buffer, length, r.offset);
        } else {
            ::io_uring_prep_write(sqe, r.fd, r.buffer, length, r.offset);
        }
        sqe->rw_flags = static_cast<__kernel_rwf_t>(r.rw_flags);
        if (const int index = files_.index_of(r.fd); index >= 0) {
            sqe->fd = index;
            sqe->flags |= IOSQE_FIXED_FILE;
            ++use_.fixed_file_requests;
        }
        ::io_uring_sqe_set_data64(sqe, r.user_data);
    }

    // After fork the child shares the parent's rings: changing their registrations there would
    // change the parent's.
    void refuse_in_child(const char* operation) const {
        if (creator_.is_current()) return;
        throw io_error({detail::errno_code(EINVAL),
                        std::string(operation) +
                            " in a child after fork (the io_uring belongs to the parent; create a "
                            "new context in the child)",
                        "", 0, 0});
    }

    // Makes the ring serve the calling thread: enables a ring made for one thread on its first
    // use, and sets up a plain ring in place of one that serves another thread (see the class
    // comment). 0 or -errno (EEXIST: another thread's requests are in flight).
    int serve_this_thread() noexcept {
        if ((flags_ & IORING_SETUP_SINGLE_ISSUER) == 0) return 0;
        const pid_t me = detail::this_thread_id();
        const pid_t issuer = buffers_->issuer();
        if (issuer == me) return 0;
        if (issuer == 0) return buffers_->bind(me, [this] { return detail::enable_ring(ring_); });
        if (in_flight_ != 0) return -EEXIST;
        return replace_ring();
    }

    // The same for a registration call, which throws.
    void take_to_this_thread(const char* operation) {
        if ((flags_ & IORING_SETUP_SINGLE_ISSUER) == 0 || buffers_->issuer() == 0 ||
            buffers_->issuer() == detail::this_thread_id())
            return;  // a disabled ring takes registrations from any thread
        refuse_while_in_flight(operation);
        if (const int rc = serve_this_thread(); rc < 0) {
            throw io_error(
                {detail::errno_code(-rc),
                 std::string(operation) + ": io_uring_setup (a plain ring for this thread)", "", 0,
                 0});
        }
    }

    // Sets up a plain ring, registers the files there, and puts it in place of the ring (whose
    // teardown lets go of every registration); the buffers' table is filled again. 0 or -errno,
    // the old ring kept.
    int replace_ring() noexcept {
        io_uring fresh{};
        io_uring_params params{};
        int rc = detail::setup_ring(fresh, params, queue_depth_, completion_capacity_, false);
        if (rc < 0) return rc;
        if (rc = files_.add_again(fresh); rc < 0) {
            ::io_uring_queue_exit(&fresh);
            return rc;
        }
        buffers_->replace_ring([&] {
            std::swap(ring_, fresh);
            ::io_uring_queue_exit(&fresh);  // the old ring
        });
        flags_ = params.flags;
        return 0;
    }

    void refuse_while_in_flight(const char* operation) const {
        if (in_flight_ == 0) return;
        throw io_error({detail::errno_code(EBUSY),
                        std::string(operation) + " with " + std::to_string(in_flight_) +
                            " requests in flight (reap them first)",
                        "", 0, 0});
    }

    // True when the kernel has work for this task, such as completions to post
    // (IORING_SQ_TASKRUN, set because the ring asked for TASKRUN_FLAG).
    bool task_work_flagged() const noexcept {
        return (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
    }

    // Moves up to `max` ready completions into `out` without waiting.
    std::size_t move_ready(io_completion* out, std::size_t max) noexcept {
        std::size_t got = 0;
        while (got < max) {
            io_uring_cqe* cqes[64];
            const std::size_t want = max - got < 64 ? max - got : 64;
            const unsigned ready =
                ::io_uring_peek_batch_cqe(&ring_, cqes, static_cast<unsigned>(want));
            for (unsigned i = 0; i < ready; ++i) {
                out[got + i].user_data = ::io_uring_cqe_get_data64(cqes[i]);
                out[got + i].result = cqes[i]->res;
            }
            ::io_uring_cq_advance(&ring_, ready);
            got += ready;
            in_flight_ -= ready;
            if (ready < want) break;
        }
        return got;
    }

    static constexpr std::size_t max_length = std::size_t{1} << 30;

    io_uring ring_{};
    static constexpr unsigned max_completions = 65536;  // IORING_MAX_CQ_ENTRIES
    unsigned queue_depth_;
    unsigned completion_capacity_ = 0;
    unsigned flags_ = 0;  // the ring's IORING_SETUP_* flags
    detail::creator_process creator_;
    std::size_t in_flight_ = 0;  // accepted by submit, not reaped yet
    // Members die after the destructor body has torn the ring down, so the kernel lets go of
    // these before they are freed or closed.
    // On the heap, so that a child after fork can leave it behind (see the destructor).
    std::unique_ptr<detail::ring_buffers> buffers_ =
        std::make_unique<detail::ring_buffers>(ring_, creator_);
    detail::ring_files files_;
    registration_use use_;
    detail::pagemap pages_;  // which memory huge pages back
};

#endif  // NVMEIO_HAS_IO_URING

NVMEIO_END_NAMESPACE

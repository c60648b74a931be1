#pragma once
/// \file staged.hpp
/// Staged transfers: bytes between files and memory nvmeio cannot hand to the kernel (a GPU's)
/// through a ring of K aligned host slots, with a copy engine moving each slot's bytes on while
/// the next slot's I/O runs. Reads: file → slot (one `transfer`, O_DIRECT) → copy engine → each
/// range's memory; a slot is read into again only after its copies completed. Writes run the
/// other way. Host memory is the ring's K × slot bytes, whatever the size of the plan.
///
/// The plan is per byte range, not per object: a range may straddle slots, ranges of one file
/// whose aligned units touch are read (or written) as one run, so every byte of the file is
/// moved once, and a zero-length range completes at once. One file is one file however it is
/// listed: handles are compared by `file::identity()`, so the same file under two indices (one
/// handle twice, two handles, a hard link) is planned as one, and its runs moved through the
/// lowest index a range names it by. Those handles must move bytes alike (O_DIRECT and its unit,
/// uncached or buffered), and a write's must be writable; a handle listed but named by no range
/// is only checked to be open.
///
/// The ring and the copy engines it works with: staging_ring.hpp.

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvmeio/detail/staged_plan.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/staging_ring.hpp"
#include "nvmeio/strategy.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

// Whether a context starts transfers and hands back their futures (basic_async_context): a
// staged run then keeps several windows' I/O in flight at once.
template <class Context, class = void>
struct starts_transfers : std::false_type {};
template <class Context>
struct starts_transfers<
    Context, std::void_t<decltype(std::declval<Context&>().submit(
                 std::declval<const file&>(), operation::read, std::declval<mutable_memory>(),
                 std::uint64_t{}, std::declval<const transfer_config&>()))>> : std::true_type {};

// What such a context's submit hands back (async.hpp's transfer_handle), or nothing: this header
// names no async context of its own, as a front end includes no other.
template <class Context, bool = starts_transfers<Context>::value>
struct submitted {
    struct type {};
};
template <class Context>
struct submitted<Context, true> {
    using type = decltype(std::declval<Context&>().submit(
        std::declval<const file&>(), operation::read, std::declval<mutable_memory>(),
        std::uint64_t{}, std::declval<const transfer_config&>()));
};

}  // namespace detail

/// A staged transfer's I/O failure, and the first range (in the caller's order) it concerns.
class staged_error : public io_error {
  public:
    /// `failure` happened while moving bytes of `range`.
    staged_error(io_failure failure, std::size_t range)
        : io_error(std::move(failure)), range_(range) {}
    /// Index of the range in the plan.
    [[nodiscard]] std::size_t range() const noexcept { return range_; }

  private:
    std::size_t range_;
};

/// A staged transfer run step by step: each `advance()` moves one window (a slot's bytes) and
/// reports the ranges whose bytes have all arrived (a read: at their memory; a write: in the
/// file), so a caller can use each range as soon as it is there. `staged_read` and
/// `staged_write` run one to its end.
///
/// The context is any context `transfer` takes a file with (aio or parallel), which moves one
/// window at a time, or an async context (`basic_async_context`), with which the I/O of up to
/// min(its threads, K) windows is in flight at once while the copies of others run, so that
/// the device need not wait for the ring (a read's windows ahead of the copies; a write's
/// filled slots written as their copies complete, the observer's checksum of one running while
/// the previous is written). The files and the ring must outlive the run. On a failure (an I/O's,
/// the copy engine's) `advance` first waits for every copy started, so none outlives the call. A
/// range is reported once, and only once all its bytes arrived (a read: its copies succeeded; a
/// write: its windows were written); a range with bytes in a window that failed is not, whether or
/// not they landed. The failing `advance` returns what completed before the failure, with a read's
/// windows whose copies that wait saw succeed, and the next `advance` throws the failure
/// (`pending()` is true until then, `failed()` from then on); with nothing to report, it throws at
/// once. A run destroyed before it has thrown drops the failure unseen: check `failed()`. An I/O
/// failure is `staged_error`, naming the first range the failed bytes belong to. The ring is then
/// idle and may serve another run. A run destroyed before its end (an exception elsewhere) first
/// waits for its copies.
template <class Context, class CopyEngine>
class staged_run {
  public:
    /// Takes the ring (std::logic_error when another run has it), checks and plans before
    /// anything moves: std::invalid_argument for a null or closed handle (naming its index), a
    /// bad range (naming it), or two indices of one file opened differently (naming both).
    staged_run(Context& context, staging_ring<CopyEngine>& ring, std::vector<const file*> files,
               std::vector<staged_range> ranges, operation op, transfer_config config = {})
        : lease_(ring),
          context_(&context),
          ring_(&ring),
          files_(std::move(files)),
          ranges_(std::move(ranges)),
          op_(op),
          config_(config) {
        const std::string what = "staged " + std::string(to_string(op_)) + ": file ";
        for (std::size_t i = 0; i < files_.size(); ++i) {
            if (files_[i] == nullptr) detail::throw_invalid(what + std::to_string(i) + " is null");
            if (!files_[i]->is_open()) {
                detail::throw_invalid(what + std::to_string(i) + " ('" + files_[i]->path() +
                                      "') is not open (closed, moved from or never opened)");
            }
        }
        plan_ = detail::plan_staged(op_, files_.size(), ranges_, ring.options().slot_size,
                                    [&](std::size_t i) { return known_of(*files_[i], op_); });
        busy_.assign(ring.options().slots, none);
        io_.resize(ring.options().slots);
        if constexpr (detail::starts_transfers<Context>::value) {
            depth_ = std::max(1u, std::min(context.threads(), ring.options().slots));
        }
        done_ = plan_.empty_ranges;
    }
    staged_run(const staged_run&) = delete;
    staged_run& operator=(const staged_run&) = delete;
    /// Waits for the I/O and the copies of a run left before its end; drops a failure not yet
    /// thrown.
    ~staged_run() {
        settle_io();
        if (oldest_ < next_) (void)ring_->engine().wait_all();
    }

    /// True while windows are left to move, copies to complete, ranges to report or a failure
    /// to throw.
    [[nodiscard]] bool pending() const noexcept {
        return !done_.empty() || failure_ != nullptr || next_ < plan_.windows.size() ||
               oldest_ < std::max(next_, issued_);
    }

    /// True once the run has failed: from the `advance` that met the failure on, whether it
    /// threw it or stored it for the next.
    [[nodiscard]] bool failed() const noexcept { return failed_; }

    /// Moves the next window (or, when none is left, waits for the oldest slot) and returns
    /// the ranges (indices in the plan) completed since the last call; empty ranges come first.
    /// A failure is thrown once the ranges completed before it have been returned (class
    /// comment).
    std::vector<std::size_t> advance() {
        if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
        // Room for every range this call may complete, so that a failure ends the run without
        // an allocation that could throw in its place.
        std::vector<std::size_t> done;
        done.reserve(most_completed_by_advance());
        done.insert(done.end(), done_.begin(), done_.end());
        done_.clear();
        try {
            if (op_ == operation::read) {
                advance_read(done);
            } else {
                advance_write(done);
            }
        } catch (...) {
            failed_ = true;
            end_after_failure(done);
            if (done.empty()) throw;
            failure_ = std::current_exception();
        }
        return done;
    }

    /// `observer(range, bytes, n)` is called for every piece of every range, in file order (so
    /// each range's pieces in order), while its bytes are in the slot: a write's once its
    /// window's write has started (with an async context, while it runs), a read's once read,
    /// as its copies start. To checksum what moves without reading it again, beside the I/O.
    void observe(std::function<void(std::size_t, const std::byte*, std::size_t)> observer) {
        observer_ = std::move(observer);
    }

    /// What the run has moved so far.
    [[nodiscard]] const staged_outcome& outcome() const noexcept { return outcome_; }

  private:
    static constexpr std::size_t none = static_cast<std::size_t>(-1);

    // What the plan needs to know of a file it uses (fstat; a read's asks its size too).
    static detail::staged_file known_of(const file& f, operation op) {
        detail::staged_file known;
        known.identity = f.identity();
        known.path = f.path();
        known.unit = f.required_alignment();
        known.direct = f.is_direct();
        known.rw_flags = f.rw_flags();
        known.writable = f.mode() != open_mode::read;
        known.size = op == operation::read ? f.size() : 0;
        return known;
    }

    unsigned slot_of(std::size_t window) const noexcept {
        return static_cast<unsigned>(window % ring_->options().slots);
    }

    // The most ranges one `advance` may complete: those not yet reported, and those with a piece
    // in a window it may retire, [oldest_, next_ + 1) (a read moves one window, and retires it
    // at once when its copies completed; a write retires the oldest).
    std::size_t most_completed_by_advance() const noexcept {
        const std::size_t end = std::min(next_ + 1, plan_.windows.size());
        if (oldest_ >= end) return done_.size();
        return done_.size() + plan_.windows[end - 1].end_piece - plan_.windows[oldest_].first_piece;
    }

    // Reads: start the I/O of the next windows (up to depth_ ahead, into slots whose copies
    // completed), wait for the next window's, start its copies; then report the older slots
    // whose copies have completed.
    void advance_read(std::vector<std::size_t>& done) {
        if (next_ == plan_.windows.size()) {
            if (oldest_ < next_) wait_and_retire(oldest_++, done);
            return;
        }
        start_reads(done);
        const std::size_t w = next_;
        finish_io(w);
        start_copies(w);
        show_observer(w);  // beside the copies, which only read the slot too
        ++next_;
        CopyEngine& engine = ring_->engine();
        while (oldest_ < next_ && engine.ready(slot_of(oldest_)))
            wait_and_retire(oldest_++, done);
    }

    // Starts reads of windows [issued_, next_ + depth_), each into the slot of the window K
    // before it once that one is retired: waiting for its copies only for the window needed
    // now, else only where they have completed.
    void start_reads(std::vector<std::size_t>& done) {
        const std::size_t slots = ring_->options().slots;
        while (issued_ < plan_.windows.size() && issued_ < next_ + depth_) {
            if (issued_ - oldest_ == slots) {  // its slot holds window oldest_
                if (oldest_ == next_) break;   // being read too: every slot is
                if (issued_ != next_ && !ring_->engine().ready(slot_of(oldest_))) break;
                wait_and_retire(oldest_++, done);
            }
            start_io(issued_, operation::read, plan_.windows[issued_].length);
            ++issued_;
        }
    }

    // Writes: fill every free slot (a window's copies in flight), start the writes of filled
    // windows in order as their copies complete (up to depth_ in flight; the observer sees
    // each as it starts), then wait for the oldest write and report its ranges.
    void advance_write(std::vector<std::size_t>& done) {
        const std::size_t slots = ring_->options().slots;
        while (next_ < plan_.windows.size() && next_ - oldest_ < slots)
            fill_for_write(next_++);
        while (issued_ < next_ && issued_ - oldest_ < depth_) {
            if (issued_ != oldest_ && !ring_->engine().ready(slot_of(issued_))) break;
            wait_for_copies(issued_);
            start_io(issued_, operation::write, plan_.windows[issued_].length);
            show_observer(issued_);  // while its write, which only reads the slot, runs
            ++issued_;
        }
        if (oldest_ < issued_) {
            const std::size_t w = oldest_++;
            finish_io(w);
            retire(w, done);
        }
    }

    // Window w's pieces, in its slot, to the observer.
    void show_observer(std::size_t w) {
        if (!observer_) return;
        const auto& window = plan_.windows[w];
        for (std::size_t p = window.first_piece; p < window.end_piece; ++p) {
            const auto& piece = plan_.pieces[p];
            observer_(piece.range, ring_->slot(slot_of(w)) + piece.at, piece.length);
        }
    }

    void fill_for_write(std::size_t w) {
        const unsigned s = slot_of(w);
        const auto& window = plan_.windows[w];
        if (!window.covered) {
            // Bytes no range covers keep what the file holds, zeros past its end: the part in
            // the file is read, and only the gaps beyond it are zeroed (a window written past
            // the file's end, a checkpoint's, reads nothing and zeroes only its gaps).
            std::size_t filled = 0;
            const std::uint64_t size = files_[window.file]->size();
            if (window.offset < size) {
                filled = static_cast<std::size_t>(
                    std::min<std::uint64_t>(window.length, size - window.offset));
                start_io(w, operation::read, filled);
                finish_io(w);
            }
            std::size_t at = filled;
            for (std::size_t p = window.first_piece; p < window.end_piece; ++p) {
                const auto& piece = plan_.pieces[p];  // in file order, not overlapping
                if (piece.at > at) std::memset(ring_->slot(s) + at, 0, piece.at - at);
                at = std::max(at, piece.at + piece.length);
            }
            if (at < window.length) std::memset(ring_->slot(s) + at, 0, window.length - at);
        }
        start_copies(w);
    }

    // Starts window w's copies between its slot and its ranges' memory (the run's own memcpy
    // for host memory) and records them. Until then `filling_` and `started_to_` say which
    // pieces' copies were started, for `end_after_failure`.
    void start_copies(std::size_t w) {
        const unsigned s = slot_of(w);
        const auto& window = plan_.windows[w];
        CopyEngine& engine = ring_->engine();
        filling_ = w;
        for (started_to_ = window.first_piece; started_to_ < window.end_piece; ++started_to_) {
            const auto& piece = plan_.pieces[started_to_];
            const staged_range& r = ranges_[piece.range];
            std::byte* in_slot = ring_->slot(s) + piece.at;
            const std::uintptr_t memory = r.address + piece.from;
            if (r.on_host && op_ == operation::read) {
                std::memcpy(reinterpret_cast<void*>(memory), in_slot, piece.length);
            } else if (r.on_host) {
                std::memcpy(in_slot, reinterpret_cast<const void*>(memory), piece.length);
            } else if (op_ == operation::read) {
                engine.copy_from_slot(s, memory, in_slot, piece.length);
            } else {
                engine.copy_to_slot(s, in_slot, memory, piece.length);
            }
            outcome_.copies += r.on_host ? 0 : 1;
        }
        engine.record(s);
        busy_[s] = w;
        filling_ = none;
    }

    // Starts the transfer between window w's file bytes (the first `length`) and its slot: an
    // async context's runs on one of its workers; any other context's runs now, its outcome
    // kept for finish_io.
    void start_io(std::size_t w, operation op, std::size_t length) {
        const auto& window = plan_.windows[w];
        const file& f = *files_[window.file];
        window_io& io = io_[slot_of(w)];
        const mutable_memory memory = ring_->slot_memory(slot_of(w), length);
        io.length = length;
        if constexpr (detail::starts_transfers<Context>::value) {
            io.handle = context_->submit(f, op, memory, window.offset, config_);
        } else {
            try {
                io.result = nvmeio::transfer(*context_, f, op, memory, window.offset, config_);
            } catch (...) {
                io.error = std::current_exception();
            }
        }
        io.started = true;
    }

    // Waits for window w's transfer. A read that ends early (the file shrank since the plan) is
    // ENODATA; every failure names the first range it concerns.
    void finish_io(std::size_t w) {
        const auto& window = plan_.windows[w];
        const file& f = *files_[window.file];
        window_io& io = io_[slot_of(w)];
        io.started = false;
        try {
            transfer_result r;
            if constexpr (detail::starts_transfers<Context>::value) {
                r = std::exchange(io.handle, handle_type{}).wait();
            } else {
                if (io.error) std::rethrow_exception(std::exchange(io.error, nullptr));
                r = io.result;
            }
            if (r.bytes < io.length) {
                throw io_error({detail::errno_code(ENODATA),
                                "read (the file ended at byte " +
                                    std::to_string(window.offset + r.bytes) + ")",
                                f.path(), window.offset, io.length});
            }
        } catch (const staged_error&) {
            throw;
        } catch (const io_error& e) {
            throw staged_error(e.failure(), range_at(w, e.failure().offset, e.failure().length));
        }
        outcome_.file_bytes += io.length;
        ++outcome_.windows;
    }

    // Waits for every transfer started and not finished, dropping its outcome: none outlives
    // the run, nor a failed call.
    void settle_io() noexcept {
        for (window_io& io : io_) {
            if (!io.started) continue;
            io.started = false;
            if constexpr (detail::starts_transfers<Context>::value) {
                std::error_code ignored;
                try {
                    (void)std::exchange(io.handle, handle_type{}).wait(ignored);
                } catch (...) {  // not an I/O failure (std::bad_alloc in the worker)
                }
            } else {
                io.error = nullptr;
            }
        }
    }

    // The first range (in the caller's order) of window w with bytes in [offset, offset +
    // length), the failed I/O's; else the first after it; else the window's first.
    std::size_t range_at(std::size_t w, std::uint64_t offset, std::uint64_t length) const {
        const auto& window = plan_.windows[w];
        const std::uint64_t end = offset + std::max<std::uint64_t>(length, 1);
        std::size_t overlapping = none;
        std::size_t after = none;
        for (std::size_t p = window.first_piece; p < window.end_piece; ++p) {
            const auto& piece = plan_.pieces[p];
            const std::uint64_t begin = window.offset + piece.at;
            if (begin < end && begin + piece.length > offset) {
                overlapping = std::min(overlapping, piece.range);
            } else if (begin >= end && after == none) {
                after = piece.range;
            }
        }
        if (overlapping != none) return overlapping;
        return after != none ? after : plan_.pieces[window.first_piece].range;
    }

    // Waits for window w's recorded copies. Its slot is free again whatever the wait says: a
    // failed copy ends the run, and `end_after_failure` waits for everything started.
    void wait_for_copies(std::size_t w) {
        const unsigned s = slot_of(w);
        busy_[s] = none;
        ring_->engine().wait(s);
    }

    // Pieces [first, end) have all their bytes where they go: a range whose last piece is
    // among them is done.
    void retire_pieces(std::size_t first, std::size_t end, std::vector<std::size_t>& done) {
        for (std::size_t p = first; p < end; ++p) {
            const std::size_t range = plan_.pieces[p].range;
            if (--plan_.pieces_of_range[range] == 0) done.push_back(range);
        }
    }

    void retire(std::size_t w, std::vector<std::size_t>& done) {
        retire_pieces(plan_.windows[w].first_piece, plan_.windows[w].end_piece, done);
    }

    void wait_and_retire(std::size_t w, std::vector<std::size_t>& done) {
        wait_for_copies(w);
        retire(w, done);
    }

    // Ends the run after a failure: waits for every copy started, recorded or not, so none
    // outlives the call; a read's windows whose copies completed (and the pieces started of one
    // whose copies were being started, if every copy completed) have arrived and are reported.
    // A write's filled slots were never written: nothing of them is. `done` has room for all.
    void end_after_failure(std::vector<std::size_t>& done) noexcept {
        settle_io();
        CopyEngine& engine = ring_->engine();
        const bool all_completed = engine.wait_all();
        const bool read = op_ == operation::read;
        for (std::size_t w = oldest_; w < next_; ++w) {
            if (busy_[slot_of(w)] != w) continue;
            busy_[slot_of(w)] = none;
            if (read && completed(slot_of(w))) retire(w, done);
        }
        if (filling_ != none && read && all_completed) {
            retire_pieces(plan_.windows[filling_].first_piece, started_to_, done);
        }
        filling_ = none;
        next_ = oldest_ = issued_ = plan_.windows.size();
    }

    // Whether slot s's recorded copies completed, once they have ended.
    bool completed(unsigned s) noexcept {
        try {
            ring_->engine().wait(s);
            return true;
        } catch (...) {
            return false;
        }
    }

    // The ring, taken for the run's life (given back after the destructor's wait).
    struct lease {
        explicit lease(staging_ring<CopyEngine>& taken) : ring(&taken) { taken.take(); }
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        ~lease() { ring->give_back(); }
        staging_ring<CopyEngine>* ring;
    } lease_;
    Context* context_;
    staging_ring<CopyEngine>* ring_;
    std::vector<const file*> files_;
    std::vector<staged_range> ranges_;
    operation op_;
    transfer_config config_;
    detail::staged_plan plan_;
    std::vector<std::size_t> busy_;  // per slot: the window whose recorded copies are not yet
                                     // waited for, or none
    std::vector<std::size_t> done_;
    std::exception_ptr failure_;  // thrown by the next advance(), after the ranges it reported
    bool failed_ = false;
    using handle_type = typename detail::submitted<Context>::type;
    // One slot's transfer with its file: started by start_io, waited for by finish_io.
    struct window_io {
        bool started = false;
        std::size_t length = 0;
        handle_type handle;        // an async context's
        transfer_result result;    // another context's, run at start
        std::exception_ptr error;  // and its failure
    };
    std::vector<window_io> io_;   // per slot
    std::size_t depth_ = 1;       // windows whose I/O may be in flight at once
    std::size_t next_ = 0;        // reads: the next window to copy; writes: the next to fill
    std::size_t issued_ = 0;      // the next window whose I/O to start
    std::size_t oldest_ = 0;      // the oldest window not yet retired
    std::size_t filling_ = none;  // the window whose copies are being started
    std::size_t started_to_ = 0;  // the end of its pieces whose copies were started
    staged_outcome outcome_;
    std::function<void(std::size_t, const std::byte*, std::size_t)> observer_;
};

/// Reads every range of the plan from `files` into its memory through the ring; calls
/// `on_done(range)` (may be an empty function) once for each range as all its bytes have
/// arrived, those completed before a failure before it is thrown (`staged_run`). Throws
/// std::invalid_argument for a bad plan before any I/O, staged_error for an I/O failure, what
/// the copy engine throws, and what `on_done` throws (after waiting for the copies started).
template <class Context, class CopyEngine>
staged_outcome staged_read(Context& context, staging_ring<CopyEngine>& ring,
                           std::vector<const file*> files, std::vector<staged_range> ranges,
                           const std::function<void(std::size_t)>& on_done = {},
                           transfer_config config = {}) {
    staged_run<Context, CopyEngine> run(context, ring, std::move(files), std::move(ranges),
                                        operation::read, config);
    while (run.pending()) {
        for (std::size_t range : run.advance()) {
            if (on_done) on_done(range);
        }
    }
    return run.outcome();
}

/// Writes every range of the plan from its memory to `files` through the ring (ranges of one
/// file must not overlap); calls `on_done(range)` as each range's bytes are in the file, as
/// `staged_read` does. Bytes of a written aligned unit that no range covers keep what the file
/// held. Throws as `staged_read`.
template <class Context, class CopyEngine>
staged_outcome staged_write(Context& context, staging_ring<CopyEngine>& ring,
                            std::vector<const file*> files, std::vector<staged_range> ranges,
                            const std::function<void(std::size_t)>& on_done = {},
                            transfer_config config = {}) {
    staged_run<Context, CopyEngine> run(context, ring, std::move(files), std::move(ranges),
                                        operation::write, config);
    while (run.pending()) {
        for (std::size_t range : run.advance()) {
            if (on_done) on_done(range);
        }
    }
    return run.outcome();
}

NVMEIO_END_NAMESPACE

#pragma once
/// \file transfer.hpp
/// The vocabulary every front end speaks: which way bytes move, how a transfer runs, what it
/// reports, the requests and outcomes of batches and staged transfers, and the options of every
/// context. Words only.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvmeio/error.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/perf.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

/// Read or write.
enum class operation {
    read,   ///< File to memory.
    write,  ///< Memory to file.
};

/// Name of an operation, for messages and reports.
[[nodiscard]] constexpr const char* to_string(operation op) noexcept {
    return op == operation::read ? "read" : "write";
}

/// How requests are handed to the backend.
enum class submit_mode {
    single,  ///< One request per submission call (DeepSpeed's single_submit = true).
    /// Ready requests in as few calls as keep the device busy: one call takes what is ready, up
    /// to as many as are already in flight (one when none is); why: docs/perf/causes.md, cause 7.
    block,
};

/// Name of a submit mode, for reports.
[[nodiscard]] constexpr const char* to_string(submit_mode mode) noexcept {
    return mode == submit_mode::single ? "single" : "block";
}

/// When new requests are issued.
enum class strategy_kind {
    /// Submit a round of up to queue-depth requests, reap all of them, repeat.
    sequential,
    /// Keep up to queue-depth requests in flight: submit new ones as completions arrive.
    overlapped,
};

/// Name of a strategy, for reports.
[[nodiscard]] constexpr const char* to_string(strategy_kind kind) noexcept {
    return kind == strategy_kind::sequential ? "sequential" : "overlapped";
}

/// How one transfer runs: the strategy, the submit mode, and whether it is measured.
struct transfer_config {
    strategy_kind strategy = strategy_kind::overlapped;  ///< When requests are issued.
    submit_mode submit = submit_mode::block;             ///< How requests are submitted.
    /// Record latencies and time into `transfer_result::perf` (off: no clock reads, no samples).
    bool measure = false;
};

/// A strategy fixed at compile time: a policy. The engine's loop is a template of it, and a
/// transfer_config only picks one of the two, once, at the top of a transfer. Its other settings
/// are a transfer_config's, in the same order.
template <strategy_kind Kind>
struct strategy_policy {
    static constexpr strategy_kind kind = Kind;  ///< Its run-time name.
    submit_mode submit = submit_mode::block;     ///< As transfer_config::submit.
    bool measure = false;                        ///< As transfer_config::measure.
};

/// strategy_kind::sequential as a policy.
using sequential = strategy_policy<strategy_kind::sequential>;
/// strategy_kind::overlapped as a policy.
using overlapped = strategy_policy<strategy_kind::overlapped>;

namespace detail {
/// Whether `T` is a strategy policy type.
template <class T>
inline constexpr bool is_policy = false;
template <strategy_kind Kind>
inline constexpr bool is_policy<strategy_policy<Kind>> = true;
}  // namespace detail

/// What a transfer did.
struct transfer_result {
    /// Bytes moved: the requested length, except for a read that met the end of the file, where
    /// it is the bytes that exist. The buffer's bytes from there up to the requested length are
    /// unspecified (O_DIRECT transfers whole alignment units); none past the length is touched.
    std::size_t bytes = 0;
    /// Filled when measuring was asked for.
    transfer_perf perf;
};

/// How deep a context's queue is and how large each request is.
struct context_options {
    /// Requests in flight at once (>= 1, <= fs.aio-max-nr for libaio).
    unsigned queue_depth = 32;
    /// Bytes per request (>= 1). On an O_DIRECT file it must be a multiple of the file's
    /// alignment; that is checked when a transfer starts, because it depends on the file.
    std::size_t block_size = std::size_t{1} << 20;
    /// How long a wait for completions first polls the completion ring before it sleeps in the
    /// kernel (at most 1 second); 0, the default, always sleeps at once. Polls that keep running
    /// out of time back off. When the CPU it burns pays: docs/PERFORMANCE.md, "Waiting for
    /// completions".
    std::chrono::microseconds spin{0};
    /// Pin once: an io_uring context registers memory nvmeio allocated with its ring when it
    /// moves bytes through it a second time, so the kernel pins those pages once instead of per
    /// request (which memory: docs/GUARANTEES.md section 6). false: every request pins its own
    /// pages.
    bool pin_once = true;
    /// One thread's ring: an io_uring context sets its ring up for the one thread that moves
    /// bytes through it (SINGLE_ISSUER | DEFER_TASKRUN, Linux 6.1+); moved to another thread, it
    /// gets a plain ring there, once (backend/io_uring.hpp). false: a plain ring from the start.
    bool single_issuer = true;
    /// How long requests the kernel keeps refusing are tried again before the transfer reports
    /// the refusal: an io_submit answering EAGAIN with nothing in flight, or completions
    /// answering EAGAIN, EINTR or ECANCELED without a byte of progress (0 to 1 hour).
    std::chrono::milliseconds retry_budget{std::chrono::seconds(10)};
};

/// How many threads a parallel context has and what each thread's context looks like.
struct parallel_options {
    /// Worker threads, each owning one context (>= 1).
    unsigned threads = 4;
    /// Queue depth and block size of every worker's context.
    context_options context{};
    /// Smallest piece worth a thread of its own; 0 means the context's block size. A transfer
    /// shorter than `threads * min_piece_size` uses fewer threads.
    std::size_t min_piece_size = 0;
};

/// How many transfers an async context runs at once and what each worker's context looks like.
struct async_options {
    /// Worker threads (>= 1): transfers running at the same time.
    unsigned threads = 2;
    /// Queue depth and block size of every worker's context.
    context_options context{};
};

/// One request of a batch: the bytes of `memory` (any alignment) and as many at `offset` of the
/// batch's file. A write batch only reads `memory`.
struct batch_request {
    mutable_memory memory;     ///< Memory side; its size is the request's length.
    std::uint64_t offset = 0;  ///< File offset.
};

/// What happened to one request.
struct batch_result {
    /// Bytes moved: the length, except for a read meeting the end of the file, or 0 on failure.
    std::size_t bytes = 0;
    /// The failure of the I/O that carried this request, if it failed.
    io_failure failure;
};

/// How a batch (and a stripe's share of a transfer) is coalesced and moved.
struct batch_options {
    /// Largest coalesced I/O in bytes (>= 1). A run of requests that cannot be cut at an aligned
    /// offset may exceed it.
    std::size_t max_io_size = std::size_t{8} << 20;
    /// Aligned requests averaging at least this many bytes go member by member without a copy;
    /// smaller ones are coalesced and staged.
    std::size_t min_direct_size = std::size_t{256} << 10;
    /// Bytes of staging slots in use at once (at least one slot), which every bounced byte goes
    /// through, padded last units included; they stay with the context (each worker's, for a
    /// parallel one) for its next batch, so they are allocated and pinned once. A written batch
    /// also reads the file's bytes of its padded last units into ordinary memory, one unit each,
    /// at most this many bytes a wave.
    std::size_t bounce_size = std::size_t{64} << 20;
    /// Strategy and submit mode of the batch's I/Os; `measure` fills `batch_outcome::perf`.
    transfer_config config{};
};

/// What a batch did.
struct batch_outcome {
    std::vector<batch_result> results;  ///< One per request, in the caller's order.
    std::size_t ios = 0;            ///< I/Os issued after coalescing (each then split in blocks).
    std::size_t bounced_bytes = 0;  ///< Bytes copied through staging slots.
    /// With `batch_options::config.measure`: the batch's latencies, requests, time and bytes.
    transfer_perf perf;

    /// Index of the first request (in the caller's order) that failed, or `results.size()`.
    [[nodiscard]] std::size_t first_failure() const noexcept {
        for (std::size_t i = 0; i < results.size(); ++i) {
            if (results[i].failure) return i;
        }
        return results.size();
    }
};

/// One range of a staged transfer's plan: `length` bytes at `offset` of `files[file]`, and the
/// memory they go to (a read) or come from (a write).
struct staged_range {
    std::size_t file = 0;        ///< Index into the transfer's files.
    std::uint64_t offset = 0;    ///< File offset of the first byte.
    std::size_t length = 0;      ///< Bytes (0: the range completes at once).
    std::uintptr_t address = 0;  ///< The memory: the copy engine's (a device address) or host's.
    /// Host memory, copied with memcpy by the transfer itself (a file header beside tensors on
    /// a GPU); false: the copy engine's memory.
    bool on_host = false;
};

/// The ring: K slots of `slot_size` bytes.
struct ring_options {
    /// Slots (>= 1; 2 or more overlap I/O with copies).
    unsigned slots = 4;
    /// Bytes per slot: a positive multiple of 4096 and of every file's O_DIRECT unit.
    std::size_t slot_size = std::size_t{64} << 20;
};

/// What a staged transfer did.
struct staged_outcome {
    std::uint64_t file_bytes = 0;  ///< Bytes moved between files and slots (aligned supersets).
    /// Transfers between a slot and a file (a write's read of the bytes its ranges leave
    /// uncovered counted too).
    std::size_t windows = 0;
    std::size_t copies = 0;  ///< Copies started on the copy engine.
};

NVMEIO_END_NAMESPACE

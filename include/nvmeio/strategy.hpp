#pragma once
/// \file strategy.hpp
/// Transfers: move a byte range between memory and a file through an aio context, with the
/// sequential or the overlapped strategy.
///
/// O_DIRECT rules (checked before anything is submitted; std::invalid_argument otherwise):
///  - the buffer address must be a multiple of `file.alignment().memory`;
///  - the file offset must be a multiple of `file.alignment().offset`;
///  - the context's block size must be a multiple of `file.alignment().strictest()`.
/// The length may be anything: the aligned prefix goes through the backend and the last partial
/// alignment unit goes through a small bounce buffer (a read never writes past `length` bytes of
/// the caller's buffer; a write merges the unit with the file's bytes and leaves the file exactly
/// `offset + length` long when it grew it). Unaligned buffers and offsets are rejected rather
/// than bounced, because bouncing a whole transfer would silently halve its speed; use
/// `file::read_at` / `file::write_at` for such ranges.
///
/// A write that grows a regular file first allocates its range with `fallocate`, so the file has
/// its final size before any data moves (after a failed write the range exists but its bytes
/// are unspecified); filesystems without fallocate, and devices, are written without it.
///
/// Every transfer, batch and stripe runs on one engine (detail/engine.hpp): the retry and failure
/// rules of docs/GUARANTEES.md hold for all of them.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <system_error>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/detail/engine.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/perf.hpp"

namespace nvmeio {

/// How requests are handed to the backend.
enum class submit_mode {
    single,  ///< One request per submission call (DeepSpeed's single_submit = true).
    /// Ready requests in as few calls as keep the device busy: one call takes what is ready, up
    /// to as many as are already in flight (one when none is), so an idle queue is started with
    /// one request, then 1, 2, 4... and a busy one takes everything ready at once. (The kernel
    /// holds back every request of a multi-request call until the call returns.)
    block,
};

/// Name of a submit mode, for reports.
[[nodiscard]] constexpr const char* to_string(submit_mode mode) noexcept {
    return mode == submit_mode::single ? "single" : "block";
}

/// Submit a batch of up to queue-depth requests, reap all of them, repeat.
struct sequential {
    submit_mode submit = submit_mode::block;  ///< Paced calls for the batch, or one per request.
    static constexpr bool drain_before_refill = true;  ///< The batch is reaped whole.
    static constexpr const char* name = "sequential";  ///< For reports.
};

/// Keep up to queue-depth requests in flight: submit new ones as completions arrive.
struct overlapped {
    submit_mode submit =
        submit_mode::block;  ///< Paced calls for what is ready, or one per request.
    static constexpr bool drain_before_refill = false;  ///< Refill after every reap.
    static constexpr const char* name = "overlapped";   ///< For reports.
};

/// A strategy chosen at run time (tools, configuration files).
enum class strategy_kind {
    sequential,  ///< See nvmeio::sequential.
    overlapped,  ///< See nvmeio::overlapped.
};

/// Name of a strategy, for reports.
[[nodiscard]] constexpr const char* to_string(strategy_kind kind) noexcept {
    return kind == strategy_kind::sequential ? "sequential" : "overlapped";
}

/// Per-transfer switches.
struct transfer_options {
    /// Record latencies and time into `transfer_result::perf` (off: no clock reads, no samples).
    bool measure = false;
};

/// Run-time choice of strategy and submit mode plus the per-transfer switches.
struct transfer_config {
    strategy_kind strategy = strategy_kind::overlapped;  ///< Which strategy.
    submit_mode submit = submit_mode::block;             ///< How requests are submitted.
    bool measure = false;                                ///< As transfer_options::measure.
};

/// What a transfer did.
struct transfer_result {
    /// Bytes moved: the requested length, except for a read that met the end of the file, where
    /// it is the bytes that exist. The buffer's bytes from there up to the requested length are
    /// unspecified (O_DIRECT transfers whole alignment units); none past the length is touched.
    std::size_t bytes = 0;
    /// Filled when measuring was asked for.
    transfer_perf perf;
};

namespace detail {

// Why a transfer may not proceed, or an empty string (no allocation) when it may.
inline std::string transfer_problem(const file& f, operation op, const void* buffer,
                                    std::size_t length, std::uint64_t offset,
                                    std::size_t block_size) {
    const auto what = [&] {  // built only for a message
        return std::string(to_string(op)) + " of " + std::to_string(length) + " bytes at offset " +
               std::to_string(offset) + " in '" + f.path() + "': ";
    };
    if (!f.is_open()) return what() + "the file is not open";
    if (op == operation::write && f.mode() == open_mode::read) {
        return what() + "the file was opened with open_mode::read";
    }
    if (length == 0) return {};
    if (buffer == nullptr) return what() + "the buffer is null";
    if (offset > std::numeric_limits<std::uint64_t>::max() - length ||
        offset + length > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) {
        return what() + "the range passes the largest file offset";
    }
    if (!f.is_direct()) return {};
    const dio_alignment& a = f.alignment();
    if (!is_aligned(buffer, a.memory)) {
        char address[32];
        std::snprintf(address, sizeof address, "%p", buffer);
        return what() + "buffer address " + address + " is not a multiple of " +
               std::to_string(a.memory) +
               " bytes, which O_DIRECT on this file requires (use aligned_buffer or "
               "aligned_allocator, or open the file with direct_io::off)";
    }
    if (!is_aligned(offset, a.offset)) {
        return what() + "the offset is not a multiple of " + std::to_string(a.offset) +
               " bytes, which O_DIRECT on this file requires (use file::read_at/write_at for "
               "unaligned ranges)";
    }
    if (!is_aligned(block_size, a.strictest())) {
        return what() + "block_size " + std::to_string(block_size) + " is not a multiple of " +
               std::to_string(a.strictest()) + " bytes, the O_DIRECT alignment of this file";
    }
    return {};
}

// The one precondition check of every transfer front end (the O_DIRECT rules above).
inline void check_transfer(const file& f, operation op, const void* buffer, std::size_t length,
                           std::uint64_t offset, std::size_t block_size) {
    std::string problem = transfer_problem(f, op, buffer, length, offset, block_size);
    if (!problem.empty()) throw_invalid(problem);
}

// How the engine runs for a strategy chosen at run time.
inline engine_settings settings_for(const transfer_config& config, transfer_perf* perf) {
    return {config.strategy == strategy_kind::sequential, config.submit == submit_mode::single,
            config.measure ? perf : nullptr};
}

// A checked transfer: one segment through the engine.
template <class Backend>
transfer_result run_transfer(basic_aio_context<Backend>& context, file& f, operation op,
                             void* buffer, std::size_t length, std::uint64_t offset,
                             const transfer_config& config, io_failure& failure) {
    transfer_result result;
    failure = {};
    if (length == 0) return result;
    segment one{static_cast<std::byte*>(buffer), offset, length, 0, 0, {}};
    move_segments(context, f, op, &one, 1, settings_for(config, &result.perf));
    result.bytes = one.bytes;
    failure = std::move(one.failure);
    return result;
}

}  // namespace detail

/// Moves `length` bytes between `buffer` and `offset` of `f` with strategy `Policy`, recording a
/// failure in `failure` (operation, file, offset, length) instead of throwing it. Throws
/// std::invalid_argument when a precondition above is violated.
template <class Policy, class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset, const Policy& policy,
                         transfer_options options, io_failure& failure) {
    detail::check_transfer(f, op, buffer, length, offset, context.block_size());
    const strategy_kind kind =
        Policy::drain_before_refill ? strategy_kind::sequential : strategy_kind::overlapped;
    return detail::run_transfer(context, f, op, buffer, length, offset,
                                {kind, policy.submit, options.measure}, failure);
}

/// As above; throws io_error on failure.
template <class Policy, class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset, const Policy& policy,
                         transfer_options options = {}) {
    io_failure failure;
    transfer_result result =
        transfer(context, f, op, buffer, length, offset, policy, options, failure);
    detail::throw_if(failure);
    return result;
}

/// As above; reports failure through `ec` (bad parameters still throw std::invalid_argument).
template <class Policy, class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset, const Policy& policy,
                         transfer_options options, std::error_code& ec) {
    io_failure failure;
    transfer_result result =
        transfer(context, f, op, buffer, length, offset, policy, options, failure);
    ec = failure.code;
    return result;
}

/// Run-time strategy choice; records a failure in `failure`.
template <class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset, const transfer_config& config,
                         io_failure& failure) {
    detail::check_transfer(f, op, buffer, length, offset, context.block_size());
    return detail::run_transfer(context, f, op, buffer, length, offset, config, failure);
}

/// Run-time strategy choice; throws io_error on failure.
template <class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset,
                         const transfer_config& config = {}) {
    io_failure failure;
    transfer_result result = transfer(context, f, op, buffer, length, offset, config, failure);
    detail::throw_if(failure);
    return result;
}

/// Run-time strategy choice; reports failure through `ec`.
template <class Backend>
transfer_result transfer(basic_aio_context<Backend>& context, file& f, operation op, void* buffer,
                         std::size_t length, std::uint64_t offset, const transfer_config& config,
                         std::error_code& ec) {
    io_failure failure;
    transfer_result result = transfer(context, f, op, buffer, length, offset, config, failure);
    ec = failure.code;
    return result;
}

/// Reads `length` bytes at `offset` of `f` into `buffer`; throws io_error on failure.
template <class Backend>
transfer_result read(basic_aio_context<Backend>& context, file& f, void* buffer, std::size_t length,
                     std::uint64_t offset, const transfer_config& config = {}) {
    return transfer(context, f, operation::read, buffer, length, offset, config);
}

/// Reads; reports failure through `ec`.
template <class Backend>
transfer_result read(basic_aio_context<Backend>& context, file& f, void* buffer, std::size_t length,
                     std::uint64_t offset, const transfer_config& config, std::error_code& ec) {
    return transfer(context, f, operation::read, buffer, length, offset, config, ec);
}

/// Writes `length` bytes from `buffer` at `offset` of `f`; throws io_error on failure.
template <class Backend>
transfer_result write(basic_aio_context<Backend>& context, file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset,
                      const transfer_config& config = {}) {
    return transfer(context, f, operation::write, const_cast<void*>(buffer), length, offset,
                    config);
}

/// Writes; reports failure through `ec`.
template <class Backend>
transfer_result write(basic_aio_context<Backend>& context, file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset, const transfer_config& config,
                      std::error_code& ec) {
    return transfer(context, f, operation::write, const_cast<void*>(buffer), length, offset, config,
                    ec);
}

namespace detail {

// A raw pointer carries no size; an aligned_buffer does, so a length it cannot hold is refused
// before anything touches memory past its end.
inline void check_buffer_holds(const aligned_buffer& buffer, std::size_t length, operation op,
                               const file& f, std::uint64_t offset) {
    if (length > buffer.size()) {
        throw_invalid(std::string(to_string(op)) + " of " + std::to_string(length) +
                      " bytes at offset " + std::to_string(offset) + " in '" + f.path() +
                      "': the buffer holds only " + std::to_string(buffer.size()) + " bytes");
    }
}

}  // namespace detail

/// Reads `length` bytes at `offset` of `f` into `buffer`; throws std::invalid_argument when
/// `length > buffer.size()` (and for the O_DIRECT rules above), io_error on failure.
template <class Backend>
transfer_result read(basic_aio_context<Backend>& context, file& f, aligned_buffer& buffer,
                     std::size_t length, std::uint64_t offset, const transfer_config& config = {}) {
    detail::check_buffer_holds(buffer, length, operation::read, f, offset);
    return read(context, f, buffer.data(), length, offset, config);
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Backend>
transfer_result read(basic_aio_context<Backend>& context, file& f, aligned_buffer& buffer,
                     std::size_t length, std::uint64_t offset, const transfer_config& config,
                     std::error_code& ec) {
    detail::check_buffer_holds(buffer, length, operation::read, f, offset);
    return read(context, f, buffer.data(), length, offset, config, ec);
}

/// Writes `length` bytes of `buffer` at `offset` of `f`; throws std::invalid_argument when
/// `length > buffer.size()` (and for the O_DIRECT rules above), io_error on failure.
template <class Backend>
transfer_result write(basic_aio_context<Backend>& context, file& f, const aligned_buffer& buffer,
                      std::size_t length, std::uint64_t offset,
                      const transfer_config& config = {}) {
    detail::check_buffer_holds(buffer, length, operation::write, f, offset);
    return write(context, f, buffer.data(), length, offset, config);
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Backend>
transfer_result write(basic_aio_context<Backend>& context, file& f, const aligned_buffer& buffer,
                      std::size_t length, std::uint64_t offset, const transfer_config& config,
                      std::error_code& ec) {
    detail::check_buffer_holds(buffer, length, operation::write, f, offset);
    return write(context, f, buffer.data(), length, offset, config, ec);
}

}  // namespace nvmeio

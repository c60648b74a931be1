#pragma once
/// \file strategy.hpp
/// Transfers: move a byte range between memory and a file through an aio context, with the
/// sequential or the overlapped strategy: a policy (`nvmeio::sequential{}`,
/// `nvmeio::overlapped{}`), whose loop the compiler sees as its own, or the run-time
/// `transfer_config`, which picks one of those loops once per transfer (transfer.hpp).
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
#include <system_error>
#include <type_traits>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"

namespace nvmeio {
inline namespace v0 {

/// Moves `length` bytes between `buffer` and `offset` of `f`; throws io_error on failure,
/// std::invalid_argument when a precondition above is violated.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result transfer(basic_aio_context<Backend>& context, const file& f,
                                       operation op, void* buffer, std::size_t length,
                                       std::uint64_t offset, const Config& config = {}) {
    detail::check_transfer(f, op, buffer, length, offset, context.block_size());
    return detail::or_throw([&](io_failure& failure) {
        return detail::run_transfer(context, f, op, buffer, length, offset, config, failure);
    });
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result transfer(basic_aio_context<Backend>& context, const file& f,
                                       operation op, void* buffer, std::size_t length,
                                       std::uint64_t offset, const Config& config,
                                       std::error_code& ec) {
    detail::check_transfer(f, op, buffer, length, offset, context.block_size());
    return detail::or_report(ec, [&](io_failure& failure) {
        return detail::run_transfer(context, f, op, buffer, length, offset, config, failure);
    });
}

/// Reads `length` bytes at `offset` of `f` into `buffer`; throws io_error on failure.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result read(basic_aio_context<Backend>& context, const file& f, void* buffer,
                                   std::size_t length, std::uint64_t offset,
                                   const Config& config = {}) {
    return transfer(context, f, operation::read, buffer, length, offset, config);
}

/// Reads; reports failure through `ec`.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result read(basic_aio_context<Backend>& context, const file& f, void* buffer,
                                   std::size_t length, std::uint64_t offset, const Config& config,
                                   std::error_code& ec) {
    return transfer(context, f, operation::read, buffer, length, offset, config, ec);
}

/// Writes `length` bytes from `buffer` at `offset` of `f`; throws io_error on failure.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
transfer_result write(basic_aio_context<Backend>& context, const file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset, const Config& config = {}) {
    return transfer(context, f, operation::write, const_cast<void*>(buffer), length, offset,
                    config);
}

/// Writes; reports failure through `ec`.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
transfer_result write(basic_aio_context<Backend>& context, const file& f, const void* buffer,
                      std::size_t length, std::uint64_t offset, const Config& config,
                      std::error_code& ec) {
    return transfer(context, f, operation::write, const_cast<void*>(buffer), length, offset, config,
                    ec);
}

/// Reads `length` bytes at `offset` of `f` into `buffer`; throws std::invalid_argument when
/// `length > buffer.size()` (and for the O_DIRECT rules above), io_error on failure.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result read(basic_aio_context<Backend>& context, const file& f,
                                   aligned_buffer& buffer, std::size_t length, std::uint64_t offset,
                                   const Config& config = {}) {
    detail::check_buffer_holds(buffer, length, operation::read, f, offset);
    return read(context, f, buffer.data(), length, offset, config);
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
[[nodiscard]] transfer_result read(basic_aio_context<Backend>& context, const file& f,
                                   aligned_buffer& buffer, std::size_t length, std::uint64_t offset,
                                   const Config& config, std::error_code& ec) {
    detail::check_buffer_holds(buffer, length, operation::read, f, offset);
    return read(context, f, buffer.data(), length, offset, config, ec);
}

/// Writes `length` bytes of `buffer` at `offset` of `f`; throws std::invalid_argument when
/// `length > buffer.size()` (and for the O_DIRECT rules above), io_error on failure.
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
transfer_result write(basic_aio_context<Backend>& context, const file& f,
                      const aligned_buffer& buffer, std::size_t length, std::uint64_t offset,
                      const Config& config = {}) {
    detail::check_buffer_holds(buffer, length, operation::write, f, offset);
    return write(context, f, buffer.data(), length, offset, config);
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Backend, class Config = transfer_config, detail::if_transfer_config<Config> = 0>
transfer_result write(basic_aio_context<Backend>& context, const file& f,
                      const aligned_buffer& buffer, std::size_t length, std::uint64_t offset,
                      const Config& config, std::error_code& ec) {
    detail::check_buffer_holds(buffer, length, operation::write, f, offset);
    return write(context, f, buffer.data(), length, offset, config, ec);
}

}  // namespace v0
}  // namespace nvmeio

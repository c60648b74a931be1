#pragma once
/// \file strategy.hpp
/// Transfers: move one byte range between memory and a file through an aio context, with a
/// strategy policy (`nvmeio::sequential{}`, `nvmeio::overlapped{}`) or the run-time
/// `transfer_config`, which picks one of their loops once per transfer (transfer.hpp).
/// O_DIRECT: buffer and offset aligned to `file.alignment()`, block size a multiple of
/// `alignment().strictest()`, any length; otherwise std::invalid_argument before anything is
/// submitted. The whole contract: docs/GUARANTEES.md, section 5c.

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

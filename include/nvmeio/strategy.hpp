#pragma once
/// \file strategy.hpp
/// Transfers: one `transfer`, `read` and `write` for every pair of context and target (an aio
/// context and a file here; parallel.hpp and stripe.hpp the others), with a strategy policy or
/// the run-time `transfer_config` (transfer.hpp).
/// O_DIRECT on a file: memory and offset aligned to `file.alignment()`, block size a multiple of
/// `alignment().strictest()`, any length; otherwise std::invalid_argument before anything is
/// submitted. The whole contract: docs/GUARANTEES.md, section 5c.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/aligned_allocator.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

template <class Backend>
class basic_parallel_context;  // parallel_context.hpp
class stripe_set;              // stripe.hpp

/// The memory side of a transfer: a pointer, and the bytes it holds where that is known.
/// `mutable_memory` (read into) is made from a `void*` or an `aligned_buffer&`, `const_memory`
/// (written from) from a `const void*` or a `const aligned_buffer&`. An aligned_buffer's size
/// bounds the transfer (a longer one is an std::invalid_argument); a pointer's is unknown.
template <class Void, class Buffer>
class basic_memory {
  public:
    /// `size` bytes at `data`.
    basic_memory(Void* data, std::size_t size) noexcept : data_(data), size_(size) {}
    /// Memory at `data` whose size only the caller knows.
    basic_memory(Void* data) noexcept  // NOLINT(google-explicit-constructor): as a pointer
        : basic_memory(data, std::numeric_limits<std::size_t>::max()) {}
    /// The buffer's `size()` bytes.
    basic_memory(Buffer& buffer) noexcept  // NOLINT(google-explicit-constructor): as a buffer
        : basic_memory(buffer.data(), buffer.size()) {}
    /// `&buffer` for `buffer.data()` (an aligned_buffer, a vector) would move the object's own
    /// bytes: a pointer to a class that is not trivially copyable is refused.
    template <class T,
              std::enable_if_t<std::is_class_v<T> && !std::is_trivially_copyable_v<T>, int> = 0>
    basic_memory(T* object) = delete;

    /// The first byte.
    [[nodiscard]] Void* data() const noexcept { return data_; }
    /// The bytes it holds; SIZE_MAX when unknown.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }

  private:
    Void* data_;
    std::size_t size_;
};

/// Memory a transfer may write into.
using mutable_memory = basic_memory<void, aligned_buffer>;
/// Memory a transfer only reads.
using const_memory = basic_memory<const void, const aligned_buffer>;

namespace detail {

// How a context moves bytes to and from a target. Each pair nvmeio serves specialises it once
// (an aio context and a file below; a parallel context and a file, parallel.hpp; a parallel
// context and a stripe set, stripe.hpp) with the settings it takes, the default among them, and
// `run`, which checks everything, then moves the bytes, recording an I/O failure in `failure`.
template <class Context, class Target>
struct route {};

// The other routes, declared here so that no use can come before them.
template <class Backend>
struct route<basic_parallel_context<Backend>, file>;
template <class Backend>
struct route<basic_parallel_context<Backend>, stripe_set>;

// The context a route is keyed on: a class derived from a context is served as that context.
template <class Backend>
basic_aio_context<Backend> context_kind(const basic_aio_context<Backend>*);
template <class Backend>
basic_parallel_context<Backend> context_kind(const basic_parallel_context<Backend>*);
template <class Context, class Target>
using route_for = route<decltype(detail::context_kind(static_cast<Context*>(nullptr))), Target>;

// What a route to a file takes: the run-time transfer_config (the default, or a class derived
// from it) or a policy.
struct file_route {
    using settings = transfer_config;
    template <class Settings>
    static constexpr bool takes =
        is_policy<Settings> || std::is_base_of_v<transfer_config, Settings>;
};

template <class Backend>
struct route<basic_aio_context<Backend>, file> : file_route {
    template <class Config>
    static transfer_result run(basic_aio_context<Backend>& context, const file& f, operation op,
                               mutable_memory memory, std::size_t length, std::uint64_t offset,
                               const Config& config, io_failure& failure) {
        check_transfer(f, op, memory.data(), length, offset, context.block_size());
        return run_transfer(context, f, op, memory.data(), length, offset, config, failure);
    }
};

// The settings of a route when the caller gives none.
template <class Context, class Target>
using settings_of = typename route_for<Context, Target>::settings;

// Takes part in overload resolution only where a route moves bytes with `Settings`.
template <class Context, class Target, class Settings>
using if_route = std::enable_if_t<route_for<Context, Target>::template takes<Settings>, int>;

// The check every route shares: a length past the end of memory whose size is known is refused
// before anything moves.
template <class Target>
void check_holds(const Target& target, operation op, const mutable_memory& memory,
                 std::size_t length, std::uint64_t offset) {
    if (length <= memory.size()) return;
    std::string where = " of the stripe set";
    if constexpr (std::is_same_v<Target, file>) where = " in '" + target.path() + "'";
    throw_invalid(std::string(to_string(op)) + " of " + std::to_string(length) +
                  " bytes at offset " + std::to_string(offset) + where +
                  ": the buffer holds only " + std::to_string(memory.size()) + " bytes");
}

}  // namespace detail

/// Moves `length` bytes between `memory` and `offset` of `target` through `context`; throws
/// io_error on failure, std::invalid_argument (before anything moves) when `length` passes the
/// end of an aligned_buffer or a precondition above is violated. Const memory goes to `write`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result transfer(Context& context, const Target& target, operation op,
                                       mutable_memory memory, std::size_t length,
                                       std::uint64_t offset, const Settings& settings = {}) {
    detail::check_holds(target, op, memory, length, offset);
    return detail::or_throw([&](io_failure& failure) {
        return detail::route_for<Context, Target>::run(context, target, op, memory, length, offset,
                                                       settings, failure);
    });
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result transfer(Context& context, const Target& target, operation op,
                                       mutable_memory memory, std::size_t length,
                                       std::uint64_t offset, const Settings& settings,
                                       std::error_code& ec) {
    detail::check_holds(target, op, memory, length, offset);
    return detail::or_report(ec, [&](io_failure& failure) {
        return detail::route_for<Context, Target>::run(context, target, op, memory, length, offset,
                                                       settings, failure);
    });
}

/// Reads `length` bytes at `offset` of `target` into `memory`; throws as `transfer`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result read(Context& context, const Target& target, mutable_memory memory,
                                   std::size_t length, std::uint64_t offset,
                                   const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::read, memory, length, offset, settings);
}

/// Reads; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result read(Context& context, const Target& target, mutable_memory memory,
                                   std::size_t length, std::uint64_t offset,
                                   const Settings& settings, std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::read, memory, length, offset, settings, ec);
}

/// Writes `length` bytes of `memory` at `offset` of `target`; throws as `transfer`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
transfer_result write(Context& context, const Target& target, const_memory memory,
                      std::size_t length, std::uint64_t offset, const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::write,
                            {const_cast<void*>(memory.data()), memory.size()}, length, offset,
                            settings);
}

/// Writes; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
transfer_result write(Context& context, const Target& target, const_memory memory,
                      std::size_t length, std::uint64_t offset, const Settings& settings,
                      std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::write,
                            {const_cast<void*>(memory.data()), memory.size()}, length, offset,
                            settings, ec);
}

NVMEIO_END_NAMESPACE

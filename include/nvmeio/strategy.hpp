#pragma once
/// \file strategy.hpp
/// Transfers: one `transfer`, `read` and `write` for every pair of context and target (an aio
/// context and a file here; parallel.hpp and stripe.hpp the others), with a strategy policy or
/// the run-time `transfer_config` (transfer.hpp). The memory side is a view that carries its size
/// (memory.hpp): a transfer moves `memory.size()` bytes.
/// O_DIRECT on a file: memory and offset aligned to `file.alignment()`, block size a multiple of
/// `alignment().strictest()`, any length; otherwise std::invalid_argument before anything is
/// submitted. The whole contract: docs/GUARANTEES.md, section 5c.

#include <cstddef>
#include <cstdint>
#include <system_error>
#include <type_traits>
#include <utility>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/memory.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

template <class Backend>
class basic_parallel_context;  // parallel_context.hpp
class stripe_set;              // stripe.hpp

namespace detail {

// What a route to a file takes: a transfer_config (or a class derived from it) or a policy.
template <class Settings>
using if_file_settings =
    std::enable_if_t<is_policy<Settings> || std::is_base_of_v<transfer_config, Settings>, int>;

// How a context moves bytes to and from a target: each pair nvmeio serves is one overload of
// `route`, declared here and called by its qualified name only, so that no function of a
// caller's namespace can stand in for it. Each checks everything, then moves the bytes,
// recording an I/O failure in `failure`. A class derived from a context is served as that
// context.
// An aio context and a file: below.
template <class Backend, class Settings, if_file_settings<Settings> = 0>
transfer_result route(basic_aio_context<Backend>& context, const file& f, operation op,
                      mutable_memory memory, std::uint64_t offset, const Settings& settings,
                      io_failure& failure);
// A parallel context and a file: parallel.hpp.
template <class Backend, class Settings, if_file_settings<Settings> = 0>
transfer_result route(basic_parallel_context<Backend>& context, const file& f, operation op,
                      mutable_memory memory, std::uint64_t offset, const Settings& settings,
                      io_failure& failure);
// A parallel context and a stripe set (batch_options, or a class derived from them): stripe.hpp.
template <class Backend>
transfer_result route(basic_parallel_context<Backend>& context, const stripe_set& set, operation op,
                      mutable_memory memory, std::uint64_t offset, const batch_options& options,
                      io_failure& failure);

// The settings a target's routes take when the caller gives none.
template <class Target>
struct default_settings {
    using type = transfer_config;
};
template <>
struct default_settings<stripe_set> {
    using type = batch_options;
};
template <class Target>
using default_settings_t = typename default_settings<Target>::type;

template <class Backend, class Settings, if_file_settings<Settings>>
transfer_result route(basic_aio_context<Backend>& context, const file& f, operation op,
                      mutable_memory memory, std::uint64_t offset, const Settings& settings,
                      io_failure& failure) {
    check_transfer(f, op, memory, offset, context.block_size());
    return run_transfer(context, f, op, memory, offset, settings, failure);
}

// transfer_result where a route moves bytes between a Context and a Target with `Settings`;
// otherwise the front end below takes no part in overload resolution.
template <class Context, class Target, class Settings>
using route_result = decltype(detail::route(
    std::declval<Context&>(), std::declval<const Target&>(), operation::read, mutable_memory{},
    std::uint64_t{}, std::declval<const Settings&>(), std::declval<io_failure&>()));

}  // namespace detail

/// Moves `memory.size()` bytes between `memory` and `offset` of `target` through `context`;
/// throws io_error on failure, std::invalid_argument (before anything moves) when a
/// precondition above is violated. Const memory goes to `write`.
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
[[nodiscard]] detail::route_result<Context, Target, Settings> transfer(
    Context& context, const Target& target, operation op, mutable_memory memory,
    std::uint64_t offset, const Settings& settings = {}) {
    io_failure failure;
    auto result = detail::route(context, target, op, memory, offset, settings, failure);
    detail::throw_if(failure);
    return result;
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
[[nodiscard]] detail::route_result<Context, Target, Settings> transfer(
    Context& context, const Target& target, operation op, mutable_memory memory,
    std::uint64_t offset, const Settings& settings, std::error_code& ec) {
    io_failure failure;
    auto result = detail::route(context, target, op, memory, offset, settings, failure);
    ec = failure.code;
    return result;
}

/// Fills `memory` from `offset` of `target` (short only at the end of the file); throws as
/// `transfer`.
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
[[nodiscard]] detail::route_result<Context, Target, Settings> read(Context& context,
                                                                   const Target& target,
                                                                   mutable_memory memory,
                                                                   std::uint64_t offset,
                                                                   const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::read, memory, offset, settings);
}

/// Reads; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
[[nodiscard]] detail::route_result<Context, Target, Settings> read(
    Context& context, const Target& target, mutable_memory memory, std::uint64_t offset,
    const Settings& settings, std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::read, memory, offset, settings, ec);
}

/// Writes every byte of `memory` at `offset` of `target`; throws as `transfer`.
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
detail::route_result<Context, Target, Settings> write(Context& context, const Target& target,
                                                      const_memory memory, std::uint64_t offset,
                                                      const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::write, detail::unconst(memory), offset,
                            settings);
}

/// Writes; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::default_settings_t<Target>>
detail::route_result<Context, Target, Settings> write(Context& context, const Target& target,
                                                      const_memory memory, std::uint64_t offset,
                                                      const Settings& settings,
                                                      std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::write, detail::unconst(memory), offset,
                            settings, ec);
}

NVMEIO_END_NAMESPACE

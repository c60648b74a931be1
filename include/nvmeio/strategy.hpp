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
                               mutable_memory memory, std::uint64_t offset, const Config& config,
                               io_failure& failure) {
        check_transfer(f, op, memory, offset, context.block_size());
        return run_transfer(context, f, op, memory, offset, config, failure);
    }
};

// The settings of a route when the caller gives none.
template <class Context, class Target>
using settings_of = typename route_for<Context, Target>::settings;

// Takes part in overload resolution only where a route moves bytes with `Settings`.
template <class Context, class Target, class Settings>
using if_route = std::enable_if_t<route_for<Context, Target>::template takes<Settings>, int>;

}  // namespace detail

/// Moves `memory.size()` bytes between `memory` and `offset` of `target` through `context`;
/// throws io_error on failure, std::invalid_argument (before anything moves) when a
/// precondition above is violated. Const memory goes to `write`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result transfer(Context& context, const Target& target, operation op,
                                       mutable_memory memory, std::uint64_t offset,
                                       const Settings& settings = {}) {
    return detail::or_throw([&](io_failure& failure) {
        return detail::route_for<Context, Target>::run(context, target, op, memory, offset,
                                                       settings, failure);
    });
}

/// As above; reports I/O failure through `ec` (bad parameters still throw).
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result transfer(Context& context, const Target& target, operation op,
                                       mutable_memory memory, std::uint64_t offset,
                                       const Settings& settings, std::error_code& ec) {
    return detail::or_report(ec, [&](io_failure& failure) {
        return detail::route_for<Context, Target>::run(context, target, op, memory, offset,
                                                       settings, failure);
    });
}

/// Fills `memory` from `offset` of `target` (short only at the end of the file); throws as
/// `transfer`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result read(Context& context, const Target& target, mutable_memory memory,
                                   std::uint64_t offset, const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::read, memory, offset, settings);
}

/// Reads; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
[[nodiscard]] transfer_result read(Context& context, const Target& target, mutable_memory memory,
                                   std::uint64_t offset, const Settings& settings,
                                   std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::read, memory, offset, settings, ec);
}

/// Writes every byte of `memory` at `offset` of `target`; throws as `transfer`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
transfer_result write(Context& context, const Target& target, const_memory memory,
                      std::uint64_t offset, const Settings& settings = {}) {
    return nvmeio::transfer(context, target, operation::write, detail::unconst(memory), offset,
                            settings);
}

/// Writes; reports I/O failure through `ec`.
template <class Context, class Target, class Settings = detail::settings_of<Context, Target>,
          detail::if_route<Context, Target, Settings> = 0>
transfer_result write(Context& context, const Target& target, const_memory memory,
                      std::uint64_t offset, const Settings& settings, std::error_code& ec) {
    return nvmeio::transfer(context, target, operation::write, detail::unconst(memory), offset,
                            settings, ec);
}

NVMEIO_END_NAMESPACE

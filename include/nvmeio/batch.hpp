#pragma once
/// \file batch.hpp
/// Batched transfers: many `(buffer, length, offset)` requests on one file (every tensor of a
/// model, every block of a KV cache) moved as one batch: sorted by offset, adjacent ones
/// coalesced into large I/Os, all through one queue kept full (detail/batch_engine.hpp). Every
/// request is tried and gets its own result. The requests of a write may not share bytes (read
/// requests may). O_DIRECT: a request that does not continue the one before it in the file starts
/// aligned; buffers and lengths may be anything. The whole contract: docs/GUARANTEES.md, section
/// 5c.

#include <cstddef>
#include <system_error>
#include <vector>

#include "nvmeio/aio_context.hpp"
#include "nvmeio/detail/batch_engine.hpp"
#include "nvmeio/detail/front_end.hpp"
#include "nvmeio/error.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/parallel_context.hpp"
#include "nvmeio/transfer.hpp"
#include "nvmeio/version.hpp"

NVMEIO_BEGIN_NAMESPACE

namespace detail {

template <class Backend>
batch_outcome checked_batch(basic_aio_context<Backend>& context, const file& f, operation op,
                            const std::vector<batch_request>& requests,
                            const batch_options& options) {
    check_batch(f, op, requests, options);
    return run_batch(context, f, op, requests, options);
}

template <class Backend>
batch_outcome checked_batch(basic_parallel_context<Backend>& context, const file& f, operation op,
                            const std::vector<batch_request>& requests,
                            const batch_options& options) {
    check_batch(f, op, requests, options);
    return spread_batch(context, f, op, requests, options);
}

// The failure of the first failed request in the caller's order, or none.
inline const io_failure& first_failure(const batch_outcome& outcome) {
    static const io_failure none;
    const std::size_t index = outcome.first_failure();
    return index != outcome.results.size() ? outcome.results[index].failure : none;
}

}  // namespace detail

/// True when O_DIRECT at `alignment` (a file's `alignment().offset`) takes every request's
/// offset: each starts at a multiple of it or continues the request before it in file order.
/// A caller that may open its file either way asks this first; a direct batch that fails it is
/// an std::invalid_argument.
[[nodiscard]] inline bool offsets_fit_direct(const std::vector<batch_request>& requests,
                                             std::size_t alignment) {
    return detail::first_unaligned_start(requests, detail::file_order(requests), alignment) ==
           static_cast<std::size_t>(-1);
}

/// Moves every request of the batch through an aio context or over the threads of a parallel
/// context (each thread takes a run of consecutive I/Os of about equal bytes and has its own
/// staging slots); then throws io_error for the first failed request (in the caller's order).
/// Throws std::invalid_argument for a request that breaks a rule above, before any I/O.
template <class Context>
[[nodiscard]] batch_outcome transfer_batch(Context& context, const file& f, operation op,
                                           const std::vector<batch_request>& requests,
                                           const batch_options& options = {}) {
    batch_outcome outcome = detail::checked_batch(context, f, op, requests, options);
    detail::throw_if(detail::first_failure(outcome));
    return outcome;
}

/// As above; sets `ec` to the first failed request's code instead of throwing, and the outcome
/// records what happened to every request. A broken rule is still std::invalid_argument.
template <class Context>
[[nodiscard]] batch_outcome transfer_batch(Context& context, const file& f, operation op,
                                           const std::vector<batch_request>& requests,
                                           const batch_options& options, std::error_code& ec) {
    batch_outcome outcome = detail::checked_batch(context, f, op, requests, options);
    ec = detail::first_failure(outcome).code;
    return outcome;
}

/// Reads every request of the batch; throws io_error for the first failed request.
template <class Context>
[[nodiscard]] batch_outcome read_batch(Context& context, const file& f,
                                       const std::vector<batch_request>& requests,
                                       const batch_options& options = {}) {
    return transfer_batch(context, f, operation::read, requests, options);
}

/// Reads every request of the batch; reports the first failure through `ec`.
template <class Context>
[[nodiscard]] batch_outcome read_batch(Context& context, const file& f,
                                       const std::vector<batch_request>& requests,
                                       const batch_options& options, std::error_code& ec) {
    return transfer_batch(context, f, operation::read, requests, options, ec);
}

/// Writes every request of the batch; throws io_error for the first failed request.
template <class Context>
batch_outcome write_batch(Context& context, const file& f,
                          const std::vector<batch_request>& requests,
                          const batch_options& options = {}) {
    return transfer_batch(context, f, operation::write, requests, options);
}

/// Writes every request of the batch; reports the first failure through `ec`.
template <class Context>
batch_outcome write_batch(Context& context, const file& f,
                          const std::vector<batch_request>& requests, const batch_options& options,
                          std::error_code& ec) {
    return transfer_batch(context, f, operation::write, requests, options, ec);
}

NVMEIO_END_NAMESPACE

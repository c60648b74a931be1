#pragma once
/// \file batch.hpp
/// Batched (vectored) transfers: many `(buffer, length, offset)` requests on one file, e.g. every
/// tensor of a model or every block of a KV cache, moved as one batch.
///
/// Requests are sorted by file offset and runs of adjacent ones form groups of at most
/// `batch_options::max_io_size` bytes. A group goes
///  - straight between the caller's memory and the file when its buffers are adjacent in memory
///    too (tensors in one flat arena): one large I/O, no copy;
///  - member by member, still without a copy, when every buffer and offset is aligned and the
///    members average at least `min_direct_size` bytes;
///  - otherwise through an aligned bounce arena (one memcpy per request): one large I/O, and the
///    caller's buffers need no alignment.
/// A group, or a member, whose end is not O_DIRECT-aligned moves its aligned part as above and
/// its last partial unit through the bounce arena as one whole unit (a write first reads that
/// unit from the file and merges it, and the file is cut back to its right size afterwards), so
/// small and ragged requests cost one queued I/O each, never a synchronous call.
/// Every I/O of the batch, of every group, shares one queue, which stays full across group
/// boundaries, on the engine every transfer runs on (detail/engine.hpp; the coalescing is
/// detail/batch_engine.hpp). Each request gets its own result.
///
/// Errors: every request is tried; then the throwing forms throw io_error for the first failed
/// request in the caller's order, and the `std::error_code&` forms set `ec` to its code and
/// return the outcome, whose records say what happened to each request.
///
/// O_DIRECT rules: a request that does not continue the previous one in the file (in offset
/// order) must start at a multiple of `file.alignment().offset` (std::invalid_argument otherwise,
/// naming the request). Lengths may be anything. Requests may come in any order; overlapping
/// write requests leave the overlap with unspecified bytes.

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

namespace nvmeio {
inline namespace v0 {

namespace detail {

// A checked batch on one aio context.
template <class Backend>
batch_outcome checked_batch(basic_aio_context<Backend>& context, const file& f, operation op,
                            const std::vector<batch_request>& requests,
                            const batch_options& options) {
    check_batch(f, op, requests, options);
    return run_batch(context, f, op, requests, options);
}

// A checked batch over the threads of a parallel context.
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

/// Moves every request of the batch through an aio context or over the threads of a parallel
/// context (each thread takes a run of consecutive I/Os of about equal bytes and has its own
/// bounce arena); then throws io_error for the first failed request (in the caller's order).
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
/// records what happened to every request.
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

}  // namespace v0
}  // namespace nvmeio

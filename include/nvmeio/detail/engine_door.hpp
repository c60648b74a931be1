#pragma once
/// \file detail/engine_door.hpp
/// How a front end's shared machinery (detail/front_end.hpp, detail/batch_engine.hpp) reaches the
/// engine: through a context, which hands over its backend, settings and working memory.

#include <cstddef>

#include "nvmeio/detail/engine.hpp"
#include "nvmeio/detail/segment.hpp"
#include "nvmeio/file.hpp"
#include "nvmeio/transfer.hpp"

namespace nvmeio::detail {

// How a front end reaches the engine: a context (basic_aio_context, which befriends this) hands
// over its backend, options and working memory for one transfer, after checking that it runs in
// the process that created it and on no other thread at the same time.
struct engine_door {
    template <class Context>
    static void move(Context& context, file& f, operation op, segment* segments, std::size_t count,
                     engine_settings settings) {
        if (count == 0) return;
        context.creator_.require_current("aio_context");
        const auto busy = context.in_use_.acquire("aio_context");
        engine<typename Context::backend_type>(context.backend_, context.options_, context.scratch_,
                                               f, op, segments, count, settings)
            .run();
    }
};

/// Moves `segments` of `f` through `context`; afterwards each has its `bytes` and `failure`.
/// Throws std::logic_error for a context used by two threads at once or after fork.
template <class Context>
void move_segments(Context& context, file& f, operation op, segment* segments, std::size_t count,
                   engine_settings settings) {
    engine_door::move(context, f, op, segments, count, settings);
}

}  // namespace nvmeio::detail

#pragma once
/// \file detail/engine_door.hpp
/// How a front end's shared machinery (detail/front_end.hpp, detail/batch_engine.hpp) reaches the
/// engine: through a context, which hands over its backend, settings and working memory.

#include <cstddef>
#include <stdexcept>
#include <utility>

#include "nvmeio/aligned_allocator.hpp"
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

    // The context's bounce arena, lent to one batch at a time (detail/batch_engine.hpp) so that
    // it is allocated, and pinned, once per context rather than once per batch.
    template <class Context>
    class arena_loan {
      public:
        arena_loan(Context& context, std::size_t keep_up_to)
            : context_(context), keep_(keep_up_to) {
            context.creator_.require_current("aio_context");
            const auto busy = context.in_use_.acquire("aio_context");
            arena = std::exchange(context.scratch_.arena, {});
        }
        arena_loan(const arena_loan&) = delete;
        arena_loan& operator=(const arena_loan&) = delete;
        // Hands the arena back, unless it grew past `keep_up_to` or the context is busy (misuse
        // that the next transfer reports).
        ~arena_loan() {
            if (arena.capacity() > keep_) return;
            try {
                const auto busy = context_.in_use_.acquire("aio_context");
                context_.scratch_.arena = std::move(arena);
            } catch (const std::logic_error&) {
            }
        }

        aligned_buffer arena;

      private:
        Context& context_;
        std::size_t keep_;
    };
};

/// Moves `segments` of `f` through `context`; afterwards each has its `bytes` and `failure`.
/// Throws std::logic_error for a context used by two threads at once or after fork.
template <class Context>
void move_segments(Context& context, file& f, operation op, segment* segments, std::size_t count,
                   engine_settings settings) {
    engine_door::move(context, f, op, segments, count, settings);
}

}  // namespace nvmeio::detail

#pragma once
/// \file handle.hpp
/// nvmeio_torch's `aio_handle`: DeepSpeed's handle contract (submit, then `wait()` for all) over
/// nvmeio's public API. Pure C++ over libtorch tensors; module.cpp converts Python arguments,
/// releases the GIL around every call that can block and maps exceptions.
///
/// How a request moves: the file is opened when the request is submitted (a missing file is an
/// error at once, and a caller's descriptor may be closed as soon as submit returns); the
/// handle's one dispatcher thread then runs the requests in submission order, each through a
/// `basic_parallel_context` (DeepSpeed's intra-op parallelism: the one splitter of nvmeio, any
/// size, no divisibility rule). What O_DIRECT cannot take goes where nvmeio can take it:
///  - an offset, or a block size, off the file's O_DIRECT alignment: the file is opened uncached
///    (RWF_DONTCACHE, Linux 6.14+), or buffered where the kernel has no uncached mode;
///  - a buffer address off the alignment (torch's own allocations are 64-byte aligned): the
///    batch front end, which stages the bytes through a few aligned slots on the same workers;
///  - everything else straight between the tensor and the file.
///
/// Lifetimes: a pending request holds its tensors and their storages (storage_hold.hpp); only
/// the thread that calls `wait` or destroys the handle lets go of them (module.cpp does that
/// with the GIL held), never the dispatcher.
///
/// fork: the dispatcher and the workers exist only in the creating process. In a child every
/// call throws std::logic_error, and destroying the handle there abandons its state (nothing
/// that the parent's threads may hold is touched).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nvmeio/batch.hpp>
#include <nvmeio/error.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/memory.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/verify.hpp>
#if NVMEIO_HAS_IO_URING
#include <nvmeio/backend/io_uring.hpp>
#endif

#include <torch/types.h>

#include "file_source.hpp"
#include "pinned.hpp"
#include "storage_hold.hpp"

namespace nvmeio_torch {

/// What DeepSpeed's constructor takes, plus the backend.
struct handle_settings {
    std::size_t block_size = std::size_t{1} << 20;
    unsigned queue_depth = 128;
    bool single_submit = false;
    bool overlap_events = false;
    unsigned intra_op_parallelism = 1;
    std::string backend = "libaio";  ///< "libaio" or "io_uring".
};

/// One request: the bytes of one tensor, or of a batch of tensors, and their file ranges, opened
/// at submit. A batch (`batch` set) is one request to `wait()`, as DeepSpeed counts one tensor.
struct request {
    nvmeio::operation op = nvmeio::operation::read;
    std::vector<torch::Tensor> tensors;  // kept alive while pending; released by the waiting thread
    storage_hold storages;               // their storages, alive and not resizable while pending
    std::vector<nvmeio::batch_request> pieces;  // one per tensor: its bytes and file offset
    bool batch = false;
    nvmeio::file file;
    bool validate = false;
    // Filled by the dispatcher.
    std::exception_ptr error;
};

using request_list = std::vector<std::unique_ptr<request>>;

namespace detail {

// The parallel context of one backend behind a virtual call, so that the backend is a run-time
// keyword of the Python constructor.
class mover {
  public:
    virtual ~mover() = default;
    virtual nvmeio::batch_outcome move(request& r, const nvmeio::transfer_config& config) = 0;
};

template <class Backend>
class mover_on final : public mover {
  public:
    explicit mover_on(const nvmeio::parallel_options& options) : context_(options) {}

    // What happened to each piece: bytes moved (less than its length only for a read meeting
    // the end of the file) or its failure. One aligned tensor goes straight through `transfer`
    // (the throwing form: its io_error is the request's); anything else through the batch front
    // end, which coalesces, bounces what O_DIRECT cannot take and keeps one queue full.
    nvmeio::batch_outcome move(request& r, const nvmeio::transfer_config& config) override {
        if (!r.batch) {
            const nvmeio::batch_request& p = r.pieces.front();
            if (!r.file.is_direct() ||
                nvmeio::is_aligned(p.memory.data(), r.file.alignment().memory)) {
                nvmeio::batch_outcome outcome;
                outcome.results.push_back(
                    {nvmeio::transfer(context_, r.file, r.op, p.memory, p.offset, config).bytes,
                     {}});
                return outcome;
            }
        }
        nvmeio::batch_options options;
        options.config = config;
        std::error_code ec;  // each piece's failure is in the outcome
        return nvmeio::transfer_batch(context_, r.file, r.op, r.pieces, options, ec);
    }

  private:
    nvmeio::basic_parallel_context<Backend> context_;
};

inline std::unique_ptr<mover> make_mover(const handle_settings& s) {
    nvmeio::parallel_options options;
    options.threads = s.intra_op_parallelism;
    options.context.queue_depth = s.queue_depth;
    options.context.block_size = s.block_size;
    if (s.backend == "libaio") return std::make_unique<mover_on<nvmeio::libaio_backend>>(options);
#if NVMEIO_HAS_IO_URING
    if (s.backend == "io_uring") {
        return std::make_unique<mover_on<nvmeio::io_uring_backend>>(options);
    }
#endif
    throw_invalid("backend must be 'libaio'" +
                  std::string(NVMEIO_HAS_IO_URING ? " or 'io_uring'" : "") + " (got '" + s.backend +
                  "')");
}

}  // namespace detail

/// Opens `source` for `op` as the request's pieces and `block_size` blocks need it: O_DIRECT
/// where the filesystem and the alignment allow, uncached (else buffered) otherwise. Writes
/// never truncate. A descriptor is reopened through /proc/self/fd, never by its name
/// (file_source.hpp), so that a write cannot land in a file renamed over its old name.
inline nvmeio::file open_for(const file_source& source, nvmeio::operation op,
                             const std::vector<nvmeio::batch_request>& pieces,
                             std::size_t block_size) {
    const nvmeio::open_mode mode =
        op == nvmeio::operation::read ? nvmeio::open_mode::read : nvmeio::open_mode::read_write;
    nvmeio::file f = open_source(source, mode, nvmeio::direct_io::automatic);
    const nvmeio::dio_alignment& a = f.alignment();
    if (f.is_direct() && (!nvmeio::offsets_fit_direct(pieces, a.offset) ||
                          !nvmeio::is_aligned(block_size, a.strictest()))) {
        // Uncached where the kernel has it (the tensor's bytes do not stay in the page cache,
        // as they would not with O_DIRECT), else buffered.
        std::error_code refused;
        f = open_source(source, mode, nvmeio::direct_io::uncached, refused);
        if (refused) f = open_source(source, mode, nvmeio::direct_io::off);
    }
    return f;
}

/// DeepSpeed's aio_handle. Thread-safety: any method from any thread; calls that submit and
/// wait (the synchronous ones, `wait`) are serialised, as in DeepSpeed, so that each returns the
/// count of what it waited for.
class aio_handle {
  public:
    explicit aio_handle(handle_settings settings)
        : settings_(checked(std::move(settings))), state_(std::make_unique<state>(settings_)) {
        state_->dispatcher = std::thread([s = state_.get()] { s->dispatch(); });
    }

    aio_handle(const aio_handle&) = delete;
    aio_handle& operator=(const aio_handle&) = delete;

    /// Lets the dispatcher finish every pending request and stops it. The requests (and their
    /// tensors) go to `released`, for the caller to let go of where it may.
    void close(request_list& released) noexcept {
        if (!state_) return;
        if (state_->creator != ::getpid()) {  // the parent's: see the file comment
            (void)state_.release();
            return;
        }
        {
            std::unique_lock<std::mutex> lock(state_->mutex);
            state_->stopping = true;
            state_->work.notify_all();
        }
        state_->dispatcher.join();
        released = std::move(state_->submitted);
        state_.reset();
    }

    ~aio_handle() {
        request_list released;
        close(released);
    }

    [[nodiscard]] const handle_settings& settings() const noexcept { return settings_; }

    /// Queues `r`; returns at once. The request's file is already open.
    void submit(std::unique_ptr<request> r) {
        require_usable();
        std::lock_guard<std::mutex> lock(state_->mutex);
        state_->queue.push_back(r.get());
        state_->submitted.push_back(std::move(r));
        ++state_->unfinished;
        state_->work.notify_one();
    }

    /// Submits `r` and waits for it and everything before it, under the call lock: DeepSpeed's
    /// synchronous calls. Returns the count of requests completed.
    int run(std::unique_ptr<request> r, request_list& released) {
        require_usable();
        std::lock_guard<std::mutex> calls(call_mutex_);
        submit(std::move(r));
        return wait_locked(released);
    }

    /// Waits for every submitted request; returns how many there were (0 when none). Throws the
    /// first failure (in submission order) after all have finished; the handle stays usable.
    int wait(request_list& released) {
        require_usable();
        std::lock_guard<std::mutex> calls(call_mutex_);
        return wait_locked(released);
    }

    /// Throws std::logic_error when the handle is closed or was created in another process
    /// (after fork): callers check before opening a request's file, which may create it.
    void require_usable() const {
        if (!state_) throw std::logic_error("nvmeio_torch: the aio_handle is closed");
        if (state_->creator != ::getpid()) {
            throw std::logic_error(
                "nvmeio_torch: this aio_handle was created in process " +
                std::to_string(state_->creator) +
                "; a child after fork cannot use it (its "
                "threads exist only in the parent): create a new handle in the child");
        }
    }

  private:
    struct state {
        explicit state(const handle_settings& s)
            : mover(detail::make_mover(s)),
              config{s.overlap_events ? nvmeio::strategy_kind::overlapped
                                      : nvmeio::strategy_kind::sequential,
                     s.single_submit ? nvmeio::submit_mode::single : nvmeio::submit_mode::block,
                     false} {}

        void dispatch() {
            for (;;) {
                request* r = nullptr;
                {
                    std::unique_lock<std::mutex> lock(mutex);
                    work.wait(lock, [this] { return stopping || !queue.empty(); });
                    if (queue.empty()) return;  // stopping, and nothing left
                    r = queue.front();
                    queue.pop_front();
                }
                std::exception_ptr error;
                try {
                    run_one(*r);
                } catch (...) {
                    error = std::current_exception();
                }
                std::lock_guard<std::mutex> lock(mutex);
                r->error = error;
                if (--unfinished == 0) finished.notify_all();
            }
        }

        void run_one(request& r) {
            const nvmeio::batch_outcome outcome = mover->move(r, config);
            for (std::size_t i = 0; i < outcome.results.size(); ++i) {
                const nvmeio::batch_result& result = outcome.results[i];
                const nvmeio::batch_request& p = r.pieces[i];
                if (!result.failure && result.bytes == p.memory.size()) continue;
                nvmeio::io_failure failure = result.failure;
                if (!failure) {  // a read met the end of the file
                    std::error_code ec;
                    const std::uint64_t size = r.file.size(ec);
                    failure = {std::error_code(ENODATA, std::generic_category()),
                               "read (the file is " +
                                   (ec ? "shorter" : std::to_string(size) + " bytes long") + ")",
                               r.file.path(), p.offset, p.memory.size()};
                }
                if (r.batch) {  // name the request, and its own range rather than its I/O's
                    failure.operation = std::string(to_string(r.op)) + " of batch request " +
                                        std::to_string(i) + " of " +
                                        std::to_string(r.pieces.size()) + ": " + failure.operation;
                    failure.offset = p.offset;
                    failure.length = p.memory.size();
                }
                throw nvmeio::io_error(std::move(failure));
            }
            if (r.validate && !r.pieces.front().memory.empty()) validate(r);
        }

        static void validate(request& r) {
            const nvmeio::batch_request& p = r.pieces.front();
            const nvmeio::verify_result v = nvmeio::verify_read(r.file.path(), p.memory, p.offset);
            if (v.equal()) return;
            const std::string found =
                v.file_bytes < v.requested
                    ? "the file holds only " + std::to_string(v.file_bytes) + " of the bytes"
                    : std::to_string(v.mismatches.count) + " bytes differ, the first at byte " +
                          std::to_string(v.mismatches.first);
            throw nvmeio::io_error({std::error_code(EIO, std::generic_category()),
                                    "validate " + std::string(to_string(r.op)) + " (" + found + ")",
                                    r.file.path(), p.offset, p.memory.size()});
        }

        std::unique_ptr<detail::mover> mover;
        nvmeio::transfer_config config;
        const pid_t creator = ::getpid();
        std::mutex mutex;
        std::condition_variable work, finished;
        std::deque<request*> queue;  // submitted, not started
        request_list submitted;      // owned until a wait collects them
        std::size_t unfinished = 0;  // of `submitted`: a wait's condition, not a scan of them
        bool stopping = false;
        std::thread dispatcher;
    };

    int wait_locked(request_list& released) {
        std::unique_lock<std::mutex> lock(state_->mutex);
        state_->finished.wait(lock, [this] { return state_->unfinished == 0; });
        released = std::move(state_->submitted);
        state_->submitted.clear();
        lock.unlock();
        for (const auto& r : released)
            if (r->error) std::rethrow_exception(r->error);
        return static_cast<int>(released.size());
    }

    static handle_settings checked(handle_settings s) {
        if (s.intra_op_parallelism == 0) {
            throw_invalid("intra_op_parallelism must be at least 1 (got 0)");
        }
        return s;
    }

    handle_settings settings_;
    std::unique_ptr<state> state_;
    std::mutex call_mutex_;
};

}  // namespace nvmeio_torch

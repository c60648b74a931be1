#pragma once
/// \file run.hpp
/// One measured pass of an nvmeio configuration: P threads on the library's
/// basic_parallel_context<Backend>, O_DIRECT, the process's CPU time around it. Shared by
/// nvmeio-bench and nvmeio-tune.

#include <nvmeio/nvmeio.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"
#include "support/target.hpp"

namespace nvmeio::bench {

/// Bytes in a GiB, the unit of "CPU seconds per GiB".
inline constexpr double gib = 1073741824.0;

/// One configuration of the nvmeio engine.
struct run_config {
    operation op = operation::read;                      ///< Direction.
    std::string path;                                    ///< The file or block device.
    std::uint64_t size = 0;                              ///< Bytes moved per pass.
    std::size_t block_size = std::size_t{1} << 20;       ///< Bytes per request.
    unsigned queue_depth = 32;                           ///< Requests in flight per thread.
    strategy_kind strategy = strategy_kind::overlapped;  ///< Overlapped or sequential.
    submit_mode submit = submit_mode::block;             ///< Single or block submit.
    unsigned threads = 1;                                ///< P: threads of the parallel context.
    support::backend_kind backend = support::backend_kind::libaio;  ///< libaio or io_uring.
    /// Through a ring of threads x queue depth x block size bytes (fio's footprint) instead of
    /// the whole-range buffer.
    bool ring = false;
    /// context_options::spin: how long a wait polls before it sleeps.
    std::chrono::microseconds spin{0};
    /// context_options::pin_once: io_uring pins the buffer once instead of per request.
    bool pin_once = true;
    /// context_options::single_issuer: each io_uring ring set up for its one thread.
    bool single_issuer = true;
    /// How the file is opened: O_DIRECT (the default), buffered, uncached or automatic. A write
    /// pass that did not go O_DIRECT ends with fdatasync inside its time: its bytes are on the
    /// device when it ends, as an O_DIRECT pass's are.
    direct_io direct = direct_io::on;
};

/// What one measured pass did.
struct run_result {
    transfer_perf perf;      ///< The parallel context's record: latencies merged, e2e, bytes.
    double cpu_seconds = 0;  ///< User + system CPU of the whole process during the pass.
    /// CPU seconds spent per GiB moved.
    [[nodiscard]] double cpu_seconds_per_gib() const noexcept {
        return perf.bytes > 0 ? cpu_seconds / (static_cast<double>(perf.bytes) / gib) : 0;
    }
};

/// The buffer a tool moves: `fresh` leaves its pages untouched (the first pass pays for faulting
/// them in, as a program's first load does); otherwise every page is touched up front.
struct buffer_choice {
    bool fresh = false;       ///< Do not pre-touch.
    bool huge_pages = false;  ///< madvise(MADV_HUGEPAGE).
};

/// Makes sure `target` holds at least `size` bytes: a missing file is created with the generated
/// pattern through O_DIRECT and flushed (returns true); an existing file or device that is long
/// enough is used as it is (false). Shorter is a usage_error naming both sizes: the tools never
/// overwrite a file to grow it.
inline bool prepare_target(const support::target_info& target, std::uint64_t size) {
    if (target.exists) {
        if (target.size >= size) return false;
        throw support::usage_error(
            "--size", "'" + target.path + "' has " + std::to_string(target.size) +
                          " bytes, fewer than the " + std::to_string(size) +
                          " asked for; the tools create missing files only (remove it, or ask "
                          "for at most " +
                          std::to_string(target.size) + " bytes)");
    }
    file f(target.path, open_mode::write, direct_io::automatic);
    const std::size_t chunk = std::size_t{8} << 20;
    aligned_buffer buffer(chunk);
    aio_context context({16, std::size_t{1} << 20});
    for (std::uint64_t at = 0; at < size; at += chunk) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - at));
        support::fill_pattern(buffer.data(), n, at);
        (void)nvmeio::write(context, f, nvmeio::memory(buffer).first(n), at);
    }
    f.sync();
    return true;
}

/// Runs configurations against one buffer that holds the whole range, allocated when a pass or
/// a call first needs it (a --ring read never does: it keeps fio's footprint). Write passes
/// write the buffer's bytes back: call `load()` first so that those are the file's own bytes and
/// a write benchmark leaves the file (or device) as it found it.
class runner {
  public:
    /// A runner for passes of `size` bytes through a buffer allocated as `choice` says.
    runner(std::uint64_t size, buffer_choice choice) : size_(size), choice_(choice) {}

    /// The buffer: after a read pass, the bytes read.
    [[nodiscard]] std::byte* data() { return whole().data(); }
    /// Bytes per pass.
    [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

    /// Reads the first `size()` bytes of `path` into the buffer (not measured).
    void load(const std::string& path) {
        file f(path, open_mode::read, direct_io::automatic);
        aio_context context({16, std::size_t{1} << 20});
        aligned_buffer& buffer = whole();
        const transfer_result r = nvmeio::read(context, f, buffer, 0);
        if (r.bytes < size_) {
            throw std::runtime_error("'" + path + "' is shorter than " + std::to_string(size_) +
                                     " bytes");
        }
    }

    /// Writes the buffer (after `load()`, the file's own bytes) back over the first `size()`
    /// bytes of `path`, untimed: what every pass that wrote other bytes (fio's, a ring's) must
    /// leave behind.
    void write_back(const std::string& path) {
        file f(path, open_mode::read_write, direct_io::automatic);
        aio_context context({16, std::size_t{1} << 20});
        aligned_buffer& buffer = whole();
        (void)nvmeio::write(context, f, buffer, 0);
    }

    /// One timed pass of `config` (config.size is ignored: the pass moves `size()` bytes). The
    /// parallel context is created before the clock starts and kept for the next pass with the
    /// same backend, threads, depth and block size. Throws io_error / std::invalid_argument.
    run_result run(const run_config& config) {
        return support::with_backend(config.backend, [&](auto tag) {
            using backend = typename decltype(tag)::type;
            return run_on(contexts_.get<backend>(config), config);
        });
    }

  private:
    aligned_buffer& whole() {
        if (buffer_.size() == 0) {
            buffer_ = aligned_buffer(static_cast<std::size_t>(size_), 4096,
                                     buffer_options{!choice_.fresh, choice_.huge_pages, false});
        }
        return buffer_;
    }

    template <class Backend>
    run_result run_on(basic_parallel_context<Backend>& context, const run_config& config) {
        const open_mode mode =
            config.op == operation::read ? open_mode::read : open_mode::read_write;
        file f(config.path, mode, config.direct);
        const transfer_config transfer{config.strategy, config.submit, true};
        if (config.ring) return run_ring(context, f, config, transfer);
        aligned_buffer& buffer = whole();  // allocated (and touched, unless fresh) untimed
        const support::cpu_times before = support::process_cpu_times();
        transfer_result r = nvmeio::transfer(context, f, config.op, buffer, 0, transfer);
        if (config.op == operation::write && !f.is_direct()) {
            const auto flushing = std::chrono::steady_clock::now();
            f.sync();
            r.perf.elapsed_us += std::chrono::duration<double, std::micro>(
                                     std::chrono::steady_clock::now() - flushing)
                                     .count();
        }
        const support::cpu_times after = support::process_cpu_times();
        if (r.bytes != size_) {
            throw std::runtime_error("moved " + std::to_string(r.bytes) + " of " +
                                     std::to_string(size_) + " bytes of '" + config.path + "'");
        }
        return {r.perf, after.total() - before.total()};
    }

    // fio's footprint: the range as one batch of block-size requests whose memory cycles through
    // a ring of threads x depth x block size bytes. The batch is cut into groups of one ring
    // share (max_io_size), each contiguous in memory, so every group goes straight between the
    // ring and the file (never through the bounce arena) and the engine keeps the queue full
    // across groups, as fio does. Reads overwrite ring slots still being read: their bytes are
    // not kept, as fio's are not. The batch's planning is inside the timed part.
    template <class Backend>
    run_result run_ring(basic_parallel_context<Backend>& context, file& f, const run_config& config,
                        const transfer_config& transfer) {
        const std::size_t block = config.block_size;
        const std::size_t slots = std::size_t{config.threads} * config.queue_depth;
        if (ring_.size() != slots * block)
            ring_ = aligned_buffer(slots * block, 4096, buffer_options{true, false, false});
        requests_.clear();
        for (std::uint64_t at = 0, i = 0; at < size_; at += block, ++i) {
            const auto length =
                static_cast<std::size_t>(std::min<std::uint64_t>(block, size_ - at));
            requests_.push_back({nvmeio::memory(ring_).slice((i % slots) * block, length), at});
        }
        batch_options options;
        options.max_io_size = std::size_t{config.queue_depth} * block;
        options.config = transfer;
        const support::cpu_times before = support::process_cpu_times();
        const batch_outcome o = config.op == operation::read  // both throw the first failure
                                    ? read_batch(context, f, requests_, options)
                                    : write_batch(context, f, requests_, options);
        const support::cpu_times after = support::process_cpu_times();
        if (o.perf.bytes != size_ || o.bounced_bytes != 0) {
            throw std::runtime_error("the ring pass over '" + config.path + "' moved " +
                                     std::to_string(o.perf.bytes) + " of " + std::to_string(size_) +
                                     " bytes, " + std::to_string(o.bounced_bytes) +
                                     " of them bounced");
        }
        if (config.op == operation::write) write_back(config.path);
        return {o.perf, after.total() - before.total()};
    }

    // The last parallel context made, per backend, and what it was made for.
    struct context_cache {
        using key =
            std::tuple<unsigned, unsigned, std::size_t, std::chrono::microseconds, bool, bool>;
        std::optional<basic_parallel_context<libaio_backend>> libaio;
        key libaio_key{};
#if NVMEIO_HAS_IO_URING
        std::optional<basic_parallel_context<io_uring_backend>> io_uring;
        key io_uring_key{};
#endif
        template <class Backend>
        basic_parallel_context<Backend>& get(const run_config& c) {
            const key wanted{c.threads, c.queue_depth, c.block_size,
                             c.spin,    c.pin_once,    c.single_issuer};
            auto [slot, slot_key] = slot_of<Backend>();
            if (!slot->has_value() || *slot_key != wanted) {
                slot->reset();
                parallel_options options;
                options.threads = c.threads;
                options.context = {c.queue_depth, c.block_size, c.spin, c.pin_once,
                                   c.single_issuer};
                slot->emplace(options);
                *slot_key = wanted;
            }
            return **slot;
        }
        template <class Backend>
        auto slot_of() {
#if NVMEIO_HAS_IO_URING
            if constexpr (std::is_same_v<Backend, io_uring_backend>)
                return std::make_pair(&io_uring, &io_uring_key);
            else
#endif
                return std::make_pair(&libaio, &libaio_key);
        }
    };

    std::uint64_t size_;
    buffer_choice choice_;
    aligned_buffer buffer_;                // the whole range; see whole()
    aligned_buffer ring_;                  // --ring: threads x depth x block size bytes
    std::vector<batch_request> requests_;  // --ring: the pass's requests
    context_cache contexts_;
};

}  // namespace nvmeio::bench

#pragma once
/// \file bench_common.hpp
/// What nvmeio-bench and nvmeio-tune share: one measured run of a configuration with P threads,
/// the page-cache drop, test-file preparation, validation, reference readers (buffered, mmap),
/// size parsing and the machine description printed with every result.
///
/// Parallelism here is deliberately simple: P std::threads, each with its own file handle and
/// aio context, each moving one contiguous, block-aligned slice of the file. It gives the sweep
/// its parallelism axis until the library has a parallel layer of its own.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nvmeio/nvmeio.hpp"

namespace nvmeio::bench {

/// Bytes in a GiB, the unit of "CPU seconds per GiB".
inline constexpr double gib = 1073741824.0;

// ------------------------------------------------------------------------------------- sizes

/// Parses "4096", "128K", "8M", "1G" (binary multiples, optional trailing "i"/"iB"/"B").
/// Throws std::invalid_argument naming the text when it is not a size.
[[nodiscard]] inline std::uint64_t parse_size(const std::string& text) {
    std::size_t used = 0;
    unsigned long long number = 0;
    try {
        number = std::stoull(text, &used);
    } catch (const std::exception&) {
        throw std::invalid_argument("not a size: '" + text + "'");
    }
    std::string suffix = text.substr(used);
    for (const char* tail : {"iB", "B", "i"}) {
        const std::size_t n = std::strlen(tail);
        if (suffix.size() > n && suffix.compare(suffix.size() - n, n, tail) == 0) {
            suffix.resize(suffix.size() - n);
            break;
        }
    }
    unsigned shift = 0;
    if (suffix.empty()) {
        shift = 0;
    } else if (suffix == "K" || suffix == "k") {
        shift = 10;
    } else if (suffix == "M" || suffix == "m") {
        shift = 20;
    } else if (suffix == "G" || suffix == "g") {
        shift = 30;
    } else if (suffix == "T" || suffix == "t") {
        shift = 40;
    } else {
        throw std::invalid_argument("not a size: '" + text + "' (use e.g. 4096, 128K, 8M, 1G)");
    }
    if (shift != 0 && number > (~0ull >> shift)) {
        throw std::invalid_argument("size too large: '" + text + "'");
    }
    return static_cast<std::uint64_t>(number) << shift;
}

/// The shortest exact binary spelling of a size: 131072 -> "128K", 1048576 -> "1M".
[[nodiscard]] inline std::string format_size(std::uint64_t bytes) {
    const char* units[] = {"", "K", "M", "G", "T"};
    unsigned unit = 0;
    while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
        bytes /= 1024;
        ++unit;
    }
    return std::to_string(bytes) + units[unit];
}

// ------------------------------------------------------------------------------------ statistics

/// Median, extremes and relative spread of repeated measurements.
struct summary_stats {
    std::size_t count = 0;  ///< Number of values.
    double median = 0;      ///< Middle value (mean of the two middle ones for an even count).
    double min = 0;         ///< Smallest value.
    double max = 0;         ///< Largest value.
    /// (max - min) / median: how far apart the repeats landed, 0 for a single value.
    [[nodiscard]] double spread() const noexcept { return median > 0 ? (max - min) / median : 0; }
};

/// Summarises `values` (copied, then sorted).
[[nodiscard]] inline summary_stats summarize(std::vector<double> values) {
    summary_stats s;
    if (values.empty()) return s;
    std::sort(values.begin(), values.end());
    s.count = values.size();
    s.min = values.front();
    s.max = values.back();
    const std::size_t mid = values.size() / 2;
    s.median = values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
    return s;
}

// ------------------------------------------------------------------------------ machine, cache

/// First line of `path` (sysfs, procfs), or "".
[[nodiscard]] inline std::string read_first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\n'))
        line.pop_back();
    return line;
}

/// The CPU, memory, kernel and the block device under `path`, in one line for reports.
[[nodiscard]] inline std::string describe_machine(const std::string& path) {
    std::string cpu = "unknown CPU";
    {
        std::ifstream in("/proc/cpuinfo");
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("model name", 0) == 0) {
                cpu = line.substr(line.find(':') + 2);
                break;
            }
        }
    }
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    const double memory_gib = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                              static_cast<double>(::sysconf(_SC_PAGESIZE)) / gib;
    utsname name{};
    ::uname(&name);
    std::string device = "unknown device";
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        const std::string sys = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                                std::to_string(minor(st.st_dev));
        char target[512] = {};
        const ssize_t n = ::readlink(sys.c_str(), target, sizeof target - 1);
        if (n > 0) {
            std::string block = target;
            block = block.substr(block.rfind('/') + 1);
            device = block;
            const std::string queue = "/sys/block/" + block + "/queue/";
            const std::string rotational = read_first_line(queue + "rotational");
            const std::string scheduler = read_first_line(queue + "scheduler");
            const std::string model = read_first_line("/sys/block/" + block + "/device/model");
            if (!model.empty()) device += " (" + model + ")";
            if (!rotational.empty())
                device += rotational == "0" ? ", non-rotational" : ", rotating";
            if (!scheduler.empty()) device += ", scheduler " + scheduler;
        }
    }
    char text[1024];
    std::snprintf(text, sizeof text, "%s, %ld cores online, %.1f GiB RAM, Linux %s, device %s",
                  cpu.c_str(), cores, memory_gib, name.release, device.c_str());
    return text;
}

/// Writes dirty pages back and drops the clean page cache (`sync; echo 1 > drop_caches`).
/// Returns false and says why in `why` when it cannot (not root, read-only /proc).
[[nodiscard]] inline bool drop_page_cache(std::string& why) {
    ::sync();
    const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        why = std::string("cannot open /proc/sys/vm/drop_caches: ") + std::strerror(errno) +
              (::geteuid() != 0 ? " (dropping the page cache needs root)" : "");
        return false;
    }
    const bool ok = ::write(fd, "1", 1) == 1;
    const int error = errno;
    ::close(fd);
    if (!ok) {
        why = std::string("cannot write /proc/sys/vm/drop_caches: ") + std::strerror(error);
        return false;
    }
    why.clear();
    return true;
}

/// Flushes `path`'s data to the device (`fdatasync`) so that one write run's data does not drain
/// during the next. Cheaper than a global `sync` on a machine other programs keep busy.
inline void flush_file(const std::string& path) {
    file f(path, open_mode::read, direct_io::off);
    f.sync();
}

// ----------------------------------------------------------------------------------- the file

/// Deterministic content for a fresh benchmark file: every 8-byte word depends on its offset,
/// so a block landing at the wrong place shows up in validation.
inline void fill_pattern(std::byte* data, std::size_t length, std::uint64_t offset) {
    std::size_t i = 0;
    for (; i + 8 <= length; i += 8) {
        std::uint64_t x = (offset + i) * 0x9E3779B97F4A7C15ull;
        x ^= x >> 29;
        std::memcpy(data + i, &x, 8);
    }
    for (; i < length; ++i)
        data[i] = static_cast<std::byte>((offset + i) * 131u);
}

/// Makes sure `path` exists with at least `size` bytes: a missing file is written with the
/// pattern through O_DIRECT and flushed (returns true); an existing one is used as it is when it
/// is long enough (returns false). An existing shorter file is never overwritten: that is
/// std::invalid_argument naming both sizes.
inline bool prepare_file(const std::string& path, std::uint64_t size) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        const auto has = static_cast<std::uint64_t>(st.st_size);
        if (has >= size) return false;
        throw std::invalid_argument("'" + path + "' has " + std::to_string(has) +
                                    " bytes, fewer than the " + std::to_string(size) +
                                    " asked for; the tools create missing files only (remove it, "
                                    "or ask for at most " +
                                    std::to_string(has) + " bytes)");
    }
    file f(path, open_mode::write, direct_io::automatic);
    const std::size_t chunk = std::size_t{8} << 20;
    aligned_buffer buffer(chunk);
    aio_context context({16, std::size_t{1} << 20});
    for (std::uint64_t at = 0; at < size; at += chunk) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - at));
        fill_pattern(buffer.data(), n, at);
        nvmeio::write(context, f, buffer.data(), n, at);
    }
    f.sync();
    return true;
}

/// Compares `length` bytes of `data` with the file's bytes at `offset`, read through the page
/// cache with plain `pread` (a path independent of the one measured). Returns the file offset of
/// the first differing byte, or nothing when they agree. Throws io_error when the read fails.
[[nodiscard]] inline std::optional<std::uint64_t> first_mismatch(const std::string& path,
                                                                 const std::byte* data,
                                                                 std::size_t length,
                                                                 std::uint64_t offset) {
    file f(path, open_mode::read, direct_io::off);
    std::vector<std::byte> chunk(std::size_t{4} << 20);
    for (std::size_t done = 0; done < length;) {
        const std::size_t want = std::min(chunk.size(), length - done);
        const std::size_t got = f.read_at(chunk.data(), want, offset + done);
        if (got < want || std::memcmp(chunk.data(), data + done, got) != 0) {
            std::size_t i = 0;
            while (i < got && chunk[i] == data[done + i])
                ++i;
            return offset + done + i;
        }
        done += got;
    }
    return std::nullopt;
}

// ------------------------------------------------------------------------------ one nvmeio run

/// One configuration of the nvmeio engine.
struct run_config {
    operation op = operation::read;                      ///< Direction.
    std::string path;                                    ///< The file.
    std::uint64_t size = 0;                              ///< Bytes moved per pass.
    std::size_t block_size = std::size_t{1} << 20;       ///< Bytes per request.
    unsigned queue_depth = 32;                           ///< Requests in flight per thread.
    strategy_kind strategy = strategy_kind::overlapped;  ///< Overlapped or sequential.
    submit_mode submit = submit_mode::block;             ///< Single or block submit.
    unsigned threads = 1;                                ///< P: threads, each with a slice.
    std::string backend = "libaio";                      ///< Only "libaio" exists today.
};

/// The backends the tools know; the first is the default.
[[nodiscard]] inline const std::vector<std::string>& known_backends() {
    static const std::vector<std::string> names{"libaio"};
    return names;
}

/// One thread's contiguous share of the file: [offset, offset + length).
struct slice {
    std::uint64_t offset = 0;  ///< Where it starts (a multiple of the block size).
    std::size_t length = 0;    ///< How long it is (0 for threads left without work).
};

/// Splits `size` bytes into `threads` contiguous slices whose starts are multiples of
/// `block_size`; the last non-empty slice takes the remainder.
[[nodiscard]] inline std::vector<slice> split(std::uint64_t size, unsigned threads,
                                              std::size_t block_size) {
    std::vector<slice> slices(threads);
    const std::uint64_t per = align_up((size + threads - 1) / threads, block_size);
    std::uint64_t at = 0;
    for (unsigned i = 0; i < threads && at < size; ++i) {
        slices[i].offset = at;
        slices[i].length = static_cast<std::size_t>(std::min<std::uint64_t>(per, size - at));
        at += slices[i].length;
    }
    return slices;
}

/// What one measured pass did, all threads together.
struct run_result {
    transfer_perf perf;      ///< Latencies merged over threads (see merge_latency), e2e, bytes.
    double cpu_seconds = 0;  ///< User + system CPU of the whole process during the pass.
    /// CPU seconds spent per GiB moved.
    [[nodiscard]] double cpu_seconds_per_gib() const noexcept {
        return perf.bytes > 0 ? cpu_seconds / (static_cast<double>(perf.bytes) / gib) : 0;
    }
};

/// Merges per-thread latency summaries: count summed, min of minima, max of maxima, mean
/// weighted by count; p50 and p99 are the worst thread's (the samples themselves are gone).
[[nodiscard]] inline latency_stats merge_latency(const std::vector<latency_stats>& parts) {
    latency_stats out;
    double weighted = 0;
    for (const latency_stats& s : parts) {
        if (s.count == 0) continue;
        out.min_us = out.count == 0 ? s.min_us : std::min(out.min_us, s.min_us);
        out.max_us = std::max(out.max_us, s.max_us);
        out.p50_us = std::max(out.p50_us, s.p50_us);
        out.p99_us = std::max(out.p99_us, s.p99_us);
        out.count += s.count;
        weighted += s.avg_us * static_cast<double>(s.count);
    }
    if (out.count > 0) out.avg_us = weighted / static_cast<double>(out.count);
    return out;
}

/// User + system CPU seconds this process (all its threads) has used so far.
[[nodiscard]] inline double process_cpu_seconds() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

/// Runs configurations against one buffer that holds the whole file, so that no pass pays for
/// allocation or page faults. Write passes write the buffer's bytes back: call `load()` first so
/// that those are the file's own bytes and a write benchmark leaves the file as it found it.
class runner {
  public:
    /// Allocates (and touches) a buffer of `size` bytes; `huge_pages` asks for transparent huge
    /// pages (off by default, like fio's default buffers).
    explicit runner(std::uint64_t size, bool huge_pages = false)
        : size_(size),
          buffer_(static_cast<std::size_t>(size), 4096, buffer_options{true, huge_pages, false}) {}

    /// The buffer: after a read pass, the bytes read.
    [[nodiscard]] std::byte* data() noexcept { return buffer_.data(); }
    /// Bytes per pass.
    [[nodiscard]] std::uint64_t size() const noexcept { return size_; }

    /// Reads the file's first `size()` bytes into the buffer (not measured).
    void load(const std::string& path) {
        file f(path, open_mode::read, direct_io::automatic);
        aio_context context({16, std::size_t{1} << 20});
        const transfer_result r = nvmeio::read(context, f, buffer_.data(), size_, 0);
        if (r.bytes < size_) {
            throw std::runtime_error("'" + path + "' is shorter than " + std::to_string(size_) +
                                     " bytes");
        }
    }

    /// One timed pass of `config` (config.size is ignored: the pass moves `size()` bytes).
    /// Files and contexts are set up before the clock starts; the clock runs from releasing the
    /// threads to the last one finishing. Throws io_error / std::invalid_argument.
    run_result run(const run_config& config) {
        if (std::find(known_backends().begin(), known_backends().end(), config.backend) ==
            known_backends().end()) {
            throw std::invalid_argument("unknown backend '" + config.backend +
                                        "' (this build knows: libaio)");
        }
        if (config.threads == 0) throw std::invalid_argument("threads must be at least 1");
        const std::vector<slice> slices = split(size_, config.threads, config.block_size);
        struct worker {
            file f;
            std::optional<aio_context> context;
            transfer_perf perf;
            io_failure failure;
            std::string problem;
        };
        std::vector<worker> workers(config.threads);
        const open_mode mode =
            config.op == operation::read ? open_mode::read : open_mode::read_write;
        for (unsigned i = 0; i < config.threads; ++i) {
            if (slices[i].length == 0) continue;
            workers[i].f = file(config.path, mode, direct_io::on);
            workers[i].context.emplace(context_options{config.queue_depth, config.block_size});
        }
        const transfer_config transfer{config.strategy, config.submit, true};

        std::mutex mutex;
        std::condition_variable go;
        bool released = false;
        std::vector<std::thread> threads;
        threads.reserve(config.threads);
        for (unsigned i = 0; i < config.threads; ++i) {
            if (slices[i].length == 0) continue;
            threads.emplace_back([&, i] {
                {
                    std::unique_lock<std::mutex> lock(mutex);
                    go.wait(lock, [&] { return released; });
                }
                worker& w = workers[i];
                try {
                    const transfer_result r =
                        nvmeio::transfer(*w.context, w.f, config.op, data() + slices[i].offset,
                                         slices[i].length, slices[i].offset, transfer, w.failure);
                    w.perf = r.perf;
                } catch (const std::exception& e) {
                    w.problem = e.what();
                }
            });
        }
        const double cpu_before = process_cpu_seconds();
        const auto start = std::chrono::steady_clock::now();
        {
            std::lock_guard<std::mutex> lock(mutex);
            released = true;
        }
        go.notify_all();
        for (std::thread& t : threads)
            t.join();
        const auto stop = std::chrono::steady_clock::now();
        const double cpu_after = process_cpu_seconds();

        run_result result;
        std::vector<latency_stats> submits, completions;
        for (worker& w : workers) {
            if (!w.problem.empty()) throw std::invalid_argument(w.problem);
            detail::throw_if(w.failure);
            submits.push_back(w.perf.submit);
            completions.push_back(w.perf.completion);
            result.perf.bytes += w.perf.bytes;
            result.perf.requests += w.perf.requests;
            result.perf.resubmissions += w.perf.resubmissions;
        }
        if (result.perf.bytes != size_) {
            throw std::runtime_error("moved " + std::to_string(result.perf.bytes) + " of " +
                                     std::to_string(size_) + " bytes of '" + config.path + "'");
        }
        result.perf.submit = merge_latency(submits);
        result.perf.completion = merge_latency(completions);
        result.perf.elapsed_us = std::chrono::duration<double, std::micro>(stop - start).count();
        result.cpu_seconds = cpu_after - cpu_before;
        return result;
    }

  private:
    std::uint64_t size_;
    aligned_buffer buffer_;
};

// ---------------------------------------------------------------------------- reference readers

/// Reads the first `size` bytes of `path` with buffered `pread` in `chunk`-byte calls into
/// `buffer`, one thread: what a program gets without O_DIRECT. Cold only after a cache drop.
inline run_result buffered_read(const std::string& path, std::byte* buffer, std::uint64_t size,
                                std::size_t chunk = std::size_t{1} << 20) {
    file f(path, open_mode::read, direct_io::off);
    run_result result;
    const double cpu_before = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t at = 0; at < size;) {
        const std::size_t want =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - at));
        const std::size_t got = f.read_at(buffer + at, want, at);
        if (got == 0) break;
        at += got;
        result.perf.bytes += got;
    }
    const auto stop = std::chrono::steady_clock::now();
    result.cpu_seconds = process_cpu_seconds() - cpu_before;
    result.perf.elapsed_us = std::chrono::duration<double, std::micro>(stop - start).count();
    return result;
}

/// Maps `path` and copies its first `size` bytes into `buffer` (madvise SEQUENTIAL), one
/// thread: what a program gets by reading a mapped file. Cold only after a cache drop.
inline run_result mmap_read(const std::string& path, std::byte* buffer, std::uint64_t size) {
    file f(path, open_mode::read, direct_io::off);
    run_result result;
    const double cpu_before = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    void* map = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED,
                       f.native_handle(), 0);
    if (map == MAP_FAILED) {
        throw io_error({detail::errno_code(errno), "mmap", path, 0, size});
    }
    (void)::madvise(map, static_cast<std::size_t>(size), MADV_SEQUENTIAL);
    std::memcpy(buffer, map, static_cast<std::size_t>(size));
    ::munmap(map, static_cast<std::size_t>(size));
    const auto stop = std::chrono::steady_clock::now();
    result.cpu_seconds = process_cpu_seconds() - cpu_before;
    result.perf.bytes = size;
    result.perf.elapsed_us = std::chrono::duration<double, std::micro>(stop - start).count();
    return result;
}

}  // namespace nvmeio::bench

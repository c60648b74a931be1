#pragma once
/// \file fio.hpp
/// Runs fio on the same file with the same block size, queue depth, threads, backend (libaio or
/// io_uring) and O_DIRECT as an nvmeio configuration, and reads its JSON output.

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run.hpp"

namespace nvmeio::bench {

/// Where `name` is found on $PATH, or "".
[[nodiscard]] inline std::string find_program(const std::string& name) {
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        std::size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        std::string candidate = dirs.substr(start, end - start);
        if (candidate.empty()) candidate = ".";
        candidate += "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        start = end + 1;
    }
    return {};
}

/// What a child process printed and how it ended.
struct command_result {
    int status = -1;         ///< Exit status (-1 when it did not exit normally).
    std::string output;      ///< Its standard output.
    double cpu_seconds = 0;  ///< User + system CPU of the whole process, all its threads.
};

/// Runs `argv` (argv[0] a path) with stdout captured and stderr passed through.
///
/// posix_spawn, not fork: a fork would copy the page tables of the tool's large, pinned-for-I/O
/// buffer and leave every page copy-on-write, so the next nvmeio run would pay a page fault per
/// 4 KiB page inside its timed part.
[[nodiscard]] inline command_result run_command(const std::vector<std::string>& argv) {
    command_result result;
    int pipe_ends[2];
    if (::pipe2(pipe_ends, O_CLOEXEC) != 0) return result;
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t child = -1;
    const int spawned = ::posix_spawn(&child, args[0], &actions, nullptr, args.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_ends[1]);
    if (spawned != 0) {
        ::close(pipe_ends[0]);
        return result;
    }
    char chunk[65536];
    ssize_t got;
    while ((got = ::read(pipe_ends[0], chunk, sizeof chunk)) != 0) {
        if (got < 0) {
            if (errno == EINTR) continue;
            break;
        }
        result.output.append(chunk, static_cast<std::size_t>(got));
    }
    ::close(pipe_ends[0]);
    int status = 0;
    rusage usage{};
    while (::wait4(child, &status, 0, &usage) < 0 && errno == EINTR) {
    }
    result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

/// What fio measured for one configuration.
struct fio_result {
    bool ok = false;          ///< False when fio failed; `error` says why.
    std::string error;        ///< fio's failure, for the report.
    std::uint64_t bytes = 0;  ///< Bytes fio moved, all jobs.
    double elapsed_ms = 0;    ///< The slowest job's runtime (fio reports whole milliseconds).
    double cpu_seconds = 0;   ///< Sum over jobs of (usr + sys)% x job runtime: job threads only.
    /// fio's whole process (its threads, io_uring's io-wq workers among them) less a run of the
    /// same shape that moves one ring's bytes per job (start-up and exit): what the I/O cost
    /// the process, as nvmeio's figure is. fio's own figure leaves out the io-wq workers, which
    /// do the work of every request io_uring cannot issue without blocking. Negative (unknown)
    /// when a ring holds more than a quarter of the bytes: start-up then fills about as much
    /// memory as the run moves, and the difference of two such runs is noise.
    double process_cpu_seconds = -1;
    /// GB/s (10^9 bytes), all jobs together.
    [[nodiscard]] double gb_per_s() const noexcept {
        return elapsed_ms > 0 ? static_cast<double>(bytes) / elapsed_ms / 1e6 : 0;
    }
    /// CPU seconds per GiB moved.
    [[nodiscard]] double cpu_seconds_per_gib() const noexcept {
        return bytes > 0 ? cpu_seconds / (static_cast<double>(bytes) / gib) : 0;
    }
};

/// fio's --ioengine for a backend.
[[nodiscard]] inline const char* fio_engine(support::backend_kind backend) noexcept {
    return backend == support::backend_kind::io_uring ? "io_uring" : "libaio";
}

/// How fio is set up: as it comes (its defaults), or at its best for the engine. For io_uring
/// the best is `--fixedbufs --registerfiles` (its buffers and file registered with the ring, so
/// the kernel pins the pages once and skips the descriptor lookup); libaio has no such setup, so
/// there the two are the same.
enum class fio_setup {
    plain,  ///< fio's defaults for the engine.
    best,   ///< io_uring: --fixedbufs --registerfiles.
};

/// The method name a tune run of fio carries in reports: "fio" or "fio-best".
[[nodiscard]] inline const char* fio_method(fio_setup setup) noexcept {
    return setup == fio_setup::best ? "fio-best" : "fio";
}

/// The fio command line equivalent to `config` moving `size` bytes: the same engine, O_DIRECT,
/// one job per thread, job i on [i * size / P, (i + 1) * size / P), which is how the parallel
/// context splits a size that is a multiple of P block sizes. Other sizes are
/// std::invalid_argument: fio gives every job the same size and could not move the same bytes.
[[nodiscard]] inline std::vector<std::string> fio_command(const std::string& fio,
                                                          const run_config& config,
                                                          std::uint64_t size,
                                                          fio_setup setup = fio_setup::plain) {
    const std::uint64_t split = std::uint64_t{config.threads} * config.block_size;
    if (config.threads == 0 || config.block_size == 0 || size % split != 0) {
        throw std::invalid_argument("fio comparison: " + std::to_string(size) +
                                    " bytes are not a multiple of " +
                                    std::to_string(config.threads) + " threads x " +
                                    std::to_string(config.block_size) + "-byte blocks");
    }
    const std::uint64_t per = size / config.threads;
    std::vector<std::string> command{
        fio,
        "--name=nvmeio-vs-fio",
        "--filename=" + config.path,
        std::string("--rw=") + (config.op == operation::read ? "read" : "write"),
        "--bs=" + std::to_string(config.block_size),
        "--iodepth=" + std::to_string(config.queue_depth),
        "--size=" + std::to_string(per),
        "--numjobs=" + std::to_string(config.threads),
        "--offset_increment=" + std::to_string(per),
        "--direct=1",
        std::string("--ioengine=") + fio_engine(config.backend),
        "--thread",
        "--invalidate=0",
        "--output-format=json"};
    if (setup == fio_setup::best && config.backend == support::backend_kind::io_uring) {
        command.emplace_back("--fixedbufs");
        command.emplace_back("--registerfiles");
    }
    return command;
}

/// Runs fio for `config` over the first `size` bytes of the file (rounded to whole per-job
/// slices) and parses its JSON.
[[nodiscard]] inline fio_result run_fio(const std::string& fio, const run_config& config,
                                        std::uint64_t size, fio_setup setup = fio_setup::plain) {
    fio_result result;
    const command_result ran = run_command(fio_command(fio, config, size, setup));
    if (ran.status != 0) {
        result.error = "fio exited with status " + std::to_string(ran.status);
        return result;
    }
    const std::uint64_t ring =
        std::uint64_t{config.threads} * config.queue_depth * config.block_size;
    if (ring <= size / 4) {
        const command_result start_and_exit = run_command(fio_command(fio, config, ring, setup));
        if (start_and_exit.status == 0) {  // else unknown
            result.process_cpu_seconds =
                std::max(0.0, ran.cpu_seconds - start_and_exit.cpu_seconds);
        }
    }
    try {
        // fio may print notes before its JSON.
        const std::size_t brace = ran.output.find('{');
        if (brace == std::string::npos) throw std::runtime_error("no JSON in fio's output");
        const nlohmann::json doc = nlohmann::json::parse(ran.output.substr(brace));
        const char* side = config.op == operation::read ? "read" : "write";
        for (const nlohmann::json& job : doc.at("jobs")) {
            const nlohmann::json& io = job.at(side);
            result.bytes += io.at("io_bytes").get<std::uint64_t>();
            const double runtime_ms = job.at("job_runtime").get<double>();
            result.elapsed_ms = std::max(result.elapsed_ms, io.at("runtime").get<double>());
            result.cpu_seconds +=
                (job.at("usr_cpu").get<double>() + job.at("sys_cpu").get<double>()) / 100.0 *
                runtime_ms / 1000.0;
            if (job.value("error", 0) != 0) {
                result.error = "fio job error " + std::to_string(job.value("error", 0));
                return result;
            }
        }
        result.ok = result.bytes > 0 && result.elapsed_ms > 0;
        if (!result.ok) result.error = "fio reported no I/O";
    } catch (const std::exception& e) {
        result.error = std::string("cannot parse fio's JSON: ") + e.what();
    }
    return result;
}

/// The message for a missing fio.
inline const char* fio_missing_message =
    "fio was not found on PATH. Install it (Debian/Ubuntu: apt-get install fio; Fedora/RHEL: "
    "dnf install fio; or build from https://github.com/axboe/fio) and run again, or leave out "
    "--vs-fio.";

}  // namespace nvmeio::bench

#pragma once
/// \file support/machine.hpp
/// What every measurement prints and needs around it: the machine it ran on, the page-cache
/// drop before a cold read, flushing a file between write runs, the process's CPU time and the
/// time of day.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <nvmeio/file.hpp>
#include <nvmeio/version.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

namespace nvmeio::support {

/// "0.1.0".
[[nodiscard]] inline std::string nvmeio_version() {
    return std::to_string(NVMEIO_VERSION_MAJOR) + "." + std::to_string(NVMEIO_VERSION_MINOR) + "." +
           std::to_string(NVMEIO_VERSION_PATCH);
}

/// First line of `path` (sysfs, procfs) without trailing blanks, or "".
[[nodiscard]] inline std::string read_first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\n'))
        line.pop_back();
    return line;
}

/// The CPU model from /proc/cpuinfo, or "unknown CPU".
[[nodiscard]] inline std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        const std::size_t colon = line.find(':');
        if (line.rfind("model name", 0) == 0 && colon != std::string::npos) {
            return line.substr(std::min(colon + 2, line.size()));
        }
    }
    return "unknown CPU";
}

/// The block device that holds `path` (or that `path` is), as "nvme0n1 (model), non-rotational,
/// scheduler [none]", or "unknown device".
[[nodiscard]] inline std::string describe_device(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return "unknown device";
    const dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
    const std::string sys =
        "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
    char target[512] = {};
    const ssize_t n = ::readlink(sys.c_str(), target, sizeof target - 1);
    if (n <= 0) return "unknown device";
    std::string block = target;
    block = block.substr(block.rfind('/') + 1);
    std::string text = block;
    // A partition's queue settings live with its parent device.
    std::string queue = "/sys/class/block/" + block + "/queue/";
    if (::access(queue.c_str(), F_OK) != 0) queue = "/sys/class/block/" + block + "/../queue/";
    const std::string model = read_first_line("/sys/class/block/" + block + "/device/model");
    const std::string rotational = read_first_line(queue + "rotational");
    const std::string scheduler = read_first_line(queue + "scheduler");
    if (!model.empty()) text += " (" + model + ")";
    if (!rotational.empty()) text += rotational == "0" ? ", non-rotational" : ", rotating";
    if (!scheduler.empty()) text += ", scheduler " + scheduler;
    return text;
}

/// The CPU, cores, memory, kernel and the device under `path`, in one line for reports.
[[nodiscard]] inline std::string describe_machine(const std::string& path) {
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    const double memory_gib = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                              static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1073741824.0;
    utsname name{};
    ::uname(&name);
    char text[1024];
    std::snprintf(text, sizeof text, "%s, %ld cores online, %.1f GiB RAM, Linux %s, device %s",
                  cpu_model().c_str(), cores, memory_gib, name.release,
                  describe_device(path).c_str());
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

/// User and system CPU seconds this process (all its threads) has used so far.
struct cpu_times {
    double user = 0;    ///< User time.
    double system = 0;  ///< System time.
    /// Both together.
    [[nodiscard]] double total() const noexcept { return user + system; }
};

/// getrusage(RUSAGE_SELF) as seconds.
[[nodiscard]] inline cpu_times process_cpu_times() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}

/// The most memory this process has held resident (VmHWM in /proc/self/status), in bytes; 0 when
/// unknown. Unlike getrusage's ru_maxrss it starts afresh at exec, so what a parent held before
/// it spawned the tool does not count.
[[nodiscard]] inline std::uint64_t peak_resident_bytes() {
    std::ifstream status("/proc/self/status");
    std::string key;
    while (status >> key) {
        if (key == "VmHWM:") {
            std::uint64_t kib = 0;
            status >> kib;
            return kib * 1024;
        }
        status.ignore(4096, '\n');
    }
    return 0;
}

/// Bytes of RAM the machine has (sysconf), 0 when unknown.
[[nodiscard]] inline std::uint64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0
               ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
               : 0;
}

/// "2026-11-22T07:10:00Z".
[[nodiscard]] inline std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm parts{};
    ::gmtime_r(&now, &parts);
    char text[64];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
    return text;
}

}  // namespace nvmeio::support

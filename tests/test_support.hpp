#pragma once
// Helpers shared by the tests: scratch files on a real filesystem, patterns, plain-POSIX checks
// that do not go through nvmeio.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "support/pattern.hpp"

namespace nvmeio_test {

// True in a build under AddressSanitizer or ThreadSanitizer (slower, and their allocators hold
// freed memory back instead of handing its address out again).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

// Where O_DIRECT test files live: $NVMEIO_TEST_DIR, else a folder in the working directory
// (ctest runs in the build tree, which is on the disk under test).
inline std::string scratch_dir() {
    static const std::string dir = [] {
        const char* env = std::getenv("NVMEIO_TEST_DIR");
        std::string d = env != nullptr && *env != '\0' ? env : "nvmeio-test-scratch";
        ::mkdir(d.c_str(), 0755);
        return d;
    }();
    return dir;
}

// A fresh path in `dir`; the file is removed when the object dies.
class temp_path {
  public:
    explicit temp_path(const std::string& name, const std::string& dir = scratch_dir()) {
        static std::atomic<unsigned> counter{0};  // tests may make paths on several threads
        path_ =
            dir + "/" + name + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
        ::unlink(path_.c_str());
    }
    temp_path(const temp_path&) = delete;
    temp_path& operator=(const temp_path&) = delete;
    ~temp_path() { ::unlink(path_.c_str()); }
    const std::string& str() const { return path_; }

  private:
    std::string path_;
};

// The one generated pattern (support/pattern.hpp), from offset 0, for `seed`.
inline void fill_pattern(void* data, std::size_t n, std::uint64_t seed) {
    nvmeio::support::fill_pattern(data, n, 0, seed);
}

inline std::vector<unsigned char> pattern(std::size_t n, std::uint64_t seed) {
    return nvmeio::support::pattern(n, seed);
}

// The file's bytes read with plain buffered POSIX calls.
inline std::vector<unsigned char> slurp(const std::string& path) {
    std::vector<unsigned char> out;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return out;
    unsigned char chunk[1 << 16];
    ssize_t got;
    while ((got = ::read(fd, chunk, sizeof chunk)) > 0)
        out.insert(out.end(), chunk, chunk + got);
    ::close(fd);
    return out;
}

// Writes `bytes` to `path` with plain buffered POSIX calls.
inline void spew(const std::string& path, const void* bytes, std::size_t n) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const auto* p = static_cast<const unsigned char*>(bytes);
    std::size_t done = 0;
    while (fd >= 0 && done < n) {
        const ssize_t put = ::write(fd, p + done, n - done);
        if (put <= 0) break;
        done += static_cast<std::size_t>(put);
    }
    if (fd >= 0) ::close(fd);
}

// Writes a file of `size` pattern bytes (seed `seed`) at `path`.
inline void spew_pattern(const std::string& path, std::size_t size, std::uint64_t seed) {
    const std::vector<unsigned char> bytes = pattern(size, seed);
    spew(path, bytes.data(), size);
}

// True when `data` holds `size` pattern bytes of seed `seed`.
inline bool holds_pattern(const void* data, std::size_t size, std::uint64_t seed) {
    return std::memcmp(data, pattern(size, seed).data(), size) == 0;
}

inline std::uint64_t file_size(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : ~0ull;
}

// Number of open descriptors of this process.
inline int open_fd_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (::readdir(d) != nullptr)
            ++n;
        ::closedir(d);
    }
    return n;
}

// Threads of this process (to check that workers are created once).
inline int thread_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (dirent* e = ::readdir(d))
            n += e->d_name[0] != '.';
        ::closedir(d);
    }
    return n;
}

// True when `dir` accepts O_DIRECT opens (checked with a plain open, not nvmeio).
inline bool accepts_o_direct(const std::string& dir) {
    const std::string probe = dir + "/.o_direct_probe." + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
    ::unlink(probe.c_str());
    if (fd < 0) return false;
    ::close(fd);
    return true;
}

// The message of the `E` that `f()` throws, or "nothing thrown".
template <class E, class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "nothing thrown";
}

// True when `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Every strategy with every submit mode, not measuring.
inline std::vector<nvmeio::transfer_config> every_config() {
    std::vector<nvmeio::transfer_config> out;
    for (nvmeio::strategy_kind s :
         {nvmeio::strategy_kind::sequential, nvmeio::strategy_kind::overlapped}) {
        for (nvmeio::submit_mode m : {nvmeio::submit_mode::single, nvmeio::submit_mode::block}) {
            out.push_back({s, m, false});
        }
    }
    return out;
}

}  // namespace nvmeio_test

// A buffer pinned by an io_uring ring in one shared object and freed by code in another (each
// with its own copy of nvmeio, built with -fvisibility=hidden): the ring must let go of it, so
// new memory at the same address moves its own bytes. Exits 77 where this cannot run.

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "two_libraries/libraries.h"

namespace {

constexpr std::size_t size = std::size_t{64} << 20;

unsigned char pattern_byte(std::size_t at, unsigned seed) {
    return static_cast<unsigned char>((at * 2654435761u + seed * 97u + (at >> 12)) >> 3);
}

bool spew(const std::string& path, unsigned seed) {
    std::vector<unsigned char> bytes(size);
    for (std::size_t at = 0; at < size; ++at)
        bytes[at] = pattern_byte(at, seed);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    const bool whole = ::write(fd, bytes.data(), size) == static_cast<ssize_t>(size);
    return ::close(fd) == 0 && whole;
}

std::size_t wrong_bytes(const void* data, unsigned seed) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    std::size_t wrong = 0;
    for (std::size_t at = 0; at < size; ++at)
        wrong += bytes[at] != pattern_byte(at, seed);
    return wrong;
}

int fail(const char* what) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    return 1;
}

}  // namespace

int main() {
    char why[512] = "";
    if (!reader_usable(why, sizeof why)) {
        std::printf("SKIPPED: %s\n", why);
        return 77;
    }
    const char* dir = std::getenv("NVMEIO_TEST_DIR");
    const std::string base = std::string(dir != nullptr && *dir ? dir : ".") +
                             "/buffer_freed_in_another_library." + std::to_string(::getpid());
    const std::string first = base + ".first";
    const std::string second = base + ".second";
    // A fixed mmap threshold: the 64 MiB buffers are mapped and unmapped, so the second comes
    // back at the first one's address as fresh pages.
    (void)::mallopt(M_MMAP_THRESHOLD, 1 << 20);
    int result = 0;
    void* context = nullptr;
    void* buffer = nullptr;
    do {
        if (!spew(first, 1) || !spew(second, 2)) {
            result = fail("writing the test files");
            break;
        }
        context = reader_open();
        buffer = reader_allocate(size);
        if (context == nullptr || buffer == nullptr) {
            result = fail("making the context or the buffer");
            break;
        }
        for (int pass = 0; pass < 3 && result == 0; ++pass) {  // the second pass pins it
            if (reader_read(context, buffer, first.c_str(), why, sizeof why) !=
                static_cast<long long>(size))
                result = fail(why);
        }
        if (result != 0) break;
        if (wrong_bytes(reader_data(buffer), 1) != 0) {
            result = fail("the first file's bytes");
            break;
        }
        if (reader_pinned(context) == 0) {
            std::printf("SKIPPED: the ring did not pin the buffer (RLIMIT_MEMLOCK?)\n");
            result = 77;
            break;
        }
        const void* old_address = reader_data(buffer);
        freer_free(buffer);  // by the other library's copy of nvmeio
        std::printf("unpinned when freed by the other library: %llu\n", reader_unpinned(context));
        buffer = reader_allocate(size);
        if (buffer == nullptr) {
            result = fail("making the second buffer");
            break;
        }
        std::printf("second buffer %s the first one's address\n",
                    reader_data(buffer) == old_address ? "at" : "NOT at");
        std::memset(reader_data(buffer), 0, size);
        const long long moved = reader_read(context, buffer, second.c_str(), why, sizeof why);
        if (moved != static_cast<long long>(size)) {
            result = fail(why);
            break;
        }
        const std::size_t wrong = wrong_bytes(reader_data(buffer), 2);
        std::printf("read %lld bytes of the second file; %zu of them wrong\n", moved, wrong);
        if (wrong != 0) result = fail("the second file's bytes");
        if (reader_unpinned(context) != 1) result = fail("the ring did not let go of the buffer");
    } while (false);
    if (buffer != nullptr) freer_free(buffer);
    reader_close(context);
    ::unlink(first.c_str());
    ::unlink(second.c_str());
    if (result == 0) std::printf("PASSED\n");
    return result;
}

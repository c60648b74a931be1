#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/aligned_allocator.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <system_error>

#include "libraries.h"

#if NVMEIO_HAS_IO_URING

using context_type = nvmeio::basic_aio_context<nvmeio::io_uring_backend>;

int reader_usable(char* why, size_t size) {
    if (const char* skip = std::getenv("NVMEIO_TEST_SKIP_IO_URING"); skip != nullptr && *skip) {
        std::snprintf(why, size, "io_uring is not tested in this run (%s)", skip);
        return 0;
    }
    std::error_code error;
    if (nvmeio::io_uring_supported(error)) return 1;
    std::snprintf(why, size, "io_uring is refused here (%s)", error.message().c_str());
    return 0;
}

void* reader_open() {
    try {
        return new context_type({8, std::size_t{1} << 20});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "reader_open: %s\n", e.what());
        return nullptr;
    }
}

void reader_close(void* context) {
    delete static_cast<context_type*>(context);
}

void* reader_allocate(size_t size) {
    try {
        return new nvmeio::aligned_buffer(size);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "reader_allocate: %s\n", e.what());
        return nullptr;
    }
}

void* reader_data(void* buffer) {
    return static_cast<nvmeio::aligned_buffer*>(buffer)->data();
}

long long reader_read(void* context, void* buffer, const char* path, char* why, size_t size) {
    try {
        auto& b = *static_cast<nvmeio::aligned_buffer*>(buffer);
        nvmeio::file f(path, nvmeio::open_mode::read);
        return static_cast<long long>(
            nvmeio::read(*static_cast<context_type*>(context), f, b, 0).bytes);
    } catch (const std::exception& e) {
        std::snprintf(why, size, "%s", e.what());
        return -1;
    }
}

unsigned long long reader_pinned(void* context) {
    return static_cast<context_type*>(context)->backend().registered_use().pinned;
}

unsigned long long reader_unpinned(void* context) {
    return static_cast<context_type*>(context)->backend().registered_use().unpinned;
}

#else

int reader_usable(char* why, size_t size) {
    std::snprintf(why, size, "this build has no io_uring (NVMEIO_HAS_IO_URING is 0)");
    return 0;
}
void* reader_open() {
    return nullptr;
}
void reader_close(void*) {}
void* reader_allocate(size_t) {
    return nullptr;
}
void* reader_data(void*) {
    return nullptr;
}
long long reader_read(void*, void*, const char*, char*, size_t) {
    return -1;
}
unsigned long long reader_pinned(void*) {
    return 0;
}
unsigned long long reader_unpinned(void*) {
    return 0;
}

#endif

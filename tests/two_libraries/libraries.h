#pragma once
// Two shared objects, each with its own copy of nvmeio (built with -fvisibility=hidden, as
// Python extensions are): `reader` allocates aligned_buffers and reads files into them through
// its io_uring context; `freer` frees a buffer the reader allocated. Plain C, as such objects
// talk to each other.

#include <stddef.h>

#define NVMEIO_TEST_EXPORT __attribute__((visibility("default")))

extern "C" {
// 1 when io_uring works here; otherwise 0 and a reason in `why` (`size` bytes).
NVMEIO_TEST_EXPORT int reader_usable(char* why, size_t size);
// An io_uring context of queue depth 8 and 1 MiB blocks; null on failure.
NVMEIO_TEST_EXPORT void* reader_open(void);
NVMEIO_TEST_EXPORT void reader_close(void* context);
// A new aligned_buffer of `size` bytes; null on failure.
NVMEIO_TEST_EXPORT void* reader_allocate(size_t size);
NVMEIO_TEST_EXPORT void* reader_data(void* buffer);
// Reads the first size() bytes of the file at `path` into the buffer: the bytes moved, or -1
// with the message in `why`.
NVMEIO_TEST_EXPORT long long reader_read(void* context, void* buffer, const char* path, char* why,
                                         size_t size);
// Pieces of memory the context's ring pinned, and let go, so far.
NVMEIO_TEST_EXPORT unsigned long long reader_pinned(void* context);
NVMEIO_TEST_EXPORT unsigned long long reader_unpinned(void* context);

// Frees (deletes) an aligned_buffer made by reader_allocate.
NVMEIO_TEST_EXPORT void freer_free(void* buffer);
}

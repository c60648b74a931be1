#include <nvmeio/aligned_allocator.hpp>

#include "libraries.h"

void freer_free(void* buffer) {
    delete static_cast<nvmeio::aligned_buffer*>(buffer);
}

#pragma once
/// \file version.hpp
/// nvmeio's version, single-sourced: CMake and the Conan recipe read these three lines.

#define NVMEIO_VERSION_MAJOR 0
#define NVMEIO_VERSION_MINOR 1
#define NVMEIO_VERSION_PATCH 0

/// Every name of nvmeio is declared in `namespace nvmeio { inline namespace v0 {`, named for the
/// major version (as {fmt} does): two versions linked into one process, each inside its own
/// shared object, then share no symbol and no state by accident. Every header and .ipp opens and
/// closes it with these two macros, so that the version is written in one place.
#define NVMEIO_BEGIN_NAMESPACE \
    namespace nvmeio {         \
    inline namespace v0 {
#define NVMEIO_END_NAMESPACE \
    }                        \
    }

/// The version as one integer, MAJOR * 10000 + MINOR * 100 + PATCH.
#define NVMEIO_VERSION \
    (NVMEIO_VERSION_MAJOR * 10000 + NVMEIO_VERSION_MINOR * 100 + NVMEIO_VERSION_PATCH)

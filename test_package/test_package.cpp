// Conan test package for nvmeio: writes a file with plain POSIX calls, reads it back with
// O_DIRECT through nvmeio::read and checks every byte; exits non-zero on any mismatch or error.

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nvmeio/nvmeio.hpp>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <folder on a filesystem that accepts O_DIRECT>\n", argv[0]);
        return 2;
    }
    const std::string path = std::string(argv[1]) + "/consumer." + std::to_string(::getpid());
    // Not a multiple of any alignment unit, so the unaligned tail path is exercised too.
    const std::size_t length = (std::size_t{3} << 20) + 1234;
    std::vector<unsigned char> expected(length);
    for (std::size_t i = 0; i < length; ++i)
        expected[i] = static_cast<unsigned char>((i * 131 + i / 4096) & 0xff);

    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::write(fd, expected.data(), length) != static_cast<ssize_t>(length) ||
        ::fsync(fd) != 0 || ::close(fd) != 0) {
        std::perror(("writing " + path).c_str());
        return 1;
    }

    int status = 0;
    try {
        nvmeio::file f(path, nvmeio::open_mode::read, nvmeio::direct_io::on);
        nvmeio::aio_context context({/*queue_depth=*/4, /*block_size=*/std::size_t{1} << 20});
        nvmeio::aligned_buffer buffer(length, f.required_alignment());
        const nvmeio::transfer_result result = nvmeio::read(context, f, buffer, 0);
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < length; ++i)
            mismatches += static_cast<unsigned char>(buffer.data()[i]) != expected[i];
        std::printf("nvmeio %d.%d.%d: read %zu of %zu bytes with O_DIRECT=%d, %zu mismatches\n",
                    NVMEIO_VERSION_MAJOR, NVMEIO_VERSION_MINOR, NVMEIO_VERSION_PATCH, result.bytes,
                    length, f.is_direct() ? 1 : 0, mismatches);
        if (result.bytes != length || mismatches != 0 || !f.is_direct()) status = 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        status = 1;
    }
    ::unlink(path.c_str());
    return status;
}

// Ragged tails, for edges.sh: `blocks` requests of `length` bytes (not a multiple of the file's
// unit) at every `stride` bytes of FILE, from aligned memory or memory 64 bytes off, moved as
// one batch (read, write: each last unit staged, padded to a whole unit, a write's merged with the
// file's bytes through the queue), one file::read_at/write_at each (read_at, write_at: the
// synchronous bounce), or one transfer each (tread, twrite, aligned memory: the tail is the
// engine's remnant). Prints the seconds of `loops` passes. Built against one include/ tree at a
// time (edges.sh), so it uses the public API only.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nvmeio/nvmeio.hpp>
#include <string>
#include <vector>

using namespace nvmeio;

int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr,
                     "usage: %s FILE read|write|read_at|write_at|tread|twrite aligned|unaligned "
                     "BLOCKS LENGTH STRIDE LOOPS\n",
                     argv[0]);
        return 2;
    }
    const std::string path = argv[1];
    const std::string how = argv[2];
    const bool write = how == "write" || how == "write_at" || how == "twrite";
    const std::size_t skew = std::strcmp(argv[3], "unaligned") == 0 ? 64 : 0;
    const std::size_t blocks = std::strtoull(argv[4], nullptr, 10);
    const std::size_t length = std::strtoull(argv[5], nullptr, 10);
    const std::size_t stride = std::strtoull(argv[6], nullptr, 10);
    const unsigned loops = static_cast<unsigned>(std::strtoul(argv[7], nullptr, 10));
    file f(path, write ? open_mode::read_write : open_mode::read);
    aligned_buffer slab(blocks * stride + skew);
    for (std::size_t i = 0; i < slab.size(); ++i)
        slab.data()[i] = static_cast<std::byte>(i * 131 + 7);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < blocks; ++i)
        requests.push_back({memory(slab).slice(skew + i * stride, length), i * stride});
    aio_context context(context_options{32, 1u << 20});
    const auto start = std::chrono::steady_clock::now();
    const operation op = write ? operation::write : operation::read;
    for (unsigned pass = 0; pass < loops; ++pass) {
        if (how == "read" || how == "write") {
            (void)transfer_batch(context, f, op, requests);
            continue;
        }
        for (const batch_request& r : requests) {
            if (how == "read_at") (void)f.read_at(r.memory, r.offset);
            if (how == "write_at") f.write_at(r.memory, r.offset);
            if (how[0] == 't') (void)transfer(context, f, op, r.memory, r.offset);
        }
    }
    std::printf("%.6f\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
}

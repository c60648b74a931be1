#pragma once
/// \file mapped.hpp
/// Whether a call may use a tensor's memory: a read needs to write it, a write to read it. A
/// copy through a staging slot touches the memory in this process, where memory it may not
/// use is a crash rather than the kernel's EFAULT, so such memory is refused before any byte
/// moves. Memory that torch's allocators (CPU, pinned) or nvmeio gave out is usable; any other (a
/// NumPy array, a tensor over an mmap) is looked up in /proc/self/maps, without the GIL. The
/// check is made when the call starts: memory made unusable after that is not seen.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <nvmeio/transfer.hpp>

#include <pybind11/pybind11.h>
#include <torch/types.h>

#include "pinned.hpp"

namespace nvmeio_torch {
namespace detail {

struct mapping {
    std::uintptr_t start, end;
    bool readable, writable;
};

// This process's mappings in address order; empty when /proc/self/maps cannot be read.
inline std::vector<mapping> read_mappings() {
    std::string text;
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::vector<char> chunk(1 << 16);
    for (;;) {
        const ssize_t got = ::read(fd, chunk.data(), chunk.size());
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) text.clear();  // cut short: check nothing rather than part of the map
        if (got <= 0) break;
        text.append(chunk.data(), static_cast<std::size_t>(got));
    }
    ::close(fd);
    std::vector<mapping> mappings;
    std::size_t line = 0;
    while (line < text.size()) {  // each line: "start-end rwxp ..."
        std::size_t next = text.find('\n', line);
        if (next == std::string::npos) next = text.size();
        const std::string fields = text.substr(line, std::min<std::size_t>(next - line, 64));
        line = next + 1;
        char* after = nullptr;
        const std::uintptr_t start = std::strtoull(fields.c_str(), &after, 16);
        if (*after != '-') continue;
        const std::uintptr_t end = std::strtoull(after + 1, &after, 16);
        if (std::strlen(after) < 3 || after[0] != ' ') continue;
        mappings.push_back({start, end, after[1] == 'r', after[2] == 'w'});
    }
    return mappings;
}

// True when [address, address + length) lies in mappings that allow the access.
inline bool usable(const std::vector<mapping>& mappings, std::uintptr_t address, std::size_t length,
                   bool write) {
    if (length > UINTPTR_MAX - address) return false;
    const std::uintptr_t end = address + length;
    auto m = std::upper_bound(mappings.begin(), mappings.end(), address,
                              [](std::uintptr_t a, const mapping& x) { return a < x.end; });
    while (address < end) {
        if (m == mappings.end() || m->start > address || !(write ? m->writable : m->readable))
            return false;
        address = m->end;
        ++m;
    }
    return true;
}

}  // namespace detail

/// Throws std::invalid_argument (ValueError) naming the first of `pieces` (the bytes of
/// `tensors`) whose memory `op` may not use; `name(i)` names piece i.
template <class Name>
void check_memory(nvmeio::operation op, const std::vector<torch::Tensor>& tensors,
                  const std::vector<nvmeio::batch_request>& pieces, const char* method, Name name) {
    std::vector<detail::mapping> mappings;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        const torch::Tensor& t = tensors[i];
        // A storage with an allocator is one of torch's: its memory is read-write.
        if (pieces[i].memory.empty() || owned_by_nvmeio(t) || t.storage().allocator() != nullptr)
            continue;
        if (mappings.empty()) {
            pybind11::gil_scoped_release unlocked;
            mappings = detail::read_mappings();
        }
        if (mappings.empty()) return;  // no /proc: the copy is left to fail as it will
        const bool write = op == nvmeio::operation::read;
        if (!detail::usable(mappings, reinterpret_cast<std::uintptr_t>(pieces[i].memory.data()),
                            pieces[i].memory.size(), write)) {
            throw std::invalid_argument(
                std::string(method) + ": " + name(i) + " is in memory that is not " +
                (write ? "writable (a read-only mapping?); a read writes into it"
                       : "readable; a write reads from it"));
        }
    }
}

}  // namespace nvmeio_torch

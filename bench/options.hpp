#pragma once
/// \file options.hpp
/// Command-line pieces nvmeio-bench and nvmeio-tune share beyond the transfer flags: the target,
/// the cache mode, the buffer (fresh or pre-touched, huge pages or not) and the device guard.

#include <string>
#include <vector>

#include "run.hpp"
#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/target.hpp"

namespace nvmeio::bench {

/// --huge-pages: on, off, or auto (what measured faster for the buffer at hand).
enum class huge_pages_mode { automatic, on, off };

/// auto, on, off.
[[nodiscard]] inline const support::enum_names<huge_pages_mode>& huge_pages_names() {
    static const support::enum_names<huge_pages_mode> names{{"auto", huge_pages_mode::automatic},
                                                            {"on", huge_pages_mode::on},
                                                            {"off", huge_pages_mode::off}};
    return names;
}

/// The help of --huge-pages: both measurements behind the default (docs/PERFORMANCE.md).
inline const char* const huge_pages_help =
    "transparent huge pages (madvise MADV_HUGEPAGE) for the buffer: on, off, or auto. Measured on "
    "the development VM (docs/PERFORMANCE.md): on a buffer touched before the runs, huge pages cut "
    "CPU per GiB 4.5-14x at the same or better throughput; on a fresh 2 GiB buffer they made a "
    "first load 1.7-5x slower as a whole process (2.3 s of system time to fault it in, up to 5 s, "
    "against 1.1 s with 4 KiB pages; others saw 3-7x on such VMs). auto: on for a pre-touched "
    "buffer, off with --fresh-buffer";

/// What both tools read besides the transfer flags.
struct common_flags {
    std::string path;                                         ///< -f, --file
    bool warm = false;                                        ///< --warm
    bool fresh_buffer = false;                                ///< --fresh-buffer
    huge_pages_mode huge_pages = huge_pages_mode::automatic;  ///< --huge-pages
    bool allow_device_write = false;                          ///< --allow-device-write
    bool ring = false;                                        ///< --ring

    /// Adds the flags; --file is required unless `path` already holds a default.
    void add_to(CLI::App& app, const std::string& file_help) {
        CLI::Option* file = app.add_option("-f,--file", path, file_help);
        if (path.empty())
            file->required();
        else
            file->capture_default_str();
        app.add_flag("--warm", warm,
                     "do not drop the page cache before reads (they are labelled warm); needed "
                     "when not root");
        app.add_flag("--fresh-buffer", fresh_buffer,
                     "do not touch the buffer before the first pass, so that the first pass "
                     "pays for faulting its pages in, as a program's first load does");
        support::add_enum_option(app, "--huge-pages", huge_pages, huge_pages_names(),
                                 huge_pages_help);
        app.add_flag("--allow-device-write", allow_device_write,
                     "allow write runs on a block device (they write back the bytes they read "
                     "from it, but a crash in between would leave them changed)");
        app.add_flag("--ring", ring,
                     "fio's memory footprint: move the range as one batch of block-size "
                     "requests cycling through a ring of threads x queue depth x block size "
                     "bytes (bytes read are not kept; a write pass is followed, untimed, by "
                     "writing the file's own bytes back)");
    }

    /// Refuses combinations that mean nothing (usage_error naming the flag).
    void check() const {
        if (ring && fresh_buffer)
            throw support::usage_error("--ring",
                                       "cannot be combined with --fresh-buffer (the "
                                       "ring is reused by every pass)");
    }

    /// The buffer these flags ask for.
    [[nodiscard]] buffer_choice buffer() const noexcept {
        const bool huge = huge_pages == huge_pages_mode::on ||
                          (huge_pages == huge_pages_mode::automatic && !fresh_buffer);
        return {fresh_buffer, huge};
    }
};

/// Refuses sizes the buffer cannot hold in this machine's memory (usage_error naming --size).
inline void check_fits_in_memory(std::uint64_t size) {
    const std::uint64_t memory = support::physical_memory_bytes();
    if (memory != 0 && size > memory / 4 * 3) {
        throw support::usage_error("--size", support::format_size(size) +
                                                 " bytes would not fit in this machine's memory (" +
                                                 support::format_size(memory) +
                                                 "); the tools hold the whole range in one buffer");
    }
}

/// Throws usage_error naming `flag` for a block size that is not a multiple of the O_DIRECT
/// alignment of `path` (which must exist).
inline void check_block_sizes(const std::string& path, const std::vector<std::uint64_t>& sizes,
                              const std::string& flag) {
    const file f(path, open_mode::read, direct_io::on);
    for (const std::uint64_t size : sizes)
        support::check_block_size(flag, size, f);
}

/// Before a read pass: drop the page cache unless `warm`; before a write pass: flush the file.
/// Throws when a cold read was asked for and the drop failed.
inline void prepare_pass(operation op, bool warm, const std::string& path) {
    if (op == operation::write) {
        support::flush_file(path);
        return;
    }
    if (warm) return;
    std::string why;
    if (!support::drop_page_cache(why)) {
        throw std::runtime_error(
            "cannot drop the page cache, so these reads cannot be called "
            "cold: " +
            why +
            ". Run as root, or pass --warm to measure (and label) "
            "warm reads.");
    }
}

}  // namespace nvmeio::bench

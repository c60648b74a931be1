// write_verify: writes the generated pattern (support/pattern.hpp) of any size through nvmeio,
// checks the file is exactly that size, reads it back through nvmeio and validates both the read
// and the file's bytes. Exit 0 when everything matches, 1 on a mismatch, 2 on a bad command line
// or an error.

#include <iostream>
#include <nvmeio/nvmeio.hpp>

#include "support/cli.hpp"
#include "support/machine.hpp"
#include "support/pattern.hpp"

namespace support = nvmeio::support;

int main(int argc, char** argv) {
    return support::run_main("write_verify", 2, [&] {
        CLI::App app{
            "Write a generated pattern with nvmeio, read it back, validate it and the file size."};
        std::string path;
        std::uint64_t size = 0;
        support::transfer_flags flags;
        app.add_option("file", path, "the file to create (truncated if it exists)")->required();
        support::add_size_option(app, "--size", size,
                                 "bytes to write (any number, not only blocks; K, M, G suffixes)",
                                 0)
            ->required();
        flags.add_to(app);
        support::parse_command_line(app, argc, argv);
        flags.check();
        // Two buffers of `size` bytes: the pattern and what is read back.
        if (size > support::physical_memory_bytes() / 2) {
            throw support::usage_error("--size", support::format_size(size) +
                                                     " bytes twice do not fit in this machine's "
                                                     "memory");
        }
        const auto length = static_cast<std::size_t>(size);

        nvmeio::aligned_buffer source(length), target(length);
        support::fill_pattern(source.data(), length);
        std::vector<nvmeio::perf_row> rows;
        nvmeio::transfer_result got;
        std::uint64_t file_size = 0;
        support::with_backend(flags.backend, [&](auto backend) {
            nvmeio::basic_aio_context<typename decltype(backend)::type> context(flags.context());
            {
                nvmeio::file out(path, nvmeio::open_mode::write, flags.direct);
                if (out.kind() != nvmeio::file_kind::regular) {
                    throw support::usage_error(
                        "file", "'" + path + "' is a " + nvmeio::to_string(out.kind()) +
                                    "; write_verify writes regular files only");
                }
                flags.check_against(out);
                rows.push_back({flags.label("write"),
                                nvmeio::write(context, out, source, 0, flags.config()).perf});
                out.sync();
                file_size = out.size();
            }
            nvmeio::file in(path, nvmeio::open_mode::read, flags.direct);
            got = nvmeio::read(context, in, target, 0, flags.config());
            rows.push_back({flags.label("read"), got.perf});
        });
        nvmeio::print_table(std::cout, rows);

        const bool size_exact = file_size == size;
        const bool read_exact =
            got.bytes == size && nvmeio::equal(source.data(), target.data(), length);
        const nvmeio::verify_result on_disk = nvmeio::verify_read(path, source, 0);
        std::cout << "file size " << file_size << (size_exact ? " (exact)" : " (WRONG)") << "\n"
                  << "read back " << got.bytes << " bytes"
                  << (read_exact ? " (equal)" : " (MISMATCH)") << "\n"
                  << "file bytes " << (on_disk.equal() ? "equal to the pattern" : "DIFFER") << " ("
                  << on_disk.mismatches.count << " bytes differ)\n";
        return size_exact && read_exact && on_disk.equal() ? 0 : 1;
    });
}

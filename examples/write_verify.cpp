// write_verify: writes a generated pattern of any size through nvmeio, checks the file is exactly
// that size, reads it back through nvmeio and validates both the read and the file's bytes.
// Exit 0 when everything matches, 1 on a mismatch, 2 on error.

#include <sys/stat.h>

#include <iostream>
#include <nvmeio/nvmeio.hpp>

#include "cli.hpp"
#include "pattern.hpp"

int main(int argc, char** argv) try {
    CLI::App app{
        "Write a generated pattern with nvmeio, read it back, validate it and the file size."};
    std::string path;
    std::size_t size = 0;
    example::transfer_flags flags;
    app.add_option("file", path, "the file to create (truncated if it exists)")->required();
    app.add_option("--size", size, "bytes to write (any number, not only blocks)")->required();
    flags.add_to(app);
    CLI11_PARSE(app, argc, argv);

    nvmeio::aligned_buffer source(size), target(size);
    example::generate(source.data(), size);
    nvmeio::aio_context context(flags.context());
    std::vector<nvmeio::perf_row> rows;
    {
        nvmeio::file out(path, nvmeio::open_mode::write, flags.direct_mode());
        rows.push_back({flags.label("write"),
                        nvmeio::write(context, out, source.data(), size, 0, flags.config()).perf});
        out.sync();
    }
    struct stat st {};
    const bool size_exact =
        ::stat(path.c_str(), &st) == 0 && static_cast<std::size_t>(st.st_size) == size;

    nvmeio::file in(path, nvmeio::open_mode::read, flags.direct_mode());
    const nvmeio::transfer_result got =
        nvmeio::read(context, in, target.data(), size, 0, flags.config());
    rows.push_back({flags.label("read"), got.perf});
    nvmeio::print_table(std::cout, rows);

    const bool read_exact = got.bytes == size && nvmeio::equal(source.data(), target.data(), size);
    const nvmeio::verify_result on_disk = nvmeio::verify_read(path, source.data(), size, 0);
    std::cout << "file size " << st.st_size << (size_exact ? " (exact)" : " (WRONG)") << "\n"
              << "read back " << got.bytes << " bytes" << (read_exact ? " (equal)" : " (MISMATCH)")
              << "\n"
              << "file bytes " << (on_disk.equal() ? "equal to the pattern" : "DIFFER") << " ("
              << on_disk.mismatches.count << " bytes differ)\n";
    return size_exact && read_exact && on_disk.equal() ? 0 : 1;
} catch (const std::exception& e) {
    std::cerr << "write_verify: " << e.what() << "\n";
    return 2;
}

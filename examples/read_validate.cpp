// read_validate: reads a whole file through nvmeio (O_DIRECT by default), validates every byte
// against an independent buffered read, prints the perf table. Exit 0 when equal, 1 on mismatch,
// 2 on error.

#include <iostream>
#include <nvmeio/nvmeio.hpp>

#include "cli.hpp"

int main(int argc, char** argv) try {
    CLI::App app{
        "Read a file with nvmeio, validate it against a buffered read, print the perf table."};
    std::string path;
    example::transfer_flags flags;
    app.add_option("file", path, "the file to read")->required();
    flags.add_to(app);
    CLI11_PARSE(app, argc, argv);

    nvmeio::file in(path, nvmeio::open_mode::read, flags.direct_mode());
    const std::size_t size = in.size();
    nvmeio::aligned_buffer buffer(size, 4096, {true, false, false});
    nvmeio::aio_context context(flags.context());
    const nvmeio::transfer_result result =
        nvmeio::read(context, in, buffer.data(), size, 0, flags.config());
    nvmeio::print_table(
        std::cout,
        {{flags.label(in.is_direct() ? "read O_DIRECT" : "read buffered"), result.perf}});

    const nvmeio::verify_result check = nvmeio::verify_read(path, buffer.data(), result.bytes, 0);
    if (result.bytes == size && check.equal()) {
        std::cout << "validated " << size << " bytes: equal to a buffered read\n";
        return 0;
    }
    std::cout << "MISMATCH: read " << result.bytes << " of " << size << " bytes; "
              << check.mismatches.count << " bytes differ (first at " << check.mismatches.first
              << ", last at " << check.mismatches.last << ")\n";
    return 1;
} catch (const std::exception& e) {
    std::cerr << "read_validate: " << e.what() << "\n";
    return 2;
}

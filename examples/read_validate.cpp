// read_validate: reads a whole file (or block device) through nvmeio, O_DIRECT by default,
// validates every byte against an independent buffered read, prints the perf table. Exit 0 when
// equal, 1 on a mismatch, 2 on a bad command line or an error.

#include <iostream>
#include <nvmeio/nvmeio.hpp>

#include "support/cli.hpp"
#include "support/machine.hpp"

namespace support = nvmeio::support;

int main(int argc, char** argv) {
    return support::run_main("read_validate", 2, [&] {
        CLI::App app{
            "Read a file with nvmeio, validate it against a buffered read, print the perf table."};
        std::string path;
        support::transfer_flags flags;
        app.add_option("file", path, "the file or block device to read")->required();
        flags.add_to(app);
        support::parse_command_line(app, argc, argv);
        flags.check();

        nvmeio::file in(path, nvmeio::open_mode::read, flags.direct);
        flags.check_against(in);
        const std::uint64_t size = in.size();
        if (size > support::physical_memory_bytes()) {
            throw std::invalid_argument("'" + path + "' holds " + std::to_string(size) +
                                        " bytes, more than this machine's memory");
        }
        nvmeio::aligned_buffer buffer(static_cast<std::size_t>(size), 4096, {true, false, false});
        const nvmeio::transfer_result result =
            support::with_backend(flags.backend, [&](auto backend) {
                nvmeio::basic_aio_context<typename decltype(backend)::type> context(
                    flags.context());
                return nvmeio::read(context, in, buffer, 0, flags.config());
            });
        nvmeio::print_table(
            std::cout,
            {{flags.label(in.is_direct() ? "read O_DIRECT" : "read buffered"), result.perf}});

        const nvmeio::verify_result check =
            nvmeio::verify_read(path, nvmeio::memory(buffer).first(result.bytes), 0);
        if (result.bytes == size && check.equal()) {
            std::cout << "validated " << size << " bytes: equal to a buffered read\n";
            return 0;
        }
        std::cout << "MISMATCH: read " << result.bytes << " of " << size << " bytes; "
                  << check.mismatches.count << " bytes differ (first at " << check.mismatches.first
                  << ", last at " << check.mismatches.last << ")\n";
        return 1;
    });
}

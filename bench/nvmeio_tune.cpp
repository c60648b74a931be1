// nvmeio-tune: the combinatorial sweep. Every combination of block size x queue depth x overlap
// x single submit x threads, for reads and writes separately, repeated, interleaved in a shuffled
// order, optionally point by point against fio with the same engine; cold reads (page cache
// dropped before each) or an explicit --warm. Writes a CSV of every run, a JSON summary with the
// best configurations and a DeepSpeed "aio" block, and an SVG heat map per operation.
// Plan (tune_plan.hpp) -> run (tune_run.hpp) -> report (tune_report.hpp).

#include <algorithm>
#include <string>

#include "fio.hpp"
#include "options.hpp"
#include "run.hpp"
#include "support/cli.hpp"
#include "tune_plan.hpp"
#include "tune_report.hpp"
#include "tune_run.hpp"

namespace bench = nvmeio::bench;
namespace support = nvmeio::support;

namespace {

bench::tune_plan plan(int argc, char** argv) {
    CLI::App app{
        "nvmeio-tune: sweep block size x queue depth x overlap x single submit x "
        "threads, for reads and writes, and report the best configuration (with a "
        "DeepSpeed \"aio\" block)."};
    bench::tune_plan p;
    bench::add_tune_options(app, p);
    support::parse_command_line(app, argc, argv);
    bench::check_tune_plan(p);
    return p;
}

bench::tune_outcome run(const bench::tune_plan& p) {
    std::string fio;
    if (p.vs_fio) {
        fio = bench::find_program("fio");
        if (fio.empty()) throw std::runtime_error(bench::fio_missing_message);
    }
    const bool reads =
        std::find(p.ops.begin(), p.ops.end(), nvmeio::operation::read) != p.ops.end();
    if (reads) bench::prepare_pass(nvmeio::operation::read, p.flags.warm, p.flags.path);
    bench::tune_outcome out;
    out.created = bench::prepare_target(p.target, p.size);
    bench::check_block_sizes(p.flags.path, p.block_sizes, "--block-sizes");
    bench::runner engine(p.size, p.flags.buffer());
    if (std::find(p.ops.begin(), p.ops.end(), nvmeio::operation::write) != p.ops.end())
        engine.load(p.flags.path);  // write runs write the file's own bytes back
    bench::tune_runner(p, engine, fio).run(bench::make_groups(p), out);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    return support::run_main("nvmeio-tune", 1, [&] {
        const bench::tune_plan p = plan(argc, argv);
        const bench::tune_outcome outcome = run(p);
        bench::report(p, outcome);
        return 0;
    });
}

// Tests of the tools and examples as programs: tiny runs of nvmeio-bench and nvmeio-tune whose
// CSV, JSON and SVG output is parsed and checked, the pieces of bench/ they are built from, and
// every silly command-line value of every tool and example (exit 2, a message naming the flag).
#define BOOST_TEST_MODULE tools_test
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fio.hpp"
#include "heatmap_svg.hpp"
#include "loop_device.hpp"
#include "skip.hpp"
#include "support/machine.hpp"
#include "test_support.hpp"

namespace bench = nvmeio::bench;
namespace support = nvmeio::support;
using nlohmann::json;

namespace {

std::string tool(const char* variable) {
    const char* path = std::getenv(variable);
    BOOST_TEST_REQUIRE(path != nullptr, variable << " must name the tool (ctest sets it)");
    return path;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string quoted(const std::string& s) {
    return "'" + s + "'";
}

// Runs `command` through the shell with stdout and stderr captured; returns the exit status.
struct ran {
    int status = -1;
    std::string out, err;
};
ran run(const std::string& command, const std::string& tag) {
    const std::string out = nvmeio_test::scratch_dir() + "/" + tag + ".out";
    const std::string err = nvmeio_test::scratch_dir() + "/" + tag + ".err";
    const int raw = std::system(
        (command + " > " + quoted(out) + " 2> " + quoted(err) + " < /dev/null").c_str());
    ran r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
    std::vector<std::vector<std::string>> rows;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> cells;
        std::stringstream s(line);
        std::string cell;
        while (std::getline(s, cell, ','))
            cells.push_back(cell);
        if (!line.empty() && line.back() == ',') cells.emplace_back();
        rows.push_back(cells);
    }
    return rows;
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
        ++n;
    return n;
}

std::size_t column(const std::vector<std::string>& header, const std::string& name) {
    for (std::size_t i = 0; i < header.size(); ++i)
        if (header[i] == name) return i;
    BOOST_FAIL("no column " << name);
    return 0;
}

// The cells of `names` in every row after the header, each row's joined with '/', sorted: which
// values of a sweep's axes the runs had.
std::vector<std::string> sorted_cells(const std::vector<std::vector<std::string>>& rows,
                                      const std::vector<std::string>& names) {
    std::vector<std::size_t> at;
    for (const std::string& name : names)
        at.push_back(column(rows[0], name));
    std::vector<std::string> cells;
    for (std::size_t i = 1; i < rows.size(); ++i) {
        std::string joined;
        for (const std::size_t c : at)
            joined += (joined.empty() ? "" : "/") + rows[i][c];
        cells.push_back(joined);
    }
    std::sort(cells.begin(), cells.end());
    return cells;
}

// A fresh output folder for one tune run.
std::string out_dir(const std::string& name) {
    const std::string dir =
        nvmeio_test::scratch_dir() + "/" + name + "." + std::to_string(::getpid());
    std::system(("rm -rf " + quoted(dir)).c_str());
    return dir;
}

// Runs nvmeio-tune on `target` with `args`, writing into `dir`.
ran run_tune(const nvmeio_test::temp_path& target, const std::string& args, const std::string& dir,
             const std::string& tag) {
    return run(quoted(tool("NVMEIO_TUNE")) + " -f " + quoted(target.str()) + " " + args + " -o " +
                   quoted(dir),
               tag);
}

// What a sweep of one more axis wrote: runs.csv's rows (header first), summary.json and its
// standard output.
struct axis_sweep {
    std::vector<std::vector<std::string>> rows;
    json summary;
    std::string out;
};

// Sweeps 1 MiB of 64 KiB reads at depth 2 on one thread, `axes` added, and requires `runs` runs.
axis_sweep sweep_axes(const std::string& name, const std::string& axes, std::size_t runs) {
    nvmeio_test::temp_path path(name);
    const std::string dir = out_dir(name + "-out");
    const ran r = run_tune(
        path, "-s 1M -b 64K -q 2 -p 1 --ops read --overlap on --single-submit off --warm " + axes,
        dir, name);
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    axis_sweep sweep{read_csv(dir + "/runs.csv"), json::parse(read_text(dir + "/summary.json")),
                     r.out};
    BOOST_TEST_REQUIRE(sweep.rows.size() == 1u + runs);
    return sweep;
}

}  // namespace

// ------------------------------------------------------------------------------ shared helpers

BOOST_AUTO_TEST_CASE(fio_runs_the_engine_of_the_backend_on_the_slices_of_the_parallel_context) {
    bench::run_config c;
    c.path = "/x";
    c.block_size = 1 << 20;
    c.queue_depth = 8;
    c.threads = 4;
    for (const auto backend : {support::backend_kind::libaio, support::backend_kind::io_uring}) {
        c.backend = backend;
        const std::vector<std::string> command = bench::fio_command("fio", c, 64 << 20);
        const std::string engine =
            std::string("--ioengine=") +
            (backend == support::backend_kind::libaio ? "libaio" : "io_uring");
        BOOST_TEST(std::count(command.begin(), command.end(), engine) == 1);
        BOOST_TEST(std::count(command.begin(), command.end(), "--size=16777216") == 1);
        BOOST_TEST(std::count(command.begin(), command.end(), "--offset_increment=16777216") == 1);
        BOOST_TEST(std::count(command.begin(), command.end(), "--numjobs=4") == 1);
        BOOST_TEST(std::count(command.begin(), command.end(), "--direct=1") == 1);
    }
    // fio cannot move the same bytes when the size does not split into P whole blocks.
    BOOST_CHECK_THROW((void)bench::fio_command("fio", c, (64 << 20) + 4096), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(heatmap_has_one_cell_per_point_and_marks_missing_ones) {
    bench::heatmap map;
    map.title = "t <&>";
    map.rows = {"128K", "1M"};
    map.columns = {"4", "32", "128"};
    map.values = {{1.0, 2.0, std::nullopt}, {3.0, 4.0, 5.5}};
    std::ostringstream out;
    bench::write_svg(out, map);
    const std::string svg = out.str();
    BOOST_TEST(svg.rfind("<svg", 0) == 0u);
    BOOST_TEST(count(svg, "<title>") == 6u);
    BOOST_TEST(count(svg, "#eeeeee") == 1u);  // the missing cell
    BOOST_TEST(svg.find(">5.5<") != std::string::npos);
    BOOST_TEST(svg.find("t &lt;&amp;&gt;") != std::string::npos);
}

// -------------------------------------------------------------------------------- nvmeio-bench

BOOST_AUTO_TEST_CASE(bench_reports_every_pass_of_the_configuration_as_json) {
    nvmeio_test::temp_path path("bench-json");
    const ran r =
        run(quoted(tool("NVMEIO_BENCH")) + " -f " + quoted(path.str()) +
                " -s 4M -b 256K -q 4 -p 2 --strategy sequential --submit single -n 2 -w 1 "
                "--spin 30 --warm --validate --json",
            "bench-json");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(r.out);
    BOOST_TEST(doc["config"]["op"] == "read");
    BOOST_TEST(doc["config"]["block_size"] == 262144);
    BOOST_TEST(doc["config"]["queue_depth"] == 4);
    BOOST_TEST(doc["config"]["threads"] == 2);
    BOOST_TEST(doc["config"]["overlap_events"] == false);
    BOOST_TEST(doc["config"]["single_submit"] == true);
    BOOST_TEST(doc["config"]["spin_us"] == 30);
    BOOST_TEST(doc["config"]["pin_once"] == true);
    BOOST_TEST(doc["cache"] == "warm");
    BOOST_TEST(doc["file_created"] == true);
    BOOST_TEST(doc["validation"] == "passed");
    BOOST_TEST_REQUIRE(doc["loops"].size() == 2u);
    for (const json& pass : doc["loops"]) {
        BOOST_TEST(pass["bytes"] == 4194304);
        BOOST_TEST(pass["requests"] == 16);  // 4 MiB in 256 KiB requests
        BOOST_TEST(pass["gb_per_s"].get<double>() > 0);
        BOOST_TEST(pass["cpu_seconds_per_gib"].get<double>() >= 0);
        BOOST_TEST(pass["completion"]["count"] == 16);
    }
    BOOST_TEST(doc["gb_per_s"]["count"] == 2);
    BOOST_TEST(nvmeio_test::file_size(path.str()) == 4194304u);
}

// --spins is one more axis: every value runs at every point, and each run and point says which.
BOOST_AUTO_TEST_CASE(tune_sweeps_spin_values_as_an_axis) {
    const axis_sweep sweep = sweep_axes("tune-spin", "--spins 0,50 -r 2", 4);  // 2 values x 2
    const std::vector<std::string> spins = sorted_cells(sweep.rows, {"spin_us"});
    BOOST_TEST(spins == (std::vector<std::string>{"0", "0", "50", "50"}),
               boost::test_tools::per_element());
    const json& doc = sweep.summary;
    BOOST_TEST(doc["parameters"]["spins_us"] == json::array({0, 50}));
    BOOST_TEST_REQUIRE(doc["points"].size() == 2u);
    std::vector<long long> point_spins;
    for (const json& p : doc["points"])
        point_spins.push_back(p["spin_us"].get<long long>());
    std::sort(point_spins.begin(), point_spins.end());
    BOOST_TEST(point_spins == (std::vector<long long>{0, 50}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bench_write_passes_leave_the_file_content_unchanged) {
    nvmeio_test::temp_path path("bench-write");
    std::vector<unsigned char> original = nvmeio_test::pattern(3 << 20, 7);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    const ran r = run(quoted(tool("NVMEIO_BENCH")) + " --op write -f " + quoted(path.str()) +
                          " -b 128K -q 8 -p 3 -n 2 -w 0 --json",
                      "bench-write");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(r.out);
    BOOST_TEST(doc["config"]["size"] == 3 << 20);
    BOOST_TEST(doc["cache"] == "n/a");
    BOOST_TEST(nvmeio_test::slurp(path.str()) == original);
}

// --direct picks how the file is opened; the report says which, reads validate, writes leave the
// file as it was, and a block size O_DIRECT could not take is fine when the file is not direct.
BOOST_AUTO_TEST_CASE(bench_direct_modes_move_exact_bytes_and_say_which_mode_ran) {
    nvmeio_test::temp_path path("bench-direct");
    std::vector<unsigned char> original = nvmeio_test::pattern((3 << 20) + 77, 8);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    for (const char* mode : {"off", "uncached", "auto"}) {
        BOOST_TEST_CONTEXT(mode) {
            for (const char* op : {"read", "write"}) {
                const ran r =
                    run(quoted(tool("NVMEIO_BENCH")) + " --op " + op + " -f " + quoted(path.str()) +
                            " -b 100000 -q 4 -p 2 -n 1 -w 0 " + "--warm --json --direct " + mode +
                            (std::string(op) == "read" ? " --validate" : ""),
                        "bench-direct");
                if (std::string(mode) == "auto") {
                    // O_DIRECT on this disk: a block size off 512 bytes is refused by name.
                    BOOST_TEST(r.status == 2, r.err);
                    BOOST_TEST(r.err.find("--block-size") != std::string::npos, r.err);
                    continue;
                }
                if (std::string(mode) == "uncached" && r.status != 0) {
                    // A kernel before 6.14: the refusal names the mode.
                    BOOST_TEST(r.err.find("RWF_DONTCACHE") != std::string::npos, r.err);
                    continue;
                }
                BOOST_TEST_REQUIRE(r.status == 0, r.err);
                const json doc = json::parse(r.out);
                BOOST_TEST(doc["config"]["io"] == (std::string(mode) == "off" ? "off" : mode));
                BOOST_TEST(doc["config"]["direct_io"] == false);
                if (std::string(op) == "read") BOOST_TEST(doc["validation"] == "passed");
                BOOST_TEST(nvmeio_test::slurp(path.str()) == original);
            }
        }
    }
}

// --ring moves the range through fio's footprint (threads x depth x block size bytes) as one
// batch: every request is counted, nothing is bounced, and write passes put the file's own bytes
// back afterwards.
BOOST_AUTO_TEST_CASE(bench_ring_passes_move_the_whole_range_and_leave_the_file_unchanged) {
    nvmeio_test::temp_path path("bench-ring");
    std::vector<unsigned char> original = nvmeio_test::pattern(4 << 20, 9);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    for (const char* op : {"read --warm", "write"}) {
        BOOST_TEST_CONTEXT(op) {
            const ran r = run(quoted(tool("NVMEIO_BENCH")) + " --op " + op + " -f " +
                                  quoted(path.str()) + " -b 64K -q 4 -p 2 -n 2 -w 0 --ring --json",
                              "bench-ring");
            BOOST_TEST_REQUIRE(r.status == 0, r.err);
            const json doc = json::parse(r.out);
            BOOST_TEST(doc["buffer"]["ring"] == true);
            for (const json& pass : doc["loops"]) {
                BOOST_TEST(pass["bytes"] == 4 << 20);
                BOOST_TEST(pass["requests"] == 64);  // 4 MiB in 64 KiB requests
            }
            BOOST_TEST(nvmeio_test::slurp(path.str()) == original);
        }
    }
}

// A --ring read keeps fio's footprint in the whole process: no buffer of the range's size is
// ever allocated (a write pass needs one, to write the file's own bytes back).
BOOST_AUTO_TEST_CASE(bench_ring_reads_never_hold_the_range_in_memory) {
    nvmeio_test::temp_path path("bench-ring-rss");
    const std::size_t size = std::size_t{128} << 20;
    std::vector<unsigned char> original = nvmeio_test::pattern(size, 5);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    const ran r = run(quoted(tool("NVMEIO_BENCH")) + " --op read --warm -f " + quoted(path.str()) +
                          " -b 64K -q 4 -n 1 -w 0 --ring --json",
                      "bench-ring-rss");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(r.out);
    BOOST_TEST(doc["loops"][0]["bytes"] == size);
    const std::uint64_t peak = doc["process"]["peak_rss_bytes"];
    BOOST_TEST(peak > 0u);
    BOOST_TEST(peak < size / 4, peak << " bytes resident at the peak");
}

// io_uring's two switches are axes too: on, off or both, every combination at every point, and
// each run and point says which ran.
BOOST_AUTO_TEST_CASE(tune_sweeps_pin_once_and_single_issuer_as_axes) {
#if NVMEIO_HAS_IO_URING
    std::error_code why;
    if (!nvmeio::io_uring_supported(why)) {
        nvmeio_test::skip("io_uring axes not tested: " + why.message());
        return;
    }
    const axis_sweep sweep = sweep_axes(
        "tune-ring-axes", "--backend io_uring --pin-once both --single-issuer both -r 1", 4);
    const std::vector<std::string> seen = sorted_cells(sweep.rows, {"pin_once", "single_issuer"});
    BOOST_TEST(
        seen == (std::vector<std::string>{"false/false", "false/true", "true/false", "true/true"}),
        boost::test_tools::per_element());
    const json& doc = sweep.summary;
    BOOST_TEST(doc["parameters"]["pin_once"] == "both");
    BOOST_TEST(doc["parameters"]["single_issuer"] == "both");
    BOOST_TEST_REQUIRE(doc["points"].size() == 4u);
    std::vector<std::string> points;
    for (const json& p : doc["points"]) {
        points.push_back(std::string(p["pin_once"] ? "true" : "false") + "/" +
                         (p["single_issuer"] ? "true" : "false"));
    }
    std::sort(points.begin(), points.end());
    BOOST_TEST(points == seen, boost::test_tools::per_element());
    BOOST_TEST(doc["best"]["read"].contains("pin_once"));
    BOOST_TEST(sweep.out.find("unpinned shared-ring") != std::string::npos, sweep.out);
#endif
}

BOOST_AUTO_TEST_CASE(bench_runs_on_io_uring_or_says_precisely_why_not) {
    nvmeio_test::temp_path path("bench-uring");
    const ran r = run(quoted(tool("NVMEIO_BENCH")) + " -f " + quoted(path.str()) +
                          " -s 2M -b 128K -q 4 -p 2 -n 1 -w 0 --warm --validate --json "
                          "--backend io_uring",
                      "bench-uring");
#if NVMEIO_HAS_IO_URING
    std::error_code why;
    if (nvmeio::io_uring_supported(why)) {
        BOOST_TEST_REQUIRE(r.status == 0, r.err);
        const json doc = json::parse(r.out);
        BOOST_TEST(doc["config"]["backend"] == "io_uring");
        BOOST_TEST(doc["config"]["pin_once"] == true);
        BOOST_TEST(doc["config"]["single_issuer"] == true);
        BOOST_TEST(doc["validation"] == "passed");
        BOOST_TEST(doc["loops"][0]["requests"] == 16);
        const ran unpinned = run(quoted(tool("NVMEIO_BENCH")) + " -f " + quoted(path.str()) +
                                     " -s 2M -b 128K -q 4 -n 1 -w 0 --warm --validate --json "
                                     "--backend io_uring --pin-once off --single-issuer off",
                                 "bench-uring-unpinned");
        BOOST_TEST_REQUIRE(unpinned.status == 0, unpinned.err);
        BOOST_TEST(json::parse(unpinned.out)["config"]["pin_once"] == false);
        BOOST_TEST(json::parse(unpinned.out)["config"]["single_issuer"] == false);
        BOOST_TEST(json::parse(unpinned.out)["validation"] == "passed");
        return;
    }
    BOOST_TEST_MESSAGE("io_uring refused by the kernel (" << why.message()
                                                          << "): checking the error");
    BOOST_TEST(r.status == 1);
    BOOST_TEST(r.err.find("io_uring") != std::string::npos, r.err);
#else
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.err.find("--backend") != std::string::npos, r.err);
#endif
}

// -------------------------------------------------------------------------------- nvmeio-tune

BOOST_AUTO_TEST_CASE(tune_sweeps_every_combination_and_writes_csv_json_and_heat_maps) {
    nvmeio_test::temp_path path("tune");
    const std::string dir = out_dir("tune-out");
    const ran r = run_tune(path, "-s 2M -b 64K,128K -q 2,4 -p 1,2 --single-submit off -r 2 --warm",
                           dir, "tune");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    BOOST_TEST(r.err.find('\r') == std::string::npos);  // no progress line when not a terminal
    BOOST_TEST(r.err.empty(), r.err);

    // CSV: every run, 2 ops x 2 block sizes x 2 depths x 2 overlap x 1 submit x 2 threads x 2.
    const auto rows = read_csv(dir + "/runs.csv");
    BOOST_TEST_REQUIRE(rows.size() == 1u + 64u);
    const auto& header = rows[0];
    const std::size_t op = column(header, "op"), method = column(header, "method"),
                      cache = column(header, "cache"), bytes = column(header, "bytes"),
                      rate = column(header, "gb_per_s"), overlap = column(header, "overlap_events"),
                      cpu = column(header, "cpu_seconds_per_gib");
    std::size_t reads = 0;
    for (std::size_t i = 1; i < rows.size(); ++i) {
        BOOST_TEST_REQUIRE(rows[i].size() == header.size());
        BOOST_TEST(rows[i][method] == "nvmeio");
        BOOST_TEST(rows[i][bytes] == "2097152");
        BOOST_TEST(std::stod(rows[i][rate]) > 0);
        BOOST_TEST(std::stod(rows[i][cpu]) >= 0);
        BOOST_TEST((rows[i][overlap] == "true" || rows[i][overlap] == "false"));
        if (rows[i][op] == "read") {
            ++reads;
            BOOST_TEST(rows[i][cache] == "warm");
        } else {
            BOOST_TEST(rows[i][cache] == "n/a");
        }
    }
    BOOST_TEST(reads == 32u);

    const json doc = json::parse(read_text(dir + "/summary.json"));
    BOOST_TEST(doc["runs_planned"] == 64);
    BOOST_TEST(doc["runs_done"] == 64);
    BOOST_TEST(doc["budget_exhausted"] == false);
    BOOST_TEST(doc["cache"] == "warm");
    BOOST_TEST(doc["points"].size() == 32u);
    for (const json& p : doc["points"]) {
        BOOST_TEST(p["gb_per_s"]["count"] == 2);
        BOOST_TEST(p["single_submit"] == false);
    }
    for (const char* which : {"read", "write", "both"}) {
        BOOST_TEST_REQUIRE(doc["best"].contains(which), which);
        const json& aio = doc["best"][which]["aio"];
        BOOST_TEST(aio.size() == 5u);
        BOOST_TEST(aio["block_size"].is_number_integer());
        BOOST_TEST(aio["queue_depth"].is_number_integer());
        BOOST_TEST(aio["intra_op_parallelism"].is_number_integer());
        BOOST_TEST(aio["single_submit"].is_boolean());
        BOOST_TEST(aio["overlap_events"].is_boolean());
    }
    BOOST_TEST(doc["aio"] == doc["best"]["both"]["aio"]);
    // The best read is the point with the highest median.
    double highest = 0;
    for (const json& p : doc["points"])
        if (p["op"] == "read") highest = std::max(highest, p["gb_per_s"]["median"].get<double>());
    BOOST_TEST(doc["best"]["read"]["gb_per_s"].get<double>() == highest);

    for (const char* name : {"read", "write"}) {
        const std::string svg = read_text(dir + "/heatmap_" + name + ".svg");
        BOOST_TEST(svg.rfind("<svg", 0) == 0u);
        BOOST_TEST(count(svg, "<title>") == 4u);  // 2 block sizes x 2 depths
        BOOST_TEST(svg.find("#eeeeee") == std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(tune_budget_stops_early_and_says_so) {
    nvmeio_test::temp_path path("tune-budget");
    const std::string dir = out_dir("tune-budget-out");
    const ran r = run_tune(path, "-s 1M -b 64K -q 2,4,8 -p 1 -r 3 --ops write --budget 0.000001",
                           dir, "tune-budget");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(read_text(dir + "/summary.json"));
    BOOST_TEST(doc["budget_exhausted"] == true);
    BOOST_TEST(doc["runs_planned"] == 36);
    BOOST_TEST(doc["runs_done"].get<int>() >= 1);
    BOOST_TEST(doc["runs_done"].get<int>() < 36);
    BOOST_TEST(read_csv(dir + "/runs.csv").size() == doc["runs_done"].get<std::size_t>() + 1);
    BOOST_TEST(r.out.find("budget exhausted") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tune_labels_reads_cold_only_after_dropping_the_page_cache) {
    nvmeio_test::temp_path path("tune-cold");
    const std::string dir = out_dir("tune-cold-out");
    const ran r =
        run_tune(path, "-s 1M -b 256K -q 4 -p 1 -r 1 --ops read --overlap on --single-submit off",
                 dir, "tune-cold");
    std::string why;
    if (::geteuid() == 0 && support::drop_page_cache(why)) {
        BOOST_TEST_REQUIRE(r.status == 0, r.err);
        const json doc = json::parse(read_text(dir + "/summary.json"));
        BOOST_TEST(doc["cache"] == "cold");
        const auto rows = read_csv(dir + "/runs.csv");
        BOOST_TEST_REQUIRE(rows.size() == 2u);
        BOOST_TEST(rows[1][column(rows[0], "cache")] == "cold");
    } else {
        // Without the drop the tool must refuse, say why, and point to --warm.
        BOOST_TEST(r.status != 0);
        BOOST_TEST(r.err.find("--warm") != std::string::npos, r.err);
        BOOST_TEST(nvmeio_test::file_size(dir + "/summary.json") == ~0ull);
    }
}

BOOST_AUTO_TEST_CASE(tune_says_how_to_get_fio_when_it_is_missing) {
    nvmeio_test::temp_path path("tune-nofio");
    const ran r = run("PATH=/nonexistent " + quoted(tool("NVMEIO_TUNE")) + " -f " +
                          quoted(path.str()) + " -s 1M -b 256K -q 4 -p 1 -r 1 --warm --vs-fio -o " +
                          quoted(out_dir("tune-nofio-out")),
                      "tune-nofio");
    BOOST_TEST(r.status != 0);
    BOOST_TEST(r.err.find("apt-get install fio") != std::string::npos, r.err);
}

// fio's process CPU comes from wait4, which counts all a child ran (its threads, io_uring's io-wq
// workers among them, and what it waited for): here a busy loop the child waits for. A child
// that sleeps costs next to nothing.
BOOST_AUTO_TEST_CASE(a_child_process_cpu_counts_all_its_threads) {
    const bench::command_result busy = bench::run_command(
        {"/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done & wait"});
    BOOST_TEST(busy.status == 0);
    BOOST_TEST(busy.cpu_seconds > 0.05);
    const bench::command_result idle = bench::run_command({"/bin/sleep", "0.2"});
    BOOST_TEST(idle.status == 0);
    BOOST_TEST(idle.cpu_seconds < 0.05);
}

BOOST_AUTO_TEST_CASE(tune_vs_fio_reports_both_rates_and_the_ratio_per_point) {
    if (bench::find_program("fio").empty()) {
        nvmeio_test::skip("the comparison with fio not tested: fio is not installed");
        return;
    }
    nvmeio_test::temp_path path("tune-fio");
    const std::string dir = out_dir("tune-fio-out");
    const ran r = run_tune(path, "-s 4M -b 64K -q 4 -p 1,2 -r 1 --warm --vs-fio", dir, "tune-fio");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const auto rows = read_csv(dir + "/runs.csv");
    const std::size_t method = column(rows[0], "method"), bytes = column(rows[0], "bytes");
    std::size_t fio_rows = 0;
    for (std::size_t i = 1; i < rows.size(); ++i) {
        if (rows[i][method] != "fio") continue;
        ++fio_rows;
        BOOST_TEST(rows[i][bytes] == "4194304");  // fio moved the same bytes
    }
    BOOST_TEST(fio_rows == 4u);  // 2 ops x 2 thread counts
    const json doc = json::parse(read_text(dir + "/summary.json"));
    BOOST_TEST(doc["points"].size() == 16u);
    for (const json& p : doc["points"]) {
        BOOST_TEST_REQUIRE(p.contains("ratio_to_fio"));
        const double expected =
            p["gb_per_s"]["median"].get<double>() / p["fio_gb_per_s"]["median"].get<double>();
        BOOST_TEST(p["ratio_to_fio"].get<double>() == expected, boost::test_tools::tolerance(1e-9));
        // fio's whole process, net of its start-up (a ring of 256 KiB per thread, a quarter of
        // the bytes or less: known), and the ratio from the medians.
        BOOST_TEST_REQUIRE(p.contains("fio_process_cpu_seconds_per_gib"));
        const double fio_process = p["fio_process_cpu_seconds_per_gib"]["median"].get<double>();
        BOOST_TEST(fio_process >= 0.0);
        if (fio_process > 0) {
            BOOST_TEST(p["process_cpu_ratio_to_fio"].get<double>() ==
                           p["cpu_seconds_per_gib"]["median"].get<double>() / fio_process,
                       boost::test_tools::tolerance(1e-9));
        }
    }
    const std::size_t process_cpu = column(rows[0], "process_cpu_seconds_per_gib");
    for (std::size_t i = 1; i < rows.size(); ++i)
        BOOST_TEST(std::stod(rows[i][process_cpu]) >= 0.0);

    // A ring of all the bytes: fio's start-up is as dear as its run, so no process figure.
    const std::string whole_dir = out_dir("tune-fio-ring-out");
    const ran whole =
        run_tune(path, "-s 1M -b 256K -q 4 -p 1 -r 1 --warm --vs-fio", whole_dir, "tune-fio-ring");
    BOOST_TEST_REQUIRE(whole.status == 0, whole.err);
    const auto whole_rows = read_csv(whole_dir + "/runs.csv");
    for (std::size_t i = 1; i < whole_rows.size(); ++i) {
        if (whole_rows[i][method] == "fio") BOOST_TEST(whole_rows[i][process_cpu].empty());
    }
    for (const json& p : json::parse(read_text(whole_dir + "/summary.json"))["points"])
        BOOST_TEST(!p.contains("process_cpu_ratio_to_fio"));
}

// fio at its best for io_uring registers its buffers and file; libaio has no such setup.
BOOST_AUTO_TEST_CASE(fio_at_its_best_registers_buffers_and_files_on_io_uring_only) {
    bench::run_config c;
    c.path = "/tmp/x";
    c.block_size = 65536;
    c.queue_depth = 4;
    c.backend = support::backend_kind::io_uring;
    const auto has = [](const std::vector<std::string>& command, const char* flag) {
        return std::find(command.begin(), command.end(), flag) != command.end();
    };
    const auto best = bench::fio_command("fio", c, 1 << 20, bench::fio_setup::best);
    BOOST_TEST(has(best, "--fixedbufs"));
    BOOST_TEST(has(best, "--registerfiles"));
    BOOST_TEST(!has(bench::fio_command("fio", c, 1 << 20), "--fixedbufs"));
    c.backend = support::backend_kind::libaio;
    BOOST_TEST((bench::fio_command("fio", c, 1 << 20, bench::fio_setup::best) ==
                bench::fio_command("fio", c, 1 << 20)));
}

BOOST_AUTO_TEST_CASE(tune_vs_fio_on_io_uring_reports_fio_at_its_best_beside_it) {
    if (bench::find_program("fio").empty()) {
        nvmeio_test::skip("the comparison with fio not tested: fio is not installed");
        return;
    }
    if (!nvmeio::io_uring_supported()) {
        nvmeio_test::skip(
            "the comparison with fio on io_uring not tested: the kernel refuses io_uring");
        return;
    }
    nvmeio_test::temp_path path("tune-fio-best");
    const std::string dir = out_dir("tune-fio-best-out");
    const ran r = run_tune(path, "-s 4M -b 64K -q 4 -p 1 -r 1 --warm --vs-fio --backend io_uring",
                           dir, "tune-fio-best");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    BOOST_TEST(r.out.find("--fixedbufs --registerfiles") != std::string::npos, r.out);
    const auto rows = read_csv(dir + "/runs.csv");
    const std::size_t method = column(rows[0], "method"), bytes = column(rows[0], "bytes");
    std::size_t best_rows = 0;
    for (std::size_t i = 1; i < rows.size(); ++i) {
        if (rows[i][method] != "fio-best") continue;
        ++best_rows;
        BOOST_TEST(rows[i][bytes] == "4194304");
    }
    BOOST_TEST(best_rows == 2u);  // read and write
    const json doc = json::parse(read_text(dir + "/summary.json"));
    BOOST_TEST_REQUIRE(!doc["points"].empty());
    for (const json& p : doc["points"]) {
        BOOST_TEST_REQUIRE(p.contains("ratio_to_fio_best"));
        BOOST_TEST(p["ratio_to_fio_best"].get<double>() ==
                       p["gb_per_s"]["median"].get<double>() /
                           p["fio_best_gb_per_s"]["median"].get<double>(),
                   boost::test_tools::tolerance(1e-9));
        BOOST_TEST(p.contains("ratio_to_fio"));
    }
}

// --help promises that write runs write the first --size bytes back unchanged: fio's write runs
// too (their bytes are fio's own), whichever runs last, and reads between them. The seed orders
// a fio write last.
BOOST_AUTO_TEST_CASE(tune_vs_fio_write_runs_leave_the_file_content_unchanged) {
    if (bench::find_program("fio").empty()) {
        nvmeio_test::skip("the comparison with fio not tested: fio is not installed");
        return;
    }
    nvmeio_test::temp_path path("tune-fio-write");
    std::vector<unsigned char> original = nvmeio_test::pattern(2 << 20, 11);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    for (const char* seed : {"1", "2", "3"}) {
        const std::string dir = out_dir(std::string("tune-fio-write-out") + seed);
        const ran r = run_tune(
            path,
            std::string("-s 2M -b 256K -q 4 -p 1 -r 2 --ops read,write --vs-fio --seed ") + seed,
            dir, "tune-fio-write");
        BOOST_TEST_REQUIRE(r.status == 0, r.err);
        BOOST_TEST(nvmeio_test::slurp(path.str()) == original, "seed " << seed);
    }
}

BOOST_AUTO_TEST_CASE(bench_never_overwrites_an_existing_file_that_is_too_short) {
    nvmeio_test::temp_path path("bench-short");
    const std::vector<unsigned char> original = nvmeio_test::pattern(65536, 3);
    nvmeio_test::spew(path.str(), original.data(), original.size());
    const ran r =
        run(quoted(tool("NVMEIO_BENCH")) + " -f " + quoted(path.str()) + " -s 1M -b 64K --warm",
            "bench-short");
    BOOST_TEST(r.status != 0);
    BOOST_TEST(r.err.find("65536 bytes") != std::string::npos, r.err);
    BOOST_TEST(nvmeio_test::slurp(path.str()) == original);
}

// ------------------------------------------------------------------ silly command-line values

namespace {

struct silly_case {
    const char* program;  // environment variable naming the program
    std::string args;     // its arguments ({F}: a fresh scratch path, {D}: the scratch folder)
    const char* flag;     // what the message must name
};

std::string expand(std::string args, const std::string& file) {
    for (std::size_t at; (at = args.find("{F}")) != std::string::npos;)
        args.replace(at, 3, quoted(file));
    for (std::size_t at; (at = args.find("{D}")) != std::string::npos;)
        args.replace(at, 3, quoted(nvmeio_test::scratch_dir()));
    return args;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_silly_command_line_value_exits_2_naming_the_flag) {
    const char* bench_tool = "NVMEIO_BENCH";
    const char* tune = "NVMEIO_TUNE";
    const char* demo = "NVMEIO_PROGRAM_NVMEIO_DEMO";
    const char* write_verify = "NVMEIO_PROGRAM_WRITE_VERIFY";
    const char* read_validate = "NVMEIO_PROGRAM_READ_VALIDATE";
    const char* make_model = "NVMEIO_PROGRAM_MAKE_MODEL";
    const char* load_model = "NVMEIO_PROGRAM_LOAD_MODEL";
    const char* gpu_load = "NVMEIO_PROGRAM_GPU_LOAD";
    const char* kv_offload = "NVMEIO_PROGRAM_KV_OFFLOAD";
    const char* swap_optimizer = "NVMEIO_PROGRAM_SWAP_OPTIMIZER";
    const char* parallel_bench = "NVMEIO_PROGRAM_PARALLEL_BENCH";
    const char* batch_bench = "NVMEIO_PROGRAM_BATCH_BENCH";
    const char* compare_bench = "NVMEIO_PROGRAM_COMPARE_BENCH";
    const char* kv_blocks = "NVMEIO_PROGRAM_KV_BLOCKS";
    const std::vector<silly_case> cases = {
        {bench_tool, "-f {F} -s -1", "--size"},
        {bench_tool, "-f {F} -s 1M --spin -1", "--spin"},
        {bench_tool, "-f {F} -s 1M --spin 1000001", "--spin"},
        {load_model, "{F} --spin 1e9", "--spin"},
        {bench_tool, "-f {F} -s 0", "--size"},
        {bench_tool, "-f {F} -s 1X", "--size"},
        {bench_tool, "-f {F} -s 1.5G", "--size"},
        {bench_tool, "-f {F} -s 99999999999999999999", "--size"},
        {bench_tool, "-f {F} -s 16383P", "--size"},
        {bench_tool, "-f {F} -s 1P", "--size"},
        {bench_tool, "-f {F}", "--size"},
        {bench_tool, "-s 1M", "--file"},
        {bench_tool, "-f /dev/null -s 1M --warm", "--file"},
        {bench_tool, "-f {D} -s 1M --warm", "--file"},
        {bench_tool, "-f {F} -s 1M -b 0", "--block-size"},
        {bench_tool, "-f {F} -s 1M -b 2G", "--block-size"},
        {bench_tool, "-f {F} -s 1M -b -4096", "--block-size"},
        {bench_tool, "-f {F} -s 1M -b 1000 --warm", "--block-size"},
        {bench_tool, "-f {F} -s 1M -q 0", "--queue-depth"},
        {bench_tool, "-f {F} -s 1M -q -1", "--queue-depth"},
        {bench_tool, "-f {F} -s 1M -q abc", "--queue-depth"},
        {bench_tool, "-f {F} -s 1M -q 65537", "--queue-depth"},
        {bench_tool, "-f {F} -s 1M -q 4294967297", "--queue-depth"},
        {bench_tool, "-f {F} -s 1M -p 0", "--threads"},
        {bench_tool, "-f {F} -s 1M -p 1025", "--threads"},
        {bench_tool, "-f {F} -s 1M -n 0", "--loops"},
        {bench_tool, "-f {F} -s 1M -w -1", "--warmup"},
        {bench_tool, "-f {F} -s 1M --op delete", "--op"},
        {bench_tool, "-f {F} -s 1M --strategy fast", "--strategy"},
        {bench_tool, "-f {F} -s 1M --submit many", "--submit"},
        {bench_tool, "-f {F} -s 1M --warm --ring --validate", "--validate"},
        {bench_tool, "-f {F} -s 1M -b 3K --warm --ring", "--size"},
        {bench_tool, "-f {F} -s 1M --warm --ring --fresh-buffer", "--ring"},
        {tune, "-f {F} -s 1M --ring --fresh-buffer", "--ring"},
        {bench_tool, "-f {F} -s 1M --backend spdk", "--backend"},
        {bench_tool, "-f {F} -s 1M --huge-pages maybe", "--huge-pages"},
        {tune, "-f {F} -s 1M -b 0,64K --warm", "--block-sizes"},
        {tune, "-f {F} -s 1M -b 64K,-1 --warm", "--block-sizes"},
        {tune, "-f {F} -s 1M -b 64K,1000 --warm", "--block-sizes"},
        {tune, "-f {F} -s 1M -b 64K -q 4,0 --warm", "--queue-depths"},
        {tune, "-f {F} -s 1M -b 64K --warm --pin-once maybe --backend io_uring", "--pin-once"},
        {tune, "-f {F} -s 1M -b 64K --warm --pin-once both", "--pin-once"},  // libaio
        {tune, "-f {F} -s 1M -b 64K --warm --single-issuer off", "--single-issuer"},
        {tune, "-f {F} -s 1M -b 64K -p 1,0 --warm", "--threads"},
        {tune, "-f {F} -s 1M -b 64K -r 0 --warm", "--repeats"},
        {tune, "-f {F} -s 1M -b 64K --spins 0,x --warm", "--spins"},
        {tune, "-f {F} -s 1M -b 64K --spins 2000000 --warm", "--spins"},
        {tune, "-f {F} -s 1M -b 64K --budget -1 --warm", "--budget"},
        {tune, "-f {F} -s 1M -b 64K --budget nan --warm", "--budget"},
        {tune, "-f {F} -s 1M -b 64K --pause inf --warm", "--pause"},
        {tune, "-f {F} -s 1M -b 64K --ops read,erase --warm", "--ops"},
        {tune, "-f {F} -s 1M -b 64K --overlap maybe --warm", "--overlap"},
        {tune, "-f {F} -s 1M -b 64K --single-submit 2 --warm", "--single-submit"},
        {tune, "-f {F} -s 3M -b 2M -p 1 --warm", "--size"},
        {tune, "-f {F} -s 1M -b 64K --seed -1 --warm", "--seed"},
        {tune, "-f {F} -s 1M -b 64K -p 1 --warm -o /proc/no/such/dir", "--out-dir"},
        {demo, "--file {F} --size -1", "--size"},
        {demo, "--file {F} --size 0", "--size"},
        {demo, "--file {F} --size 1P", "--size"},
        {demo, "--file {F} --rounds 0", "--rounds"},
        {demo, "--file {F} --block-size 3G", "--block-size"},
        {write_verify, "{F} --size -1", "--size"},
        {write_verify, "{F} --size 1X", "--size"},
        {write_verify, "{F} --size 99999999999999999999", "--size"},
        {write_verify, "{F} --size 1P", "--size"},
        {write_verify, "{F} --size 4096 -q 0", "--queue-depth"},
        {write_verify, "{F} --size 4096 --block-size 0", "--block-size"},
        {write_verify, "{F} --size 4096 --block-size 1000", "--block-size"},
        {write_verify, "{F} --size 4096 --direct maybe", "--direct"},
        {write_verify, "{F} --size 4096 --pin-once maybe", "--pin-once"},
        {write_verify, "{F} --size 4096 --strategy x", "--strategy"},
        {write_verify, "{F}", "--size"},
        {read_validate, "{F} -q abc", "--queue-depth"},
        {read_validate, "{F} --backend x", "--backend"},
        {make_model, "{F} --format zip", "--format"},
        {make_model, "{F} --size 0", "--size"},
        {make_model, "{F} --tensors 0", "--tensors"},
        {make_model, "{F} --tensors 99999999999", "--tensors"},
        {make_model, "{F} --seed -1", "--seed"},
        {make_model, "{F} --alignment 48", "--alignment"},
        {make_model, "{F} --gguf-version 1", "--gguf-version"},
        {load_model, "{F} -q 0", "--queue-depth"},
        {load_model, "{F} --rounds 0", "--rounds"},
        {load_model, "{F} --method fast", "--method"},
        {load_model, "{F} --threads 0", "--threads"},
        {load_model, "{F} --staging-size 1000", "--staging-size"},
        {load_model, "{F} --staging-buffers 0", "--staging-buffers"},
        {load_model, "{F} --generate zip", "--generate"},
        {load_model, "{F} --generate gguf --size -1", "--size"},
        {load_model, "{F} --generate gguf --alignment 48", "--alignment"},
        {load_model, "{F} --generate gguf --block-size 1000", "--block-size"},
        {gpu_load, "{F} --device -1", "--device"},
        {gpu_load, "{F} --slots 0", "--slots"},
        {gpu_load, "{F} --slot-size 1000", "--slot-size"},
        {gpu_load, "{F} --threads 0", "--threads"},
        {gpu_load, "{F} --generate zip", "--generate"},
        {gpu_load, "{F} --generate gguf --alignment 48", "--alignment"},
        {kv_offload, "{F} --layers 0", "--layers"},
        {kv_offload, "{F} --kv-block 5000", "--kv-block"},
        {kv_offload, "{F} --kv-block -1", "--kv-block"},
        {kv_offload, "{F} --compute -1", "--compute"},
        {kv_offload, "{F} --compute nan", "--compute"},
        {kv_offload, "{F} --method x", "--method"},
        {kv_offload, "{F} --layers 4096 --sequences 1048576 --blocks-per-sequence 1048576",
         "--layers"},
        {swap_optimizer, "{F} --workers 0", "--workers"},
        {swap_optimizer, "{F} --files 0", "--files"},
        {swap_optimizer, "{F} --elements 1000", "--elements"},
        {swap_optimizer, "{F} --buffers 0", "--buffers"},
        {swap_optimizer, "{F} --adam-passes abc", "--adam-passes"},
        {swap_optimizer, "{F} --partitions 1048576 --elements 17179869184", "--partitions"},
        {parallel_bench, "--dir {D} --size -1", "--size"},
        {parallel_bench, "--dir {D} --mode x", "--mode"},
        {parallel_bench, "--dir {D} --files 0", "--files"},
        {batch_bench, "--dir {D} --count 0", "--count"},
        {batch_bench, "--dir {D} --min 1X", "--min"},
        {batch_bench, "--dir {D} --max 0", "--max"},
        {batch_bench, "--dir {D} --threads 0", "--threads"},
        {batch_bench, "--dir {D} --min 8M --max 4M", "--min"},
        {kv_blocks, "--file {F} --blocks 0", "--blocks"},
        {kv_blocks, "--file {F} --block-size 1X", "--block-size"},
        {kv_blocks, "--file {F} --op copy", "--op"},
        {kv_blocks, "--file {F} --method calls --memory unaligned", "--memory"},
        {kv_blocks, "--file {F} --loops 0", "--loops"},
        {kv_blocks, "--file {F} --block-size 6K", "--block-size"},
        {kv_blocks, "--blocks 4", "--file"},
        {compare_bench, "--rounds 0", "--rounds"},
        {compare_bench, "--size -1", "--size"},
        {compare_bench, "--small-size 1X", "--small-size"},
    };
    std::size_t tried = 0;
    for (const silly_case& c : cases) {
        const char* program = std::getenv(c.program);
        if (program == nullptr || *program == '\0') {
            // tests/CMakeLists.txt names every program this build has; say which it has not.
            nvmeio_test::skip(std::string("not built here, its cases not tried: ") + c.program);
            continue;
        }
        ++tried;
        nvmeio_test::temp_path path("silly");
        const std::string command = quoted(tool(c.program)) + " " + expand(c.args, path.str());
        const ran r = run(command, "silly");
        BOOST_TEST(r.status == 2, command << "\n  exit " << r.status << ", stderr: " << r.err);
        BOOST_TEST(r.err.find(c.flag) != std::string::npos,
                   command << "\n  stderr does not name " << c.flag << ": " << r.err);
        BOOST_TEST(r.err.find("terminate called") == std::string::npos, command);
        BOOST_TEST(nvmeio_test::file_size(path.str()) == ~0ull,
                   command << "\n  created the file although its command line was refused");
    }
    BOOST_TEST(tried >= 40u);  // nvmeio-bench's and nvmeio-tune's cases at least
}

// ------------------------------------------------------------------------------ block devices

namespace {

// A 16 MiB loop device with 4 KiB sectors holding pattern(size, 21), or a skip saying why not.
struct device_fixture {
    static constexpr std::uint64_t size = 16u << 20;
    nvmeio_test::loop_device device{size, 4096, 21};
    bool usable() const {
        if (device.path().empty())
            nvmeio_test::skip("block-device cases not run: no loop device: " + device.why_not());
        return !device.path().empty();
    }
    bool unchanged() const {
        return nvmeio_test::slurp(device.image()) == nvmeio_test::pattern(size, 21);
    }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(bench_reads_a_block_device_whole_and_validates_it, device_fixture) {
    if (!usable()) return;
    const ran r = run(quoted(tool("NVMEIO_BENCH")) + " -f " + device.path() +
                          " -b 256K -q 4 -p 2 -n 1 -w 0 --warm --validate --json",
                      "bench-device");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(r.out);
    BOOST_TEST(doc["target_kind"] == "block device");
    BOOST_TEST(doc["config"]["size"] == size);  // from file::size(), not st_size
    BOOST_TEST(doc["file_created"] == false);
    BOOST_TEST(doc["validation"] == "passed");
    BOOST_TEST(doc["loops"][0]["bytes"] == size);
}

BOOST_FIXTURE_TEST_CASE(tools_refuse_to_write_a_block_device_unless_told, device_fixture) {
    if (!usable()) return;
    const std::string dev = device.path();
    const std::string dir = out_dir("tune-device-out");
    for (const std::string& command :
         {quoted(tool("NVMEIO_BENCH")) + " --op write -f " + dev + " -b 256K -q 4",
          quoted(tool("NVMEIO_TUNE")) + " -f " + dev + " -s 16M -b 1M -q 4 -p 1 -r 1 --warm -o " +
              quoted(dir)}) {
        const ran r = run(command, "device-write");
        BOOST_TEST(r.status == 2, command << ": " << r.err);
        BOOST_TEST(r.err.find("--allow-device-write") != std::string::npos, r.err);
    }
    if (const char* write_verify = std::getenv("NVMEIO_PROGRAM_WRITE_VERIFY");
        write_verify && *write_verify) {
        const ran r = run(quoted(write_verify) + " " + dev + " --size 4096", "device-write-verify");
        BOOST_TEST(r.status == 2, r.err);
        BOOST_TEST(r.err.find("block device") != std::string::npos, r.err);
    }
    BOOST_TEST(unchanged());

    // A block size that O_DIRECT could take elsewhere but not on 4 KiB sectors.
    const ran odd =
        run(quoted(tool("NVMEIO_BENCH")) + " -f " + dev + " -b 2K -q 4 --warm", "device-odd-block");
    BOOST_TEST(odd.status == 2, odd.err);
    BOOST_TEST(odd.err.find("--block-size") != std::string::npos, odd.err);
    BOOST_TEST(odd.err.find("4096") != std::string::npos, odd.err);

    // Told: the write runs write back the device's own bytes.
    const ran r = run(quoted(tool("NVMEIO_BENCH")) + " --op write -f " + dev +
                          " -b 256K -q 4 -p 2 -n 2 -w 0 --allow-device-write --json",
                      "device-write-allowed");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    BOOST_TEST(json::parse(r.out)["loops"][1]["bytes"] == size);
    BOOST_TEST(unchanged());
}

BOOST_FIXTURE_TEST_CASE(tune_and_read_validate_run_on_a_block_device, device_fixture) {
    if (!usable()) return;
    const std::string dir = out_dir("tune-device-read-out");
    const ran r = run(quoted(tool("NVMEIO_TUNE")) + " -f " + device.path() +
                          " -s 8M -b 1M -q 4 -p 1,2 -r 1 --ops read --warm -o " + quoted(dir),
                      "tune-device");
    BOOST_TEST_REQUIRE(r.status == 0, r.err);
    const json doc = json::parse(read_text(dir + "/summary.json"));
    BOOST_TEST(doc["parameters"]["target_kind"] == "block device");
    BOOST_TEST(doc["runs_done"] == 8);  // 2 threads x 2 overlap x 2 submit
    if (const char* read_validate = std::getenv("NVMEIO_PROGRAM_READ_VALIDATE");
        read_validate && *read_validate) {
        const ran v = run(quoted(read_validate) + " " + device.path() + " -b 64K -q 8",
                          "read-validate-device");
        BOOST_TEST(v.status == 0, v.err);
        BOOST_TEST(v.out.find("validated 16777216 bytes: equal") != std::string::npos, v.out);
    }
}

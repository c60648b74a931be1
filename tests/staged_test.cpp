#define BOOST_TEST_MODULE staged
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <nvmeio/async.hpp>
#include <nvmeio/cuda.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/staged.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "delayed_copy_engine.hpp"
#include "offset_fault_backend.hpp"
#include "queued_cuda_driver.hpp"
#include "support/simulated_link.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::delayed_copy_engine;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t slot = 4096;  // K = 2 slots of 4 KiB: every load wraps around many times

// Tensors laid end to end over two files (a sharded model): sizes from 0 to several slots,
// ragged, each with its own place in one destination area; the plan lists them shuffled.
struct model {
    temp_path paths[2]{temp_path{"staged_0"}, temp_path{"staged_1"}};
    std::vector<staged_range> ranges;
    std::size_t destination_size = 0;
    std::uint64_t sizes[2] = {0, 0};
};

std::unique_ptr<model> make_model(std::uint64_t seed, std::size_t tensors) {
    auto made = std::make_unique<model>();
    model& m = *made;
    std::mt19937_64 random(seed);
    for (std::size_t i = 0; i < tensors; ++i) {
        const std::size_t f = i % 2;
        std::size_t length = random() % 3 == 0 ? random() % 300 : random() % (3 * slot + 777);
        if (i % 7 == 3) length = 0;  // zero-size tensors
        m.ranges.push_back({f, m.sizes[f], length, 0, false});
        m.sizes[f] += length;
        m.destination_size += length;
    }
    // A last tensor of file 1 reaching past file 0's end (the failure test aims there).
    const std::size_t last = m.sizes[0] + 2 * slot + 100;
    m.ranges.push_back({1, m.sizes[1], last, 0, false});
    m.sizes[1] += last;
    m.destination_size += last;
    m.sizes[0] += 100;  // bytes after the last tensor that nobody asks for
    for (std::size_t f = 0; f < 2; ++f)
        nvmeio_test::spew_pattern(m.paths[f].str(), m.sizes[f], 10 + f);
    std::shuffle(m.ranges.begin(), m.ranges.end(), random);
    return made;
}

// The destination bytes range i must hold.
bool holds_its_bytes(const std::vector<unsigned char>& file0,
                     const std::vector<unsigned char>& file1, const unsigned char* destination,
                     const staged_range& r) {
    const auto& source = r.file == 0 ? file0 : file1;
    return r.length == 0 || std::memcmp(destination, source.data() + r.offset, r.length) == 0;
}

template <class Engine, class Context>
void load_and_check(Context& context, Engine& engine, std::uint64_t seed, unsigned slots = 2) {
    const auto made = make_model(seed, 40);
    model& m = *made;
    // Each range's place: its file offset says which tensor it is.
    std::vector<unsigned char> destination(m.destination_size + 1);
    std::vector<std::size_t> place(m.ranges.size());
    {
        std::size_t next = 0;
        for (std::size_t i = 0; i < m.ranges.size(); ++i) {
            place[i] = next;
            next += m.ranges[i].length;
        }
    }
    for (std::size_t i = 0; i < m.ranges.size(); ++i)
        m.ranges[i].address = reinterpret_cast<std::uintptr_t>(destination.data() + place[i]);
    if constexpr (std::is_same_v<Engine, delayed_copy_engine>) {
        engine.count_into(reinterpret_cast<std::uintptr_t>(destination.data()), m.destination_size);
    }
    const auto file0 = nvmeio_test::slurp(m.paths[0].str());
    const auto file1 = nvmeio_test::slurp(m.paths[1].str());
    file f0(m.paths[0].str(), open_mode::read, direct_io::on);
    file f1(m.paths[1].str(), open_mode::read, direct_io::on);
    staging_ring<Engine> ring(engine, {slots, slot});
    std::vector<unsigned> reported(m.ranges.size(), 0);
    const staged_outcome outcome =
        staged_read(context, ring, {&f0, &f1}, m.ranges, [&](std::size_t i) {
            ++reported[i];
            // Reported only once its bytes are there.
            BOOST_TEST(holds_its_bytes(file0, file1, destination.data() + place[i], m.ranges[i]),
                       "range " << i << " reported before its bytes arrived");
        });
    for (std::size_t i = 0; i < m.ranges.size(); ++i) {
        BOOST_TEST(reported[i] == 1u, "range " << i << " reported " << reported[i] << " times");
        BOOST_TEST(holds_its_bytes(file0, file1, destination.data() + place[i], m.ranges[i]),
                   "range " << i << " holds the wrong bytes");
    }
    // Every file byte of the tensors moved once: the aligned supersets, not a block more.
    BOOST_TEST(outcome.file_bytes == (m.sizes[0] - 100) + m.sizes[1]);
    if constexpr (std::is_same_v<Engine, delayed_copy_engine>) {
        std::size_t wrong = 0;
        for (unsigned c : engine.counts())
            wrong += c != 1;
        BOOST_TEST(wrong == 0u, wrong << " destination bytes not written exactly once");
        BOOST_TEST(engine.in_flight() == 0u);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(planning)

// What a plan knows of a file index: O_DIRECT unit `unit` (buffered when 1), `size` bytes, and
// the file it names, `file` (its own index unless two indices name one file).
detail::staged_file fake_file(std::size_t file, std::size_t unit, std::uint64_t size) {
    detail::staged_file f;
    f.identity = {file_kind::regular, 1, file};
    f.path = "file" + std::to_string(file);
    f.unit = unit;
    f.direct = unit > 1;
    f.size = size;
    return f;
}

BOOST_AUTO_TEST_CASE(adjacent_ranges_share_windows_and_every_byte_is_planned_once) {
    // Three ranges end to end from offset 100 in a file of unit 512, slots of 1024 bytes.
    const std::vector<staged_range> ranges = {
        {0, 100, 1000, 1, false}, {0, 1100, 0, 1, false}, {0, 1100, 2000, 1, false}};
    const auto plan = detail::plan_staged(operation::read, 1, ranges, 1024,
                                          [](std::size_t i) { return fake_file(i, 512, 4000); });
    BOOST_TEST(plan.empty_ranges == std::vector<std::size_t>{1});
    BOOST_REQUIRE(plan.windows.size() == 4u);  // [0, 3100) in windows of 1024
    BOOST_TEST(plan.windows[0].offset == 0u);
    BOOST_TEST(plan.windows[3].offset == 3072u);
    BOOST_TEST(plan.windows[3].length == 28u);
    std::vector<std::size_t> covered(3100, 0);
    for (const auto& w : plan.windows) {
        for (std::size_t p = w.first_piece; p < w.end_piece; ++p) {
            const auto& piece = plan.pieces[p];
            BOOST_TEST(ranges[piece.range].offset + piece.from == w.offset + piece.at);
            for (std::size_t b = 0; b < piece.length; ++b)
                ++covered[w.offset + piece.at + b];
        }
    }
    for (std::size_t b = 0; b < 3100; ++b)
        BOOST_TEST_REQUIRE(covered[b] == (b >= 100 ? 1u : 0u), "byte " << b);
    BOOST_TEST(plan.pieces_of_range[0] == 2u);  // [100, 1100): windows 0 and 1
    BOOST_TEST(plan.pieces_of_range[2] == 3u);
}

BOOST_AUTO_TEST_CASE(ranges_apart_are_separate_runs_and_ranges_touching_one_unit_are_one) {
    const std::vector<staged_range> ranges = {
        {0, 0, 10, 1, false}, {0, 600, 10, 1, false}, {0, 5000, 10, 1, false}};
    const auto plan = detail::plan_staged(operation::read, 1, ranges, 4096,
                                          [](std::size_t i) { return fake_file(i, 512, 8192); });
    // 0..10 and 600..610 touch neighbouring 512-byte units: one run; 5000 starts another.
    BOOST_REQUIRE(plan.windows.size() == 2u);
    BOOST_TEST(plan.windows[0].length == 610u);
    BOOST_TEST(plan.windows[1].offset == 4608u);
    BOOST_TEST(!plan.windows[0].covered);
}

BOOST_AUTO_TEST_CASE(indices_naming_one_file_are_one_file_to_the_plan) {
    // Files 0 and 2 are one file, 1 another; unit 512, slots of 4096.
    const auto plan = [&](operation op, const std::vector<staged_range>& ranges) {
        return detail::plan_staged(op, 3, ranges, 4096, [](std::size_t i) {
            return fake_file(i == 2 ? 0 : i, 512, 8192);
        });
    };
    // Reads and writes through 0 and 2 merge into one run (the shared unit moved once), moved
    // through index 0; file 1's bytes at the same offsets are a run of their own.
    for (const operation op : {operation::read, operation::write}) {
        const auto merged = plan(op, {{2, 200, 100, 1, false},
                                      {1, 0, 100, 1, false},
                                      {0, 0, 100, 1, false},
                                      {2, 5000, 10, 1, false}});
        BOOST_REQUIRE(merged.windows.size() == 3u);
        BOOST_TEST(merged.windows[0].file == 0u);
        BOOST_TEST(merged.windows[0].offset == 0u);
        BOOST_TEST(merged.windows[0].length == 300u);
        BOOST_TEST(merged.windows[0].end_piece - merged.windows[0].first_piece == 2u);
        BOOST_TEST(merged.windows[1].file == 0u);
        BOOST_TEST(merged.windows[1].offset == 4608u);
        BOOST_TEST(merged.windows[2].file == 1u);
    }
    using nvmeio_test::message_of;
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::write, {{0, 0, 100, 1, false}, {2, 50, 100, 1, false}});
        }),
        "range 1 (100 bytes at offset 50 of file 2) overlaps range 0 (100 bytes at offset 0 of "
        "file 0), in the same file"));
    BOOST_CHECK_NO_THROW(plan(operation::write, {{0, 0, 100, 1, false}, {1, 50, 100, 1, false}}));
}

BOOST_AUTO_TEST_CASE(
    a_file_moves_through_the_lowest_index_a_range_names_and_its_handles_must_be_alike) {
    // Files 0 and 2 are one file, 1 another. Index 0 is buffered and read-only, index 2 O_DIRECT
    // (unit 512) and writable; `asked` counts what the plan asks of each index.
    std::vector<unsigned> asked(3, 0);
    const auto plan = [&](operation op, const std::vector<staged_range>& ranges,
                          std::size_t slot_size = 4096) {
        return detail::plan_staged(op, 3, ranges, slot_size, [&](std::size_t i) {
            ++asked.at(i);
            detail::staged_file f = fake_file(i == 2 ? 0 : i, i == 0 ? 1 : 512, 8192);
            f.writable = i != 0;
            return f;
        });
    };
    using nvmeio_test::message_of;
    // Index 0 unused: the file's runs go through index 2, and index 0 is never asked about.
    for (const operation op : {operation::read, operation::write}) {
        std::fill(asked.begin(), asked.end(), 0);
        const auto through_2 = plan(op, {{2, 0, 100, 1, false},
                                         {0, 0, 0, 1, false},
                                         {1, 0, 100, 1, false},
                                         {2, 300, 100, 1, false}});
        BOOST_REQUIRE(through_2.windows.size() == 2u);
        BOOST_TEST(through_2.windows[0].file == 1u);
        BOOST_TEST(through_2.windows[1].file == 2u);
        BOOST_TEST(asked == (std::vector<unsigned>{0, 1, 1}));
    }
    // Both used: refused naming both, for a read (a write is refused first for index 0).
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::read, {{2, 0, 100, 1, false}, {0, 200, 100, 1, false}});
        }),
        "staged read: files 0 and 2 are one file ('file0') opened differently (file 0 buffered, "
        "file 2 O_DIRECT (unit 512)): list one handle for it"));
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::write, {{2, 0, 100, 1, false}, {0, 200, 100, 1, false}});
        }),
        "staged write: range 1 (100 bytes at offset 200 of file 0) goes to 'file0', which file 0 "
        "opened with open_mode::read"));
    // Alike but for the unit, or for uncached I/O: refused too.
    const auto unalike = [&](auto&& change) {
        return message_of<std::invalid_argument>([&] {
            detail::plan_staged(operation::read, 2, {{0, 0, 10, 1, false}, {1, 0, 10, 1, false}},
                                4096, [&](std::size_t i) {
                                    detail::staged_file f = fake_file(0, 512, 8192);
                                    if (i == 1) change(f);
                                    return f;
                                });
        });
    };
    BOOST_TEST(nvmeio_test::contains(
        unalike([](detail::staged_file& f) { f.unit = 4096; }),
        "files 0 and 1 are one file ('file0') opened differently (file 0 O_DIRECT (unit 512), "
        "file 1 O_DIRECT (unit 4096))"));
    BOOST_TEST(nvmeio_test::contains(unalike([](detail::staged_file& f) {
                                         f.direct = false;
                                         f.unit = 1;
                                         f.rw_flags = 0x80;
                                     }),
                                     "(file 0 O_DIRECT (unit 512), file 1 uncached)"));
    // The slot size is checked against the unit of the index the range names.
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::read, {{2, 0, 5, 1, false}}, 1000);
        }),
        "staged read: range 0 (5 bytes at offset 0 of file 2): slot size 1000 is not a multiple "
        "of file 2's O_DIRECT unit 512"));
}

BOOST_AUTO_TEST_CASE(bad_plans_are_refused_naming_the_range) {
    const auto plan = [](operation op, std::vector<staged_range> ranges, std::size_t slot_size) {
        return detail::plan_staged(op, 1, ranges, slot_size,
                                   [](std::size_t i) { return fake_file(i, 512, 1000); });
    };
    using nvmeio_test::message_of;
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::read, {{1, 0, 1, 1, false}}, 4096);
        }),
        "range 0 (1 bytes at offset 0 of file 1) names a file past the 1 given"));
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::read, {{0, 0, 1, 1, false}, {0, 999, 2, 1, false}}, 4096);
        }),
        "range 1 (2 bytes at offset 999 of file 0) ends past the file's 1000 bytes"));
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::read, {{0, ~std::uint64_t{0}, 2, 1, false}}, 4096);
        }),
        "ends past the largest file offset"));
    // A write near the largest offset: refused, not planned into windows without end.
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::write, {{0, ~std::uint64_t{0} - 10, 10, 1, false}}, 4096);
        }),
        "range 0 (10 bytes at offset 18446744073709551605 of file 0) ends past the largest file "
        "offset"));
    const auto last =
        detail::plan_staged(operation::write, 1, {{0, (std::uint64_t{1} << 63) - 11, 10, 1, false}},
                            4096, [](std::size_t i) { return fake_file(i, 512, 0); });
    BOOST_TEST(last.windows.size() == 1u);
    BOOST_TEST(nvmeio_test::contains(message_of<std::invalid_argument>([&] {
                                         plan(operation::read, {{0, 0, 5, 0, false}}, 4096);
                                     }),
                                     "null address"));
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            plan(operation::write, {{0, 0, 10, 1, false}, {0, 5, 10, 1, false}}, 4096);
        }),
        "range 1 (10 bytes at offset 5 of file 0) overlaps range 0 (10 bytes at offset 0 of file "
        "0), in the same file"));
    BOOST_TEST(
        nvmeio_test::contains(message_of<std::invalid_argument>([&] {
                                  plan(operation::read, {{0, 0, 5, 1, false}}, 1000);
                              }),
                              "slot size 1000 is not a multiple of file 0's O_DIRECT unit 512"));
    host_copy_engine engine;
    BOOST_TEST(nvmeio_test::contains(message_of<std::invalid_argument>([&] {
                                         staging_ring<host_copy_engine>(engine, {0, 4096});
                                     }),
                                     "slots must be at least 1"));
    BOOST_TEST(nvmeio_test::contains(message_of<std::invalid_argument>([&] {
                                         staging_ring<host_copy_engine>(engine, {2, 1000});
                                     }),
                                     "slot_size 1000"));
    BOOST_TEST(nvmeio_test::contains(
        message_of<std::invalid_argument>([&] {
            staging_ring<host_copy_engine>(
                engine, {4, std::numeric_limits<std::size_t>::max() / 4096 * 4096});
        }),
        "fit in memory"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE_TEMPLATE(reads_every_range_through_two_small_slots_with_the_host_engine,
                              Backend, backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    basic_aio_context<Backend> context({8, 4096});
    host_copy_engine engine;
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
        load_and_check(context, engine, seed);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(reads_every_byte_exactly_once_with_copies_that_complete_late, Backend,
                              backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    basic_aio_context<Backend> context({8, 4096});
    delayed_copy_engine engine;
    for (std::uint64_t seed = 4; seed <= 5; ++seed)
        load_and_check(context, engine, seed);
    BOOST_TEST(engine.attaches() == 2u);
    BOOST_TEST(engine.detaches() == 2u);
}

BOOST_AUTO_TEST_CASE(reads_through_a_parallel_context) {
    parallel_context context({3, {8, 4096}, 4096});
    delayed_copy_engine engine(std::chrono::microseconds{50});
    load_and_check(context, engine, 6);
}

BOOST_AUTO_TEST_CASE(a_plan_of_empty_ranges_only_reports_them_and_moves_nothing) {
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), 10, 1);
    file f(path.str(), open_mode::read, direct_io::on);
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    std::vector<std::size_t> reported;
    const auto outcome =
        staged_read(context, ring, {&f}, {{0, 3, 0, 0, false}, {0, 0, 0, 0, false}},
                    [&](std::size_t i) { reported.push_back(i); });
    BOOST_TEST(reported == (std::vector<std::size_t>{0, 1}));
    BOOST_TEST(outcome.windows == 0u);
}

BOOST_AUTO_TEST_CASE(
    a_failed_read_names_the_file_and_the_range_leaves_nothing_in_flight_and_the_ring_serves_again) {
    const auto made = make_model(7, 30);
    model& m = *made;
    std::vector<unsigned char> destination(m.destination_size + 1);
    std::size_t next = 0;
    for (auto& r : m.ranges) {
        r.address = reinterpret_cast<std::uintptr_t>(destination.data() + next);
        next += r.length;
    }
    // Fail the I/O holding the middle of the last range of file 1 (the fault backend fails
    // that offset in any file: it lies past file 0's end).
    std::size_t victim = 0;
    for (std::size_t i = 0; i < m.ranges.size(); ++i) {
        if (m.ranges[i].file == 1 && m.ranges[i].length > 0 &&
            (m.ranges[victim].file != 1 || m.ranges[i].offset > m.ranges[victim].offset)) {
            victim = i;
        }
    }
    const staged_range& bad = m.ranges[victim];
    BOOST_REQUIRE(bad.file == 1 && bad.length > 0);
    BOOST_REQUIRE(bad.offset + bad.length / 2 >= m.sizes[0]);
    file f0(m.paths[0].str(), open_mode::read, direct_io::on);
    file f1(m.paths[1].str(), open_mode::read, direct_io::on);
    basic_aio_context<nvmeio_test::offset_fault_backend> context({8, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    nvmeio_test::offset_fault_backend::fail_offset = bad.offset + bad.length / 2;
    bool thrown = false;
    try {
        (void)staged_read(context, ring, {&f0, &f1}, m.ranges);
    } catch (const staged_error& e) {
        thrown = true;
        BOOST_TEST((e.code() == std::errc::io_error));
        BOOST_TEST(e.path() == m.paths[1].str());
        // A range with bytes in the failed I/O.
        const staged_range& named = m.ranges.at(e.range());
        BOOST_TEST(named.file == 1u);
        BOOST_TEST(named.offset < e.offset() + e.length());
        BOOST_TEST(named.offset + named.length > e.offset());
        BOOST_TEST(nvmeio_test::contains(e.what(), m.paths[1].str()));
    }
    BOOST_TEST(thrown);
    BOOST_TEST(engine.in_flight() == 0u);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    // The same ring, the same context: a whole load.
    std::fill(destination.begin(), destination.end(), 0);
    (void)staged_read(context, ring, {&f0, &f1}, m.ranges);
    const auto file1 = nvmeio_test::slurp(m.paths[1].str());
    BOOST_TEST(std::memcmp(reinterpret_cast<const void*>(bad.address), file1.data() + bad.offset,
                           bad.length) == 0);
}

BOOST_AUTO_TEST_CASE(a_failure_names_a_range_in_the_failed_io_not_the_first_of_a_larger_slot) {
    // 16 ranges of 4 KiB in one 64 KiB slot, listed last block first, read in 4 KiB blocks: the
    // 11th block (range 5) fails; ranges 0-4 lie after it, and are not it.
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), 16 * 4096, 3);
    file f(path.str(), open_mode::read, direct_io::on);
    std::vector<unsigned char> destination(16 * 4096);
    std::vector<staged_range> ranges;
    for (std::size_t i = 0; i < 16; ++i) {
        ranges.push_back({0, (15 - i) * 4096, 4096,
                          reinterpret_cast<std::uintptr_t>(destination.data() + i * 4096), false});
    }
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, 16 * 4096});
    nvmeio_test::offset_fault_backend::fail_offset = 10 * 4096 + 5;
    std::size_t named = 99;
    try {
        (void)staged_read(context, ring, {&f}, ranges);
    } catch (const staged_error& e) {
        named = e.range();
    }
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(named == 5u);
}

BOOST_AUTO_TEST_CASE(a_failed_write_leaves_nothing_in_flight_and_the_ring_serves_again) {
    temp_path path("staged");
    std::vector<unsigned char> bytes = nvmeio_test::pattern(6 * slot + 9, 5);
    file out(path.str(), open_mode::write, direct_io::on);
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    const std::vector<staged_range> ranges = {
        {0, 0, bytes.size(), reinterpret_cast<std::uintptr_t>(bytes.data()), false}};
    nvmeio_test::offset_fault_backend::fail_offset = 3 * slot + 1;
    bool thrown = false;
    try {
        (void)staged_write(context, ring, {&out}, ranges);
    } catch (const staged_error& e) {
        thrown = true;
        BOOST_TEST(e.range() == 0u);
        BOOST_TEST(e.path() == path.str());
        BOOST_TEST(e.operation() == "write");
    }
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(thrown);
    BOOST_TEST(engine.in_flight() == 0u);
    (void)staged_write(context, ring, {&out}, ranges);
    BOOST_TEST(nvmeio_test::slurp(path.str()) == bytes);
}

BOOST_AUTO_TEST_CASE(a_ring_serves_one_run_at_a_time) {
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), 3 * slot, 6);
    file f(path.str(), open_mode::read, direct_io::on);
    std::vector<unsigned char> destination(3 * slot);
    const std::vector<staged_range> ranges = {
        {0, 0, 3 * slot, reinterpret_cast<std::uintptr_t>(destination.data()), false}};
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    {
        staged_run<aio_context, host_copy_engine> first(context, ring, {&f}, ranges,
                                                        operation::read);
        BOOST_TEST(nvmeio_test::contains(nvmeio_test::message_of<std::logic_error>([&] {
                                             staged_run<aio_context, host_copy_engine> second(
                                                 context, ring, {&f}, ranges, operation::read);
                                         }),
                                         "another transfer is using this ring"));
        // A run refused for a bad plan gives the ring back too.
        BOOST_TEST(nvmeio_test::contains(nvmeio_test::message_of<std::logic_error>(
                                             [&] { (void)staged_read(context, ring, {&f}, {}); }),
                                         "another transfer"));
    }
    BOOST_CHECK_THROW((void)staged_read(context, ring, {&f}, {{1, 0, 1, 1, false}}),
                      std::invalid_argument);
    (void)staged_read(context, ring, {&f}, ranges);
    BOOST_TEST(nvmeio_test::holds_pattern(destination.data(), destination.size(), 6));
}

BOOST_AUTO_TEST_CASE(a_file_that_shrank_after_the_plan_is_enodata_naming_the_range) {
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), 3 * slot, 2);
    file f(path.str(), open_mode::read, direct_io::on);
    std::vector<unsigned char> destination(3 * slot);
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    staged_run<aio_context, host_copy_engine> run(
        context, ring, {&f},
        {{0, 0, slot, reinterpret_cast<std::uintptr_t>(destination.data()), false},
         {0, slot, 2 * slot, reinterpret_cast<std::uintptr_t>(destination.data() + slot), false}},
        operation::read);
    BOOST_REQUIRE(::truncate(path.str().c_str(), slot + 10) == 0);
    bool thrown = false;
    try {
        while (run.pending())
            (void)run.advance();
    } catch (const staged_error& e) {
        thrown = true;
        BOOST_TEST((e.code() == std::errc::no_message_available));  // ENODATA
        BOOST_TEST(e.range() == 1u);
    }
    BOOST_TEST(thrown);
    BOOST_TEST(!run.pending());
}

namespace {

// Writes the model's ranges (every even one from host memory, the rest through `engine`) into
// a file that held other bytes, and checks the file: the ranges' bytes where they are, the
// file's old bytes in the gaps.
template <class Engine, class Context = aio_context>
void write_and_check(Engine& engine, std::uint64_t seed, Context* through = nullptr,
                     unsigned slots = 2) {
    std::mt19937_64 random(seed);
    temp_path path("staged");
    const std::size_t old_size = 9 * slot + 123;
    nvmeio_test::spew_pattern(path.str(), old_size, 99);
    std::vector<unsigned char> expected = nvmeio_test::slurp(path.str());
    std::vector<staged_range> ranges;
    std::vector<std::vector<unsigned char>> sources;
    std::uint64_t at = random() % 5000;
    for (int i = 0; i < 20; ++i) {
        const std::size_t length = random() % 4 == 0 ? 0 : random() % (2 * slot + 500);
        sources.push_back(nvmeio_test::pattern(length + 1, seed * 100 + i));
        ranges.push_back(
            {0, at, length, reinterpret_cast<std::uintptr_t>(sources.back().data()), i % 2 == 0});
        if (length != 0 && expected.size() < at + length) expected.resize(at + length, 0);
        std::memcpy(expected.data() + at, sources.back().data(), length);
        at += length + (random() % 3 == 0 ? random() % 9000 : 0);  // some gaps, some far
    }
    file out(path.str(), open_mode::read_write, direct_io::on);
    aio_context own({4, 4096});
    staging_ring<Engine> ring(engine, {slots, slot});
    std::shuffle(ranges.begin(), ranges.end(), random);
    staged_outcome outcome;
    if (through != nullptr) {
        outcome = staged_write(*through, ring, {&out}, ranges);
    } else {
        outcome = staged_write(own, ring, {&out}, ranges);
    }
    BOOST_TEST(outcome.windows > 2u);
    const std::vector<unsigned char> written = nvmeio_test::slurp(path.str());
    BOOST_REQUIRE(written.size() == expected.size());
    std::size_t wrong = 0;
    for (std::size_t b = 0; b < written.size(); ++b)
        wrong += written[b] != expected[b];
    BOOST_TEST(wrong == 0u, wrong << " bytes of the file wrong");
}

}  // namespace

BOOST_AUTO_TEST_CASE(writes_ranges_from_host_and_engine_memory_keeping_the_bytes_between_them) {
    host_copy_engine host;
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
        write_and_check(host, seed);
    delayed_copy_engine delayed;
    for (std::uint64_t seed = 4; seed <= 6; ++seed)
        write_and_check(delayed, seed);
}

// ---- several windows in flight: an async context ------------------------------------------

namespace {

// libaio, counting the contexts (one per async worker) with requests in flight at once, and
// reaping 10 ms late so that a window's I/O lasts long enough for the next to start beside it
// on a loaded machine (the two are submitted back to back).
class overlap_backend {
  public:
    static inline std::atomic<int> busy{0};
    static inline std::atomic<int> most_busy{0};

    explicit overlap_backend(unsigned queue_depth) : real_(queue_depth) {}

    int submit(const io_request* requests, std::size_t count) noexcept {
        const int rc = real_.submit(requests, count);
        if (rc > 0 && in_flight_ == 0) {
            const int now = ++busy;
            int seen = most_busy.load();
            while (now > seen && !most_busy.compare_exchange_weak(seen, now)) {
            }
        }
        if (rc > 0) in_flight_ += static_cast<std::size_t>(rc);
        return rc;
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const int rc = real_.reap(out, min, max, timeout);
        if (rc > 0) {
            in_flight_ -= static_cast<std::size_t>(rc);
            if (in_flight_ == 0) --busy;
        }
        return rc;
    }
    unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

  private:
    libaio_backend real_;
    std::size_t in_flight_ = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(reads_and_writes_with_several_windows_in_flight_are_exact) {
    async_context context({3, {8, 4096}});
    for (unsigned slots : {1u, 2u, 3u, 5u}) {
        BOOST_TEST_CONTEXT(slots << " slots") {
            delayed_copy_engine delayed(std::chrono::microseconds{100});
            load_and_check(context, delayed, 20 + slots, slots);
            host_copy_engine host;
            load_and_check(context, host, 30 + slots, slots);
            write_and_check(delayed, 40 + slots, &context, slots);
            write_and_check(host, 50 + slots, &context, slots);
        }
    }
}

BOOST_AUTO_TEST_CASE(an_async_context_has_two_windows_in_flight_and_an_aio_context_one) {
    temp_path path("staged");
    const std::vector<unsigned char> bytes = nvmeio_test::pattern(16 * slot, 5);
    nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    std::vector<unsigned char> memory(bytes.size());
    const std::vector<staged_range> ranges = {
        {0, 0, bytes.size(), reinterpret_cast<std::uintptr_t>(memory.data()), false}};
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {4, slot});
    for (const operation op : {operation::read, operation::write}) {
        BOOST_TEST_CONTEXT(to_string(op)) {
            file f(path.str(), open_mode::read_write, direct_io::on);
            overlap_backend::most_busy = 0;
            basic_async_context<overlap_backend> async({2, {4, 4096}});
            {
                staged_run<basic_async_context<overlap_backend>, host_copy_engine> run(
                    async, ring, {&f}, ranges, op);
                while (run.pending())
                    (void)run.advance();
            }
            BOOST_TEST(overlap_backend::most_busy.load() == 2);
            overlap_backend::most_busy = 0;
            basic_aio_context<overlap_backend> one({4, 4096});
            {
                staged_run<basic_aio_context<overlap_backend>, host_copy_engine> serial(
                    one, ring, {&f}, ranges, op);
                while (serial.pending())
                    (void)serial.advance();
            }
            BOOST_TEST(overlap_backend::most_busy.load() == 1);
            BOOST_TEST((memory == bytes));
        }
    }
}

BOOST_AUTO_TEST_CASE(the_simulated_link_holds_what_a_read_brought_and_gives_what_a_write_stores) {
    // The benchmarks' stand-in for a GPU: device addresses are offsets into its memory.
    temp_path in_path("staged"), out_path("staged");
    const std::vector<unsigned char> bytes = nvmeio_test::pattern(7 * slot + 300, 12);
    nvmeio_test::spew(in_path.str(), bytes.data(), bytes.size());
    async_context context({2, {4, 4096}});
    for (const double rate : {0.0, 50e6}) {
        BOOST_TEST_CONTEXT("at " << rate << " bytes/s") {
            nvmeio::support::simulated_link link(rate, bytes.size());
            staging_ring<nvmeio::support::simulated_link> ring(link, {3, slot});
            // Device address a is byte a % size of the stand-in (a plan refuses address 0).
            const std::uintptr_t base = bytes.size();
            const std::vector<staged_range> ranges = {
                {0, 1000, bytes.size() - 1000, base + 1000, false}, {0, 0, 1000, base, false}};
            file in(in_path.str(), open_mode::read, direct_io::on);
            (void)staged_read(context, ring, {&in}, ranges);
            BOOST_TEST(std::memcmp(link.stand_in(), bytes.data(), bytes.size()) == 0);
            std::reverse(link.stand_in(), link.stand_in() + bytes.size());
            file out(out_path.str(), open_mode::write, direct_io::on);
            (void)staged_write(context, ring, {&out}, ranges);
            out.close();
            const std::vector<unsigned char> written = nvmeio_test::slurp(out_path.str());
            BOOST_TEST((written == std::vector<unsigned char>(bytes.rbegin(), bytes.rend())));
            BOOST_TEST(link.bytes() == 2 * bytes.size());
        }
    }
}

BOOST_AUTO_TEST_CASE(a_written_file_that_grows_ends_at_the_last_range) {
    temp_path path("staged");
    std::vector<unsigned char> bytes = nvmeio_test::pattern(3 * slot + 5, 3);
    file out(path.str(), open_mode::write, direct_io::on);
    aio_context context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    (void)staged_write(context, ring, {&out},
                       {{0, 0, 100, reinterpret_cast<std::uintptr_t>(bytes.data()), true},
                        {0, 100, bytes.size() - 100,
                         reinterpret_cast<std::uintptr_t>(bytes.data() + 100), false}});
    BOOST_TEST(nvmeio_test::slurp(path.str()) == bytes);
}

// The observer sees each range's bytes in file order: a write's before they are in the file, a
// read's once they have arrived (each checked against what the file holds).
BOOST_AUTO_TEST_CASE(the_observer_sees_each_ranges_bytes_in_order) {
    for (const operation op : {operation::write, operation::read}) {
        BOOST_TEST_CONTEXT(to_string(op)) {
            temp_path path("staged");
            const std::vector<unsigned char> bytes = nvmeio_test::pattern(5 * slot + 77, 4);
            if (op == operation::read) nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
            std::vector<unsigned char> memory =
                op == operation::write ? bytes : std::vector<unsigned char>(bytes.size());
            file f(path.str(), op == operation::write ? open_mode::write : open_mode::read,
                   direct_io::on);
            aio_context context({4, 4096});
            delayed_copy_engine engine;
            staging_ring<delayed_copy_engine> ring(engine, {2, slot});
            const auto address = [&](std::size_t at) {
                return reinterpret_cast<std::uintptr_t>(memory.data() + at);
            };
            staged_run<aio_context, delayed_copy_engine> run(
                context, ring, {&f},
                {{0, 3 * slot, bytes.size() - 3 * slot, address(3 * slot), false},
                 {0, 0, 3 * slot, address(0), false}},
                op);
            std::vector<unsigned char> seen[2];
            run.observe([&](std::size_t range, const std::byte* data, std::size_t n) {
                const auto* p = reinterpret_cast<const unsigned char*>(data);
                seen[range].insert(seen[range].end(), p, p + n);
            });
            while (run.pending())
                (void)run.advance();
            f.close();
            BOOST_TEST(
                (seen[1] == std::vector<unsigned char>(bytes.begin(), bytes.begin() + 3 * slot)));
            BOOST_TEST(
                (seen[0] == std::vector<unsigned char>(bytes.begin() + 3 * slot, bytes.end())));
            BOOST_TEST((memory == bytes));
            BOOST_TEST((nvmeio_test::slurp(path.str()) == bytes));
        }
    }
}

// ---- a copy engine that fails: no copy outlives the call that started it -------------------

namespace {

// One 4 KiB file of a pattern, and eight ranges of 512 bytes of it over memory of 4 KiB: one
// window, eight copies.
struct one_window {
    temp_path path;
    std::vector<unsigned char> file_bytes;
    std::vector<unsigned char> memory;
    std::vector<staged_range> ranges;

    one_window(const char* name, std::uint64_t seed, std::vector<unsigned char> in_memory)
        : path(name), memory(std::move(in_memory)) {
        nvmeio_test::spew_pattern(path.str(), slot, seed);
        file_bytes = nvmeio_test::slurp(path.str());
        for (std::size_t i = 0; i < 8; ++i) {
            ranges.push_back({0, i * 512, 512,
                              reinterpret_cast<std::uintptr_t>(memory.data() + i * 512), false});
        }
    }
    // Range i's memory holds the file's bytes (a read's arrived) / holds zeros (never written).
    bool arrived(std::size_t i) const {
        return std::memcmp(memory.data() + i * 512, file_bytes.data() + i * 512, 512) == 0;
    }
    bool untouched(std::size_t i) const {
        return std::all_of(memory.begin() + i * 512, memory.begin() + (i + 1) * 512,
                           [](unsigned char b) { return b == 0; });
    }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_copy_engine_failing_mid_read_leaves_no_copy_running_and_the_ring_reused) {
    for (const bool record_fails : {false, true}) {
        BOOST_TEST_CONTEXT((record_fails ? "record fails" : "the 4th copy fails")) {
            aio_context context({4, 4096});
            delayed_copy_engine engine;
            staging_ring<delayed_copy_engine> ring(engine, {2, slot});
            one_window first("staged_first", 21, std::vector<unsigned char>(slot, 0));
            one_window second("staged_second", 22, std::vector<unsigned char>(slot, 0));
            file f1(first.path.str(), open_mode::read, direct_io::on);
            file f2(second.path.str(), open_mode::read, direct_io::on);
            if (record_fails) {
                engine.fail_record_call(1);
            } else {
                engine.fail_copy_call(4);
            }
            std::vector<unsigned> reported(8, 0);
            BOOST_CHECK_THROW((void)staged_read(context, ring, {&f1}, first.ranges,
                                                [&](std::size_t i) { ++reported.at(i); }),
                              std::runtime_error);
            BOOST_TEST(engine.in_flight() == 0u, "copies still running after the exception");
            // The same ring reads another file: no late copy of the first run reads its slot.
            (void)staged_read(context, ring, {&f2}, second.ranges);
            for (std::size_t i = 0; i < 8; ++i) {
                BOOST_TEST(second.arrived(i), "range " << i << " of the second run");
                // Three copies started before the 4th failed; all eight before record failed.
                const bool started = record_fails || i < 3;
                BOOST_TEST((started ? first.arrived(i) : first.untouched(i)),
                           "range " << i << " of the first run holds other bytes");
                BOOST_TEST(reported[i] == (started ? 1u : 0u),
                           "range " << i << " reported " << reported[i] << " times");
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(a_failed_reads_destination_may_be_freed_as_the_exception_leaves) {
    aio_context context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    {
        one_window first("staged_first", 23, std::vector<unsigned char>(slot, 0));
        file f(first.path.str(), open_mode::read, direct_io::on);
        engine.fail_copy_call(4);
        BOOST_CHECK_THROW((void)staged_read(context, ring, {&f}, first.ranges), std::runtime_error);
    }  // the destination is freed here
    BOOST_TEST(engine.in_flight() == 0u);
    (void)engine.wait_all();  // a late copy would land in freed memory here (ASan sees it)
}

BOOST_AUTO_TEST_CASE(a_copy_engine_failing_mid_write_leaves_no_copy_running_and_the_ring_reused) {
    for (const bool record_fails : {false, true}) {
        BOOST_TEST_CONTEXT((record_fails ? "record fails" : "the 4th copy fails")) {
            aio_context context({4, 4096});
            delayed_copy_engine engine(std::chrono::milliseconds{5});  // later than a read
            staging_ring<delayed_copy_engine> ring(engine, {2, slot});
            // Each file holds one pattern; its ranges' memory another, to be written over it.
            one_window first("staged_first", 31, nvmeio_test::pattern(slot, 33));
            one_window second("staged_second", 32, nvmeio_test::pattern(slot, 34));
            file f1(first.path.str(), open_mode::read_write, direct_io::on);
            file f2(second.path.str(), open_mode::read_write, direct_io::on);
            if (record_fails) {
                engine.fail_record_call(1);
            } else {
                engine.fail_copy_call(4);
            }
            BOOST_CHECK_THROW((void)staged_write(context, ring, {&f1}, first.ranges),
                              std::runtime_error);
            BOOST_TEST(engine.in_flight() == 0u, "copies still running after the exception");
            // The next run leaves bytes [600, 1400) out: it reads the file's bytes there into
            // the slot, where a late copy of the first run would land, and writes them back.
            const auto at = [&](std::size_t b) {
                return reinterpret_cast<std::uintptr_t>(second.memory.data() + b);
            };
            (void)staged_write(
                context, ring, {&f2},
                {{0, 0, 600, at(0), false}, {0, 1400, slot - 1400, at(1400), false}});
            std::vector<unsigned char> expected = second.memory;
            std::memcpy(expected.data() + 600, second.file_bytes.data() + 600, 800);
            const std::vector<unsigned char> written = nvmeio_test::slurp(second.path.str());
            std::size_t wrong = 0;
            for (std::size_t b = 0; b < slot; ++b)
                wrong += written[b] != expected[b];
            BOOST_TEST(wrong == 0u, wrong << " bytes of the next run's file wrong");
            BOOST_TEST(nvmeio_test::slurp(first.path.str()) == first.file_bytes);
        }
    }
}

// ---- every range whose bytes arrived is reported once, failure or not ----------------------

BOOST_AUTO_TEST_CASE(a_failed_read_reports_the_ranges_it_retired_and_drained_once_and_no_other) {
    // Three ranges of a slot each, K = 2, copies of 20 ms: the third advance waits for window 0
    // (range 0 retired), then its read of window 2 fails; window 1's copies are drained.
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), 3 * slot, 8);
    const std::vector<unsigned char> bytes = nvmeio_test::slurp(path.str());
    file f(path.str(), open_mode::read, direct_io::on);
    std::vector<unsigned char> destination(3 * slot);
    std::vector<staged_range> ranges;
    for (std::size_t i = 0; i < 3; ++i) {
        ranges.push_back({0, i * slot, slot,
                          reinterpret_cast<std::uintptr_t>(destination.data() + i * slot), false});
    }
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 4096});
    delayed_copy_engine engine(std::chrono::milliseconds{20});
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    nvmeio_test::offset_fault_backend::fail_offset = 2 * slot + 5;
    for (const bool through_staged_read : {false, true}) {
        BOOST_TEST_CONTEXT((through_staged_read ? "staged_read" : "staged_run::advance")) {
            std::fill(destination.begin(), destination.end(), 0);
            std::vector<unsigned> reported(3, 0);
            std::size_t failed = 99;
            try {
                if (through_staged_read) {
                    (void)staged_read(context, ring, {&f}, ranges,
                                      [&](std::size_t i) { ++reported.at(i); });
                } else {
                    staged_run<basic_aio_context<nvmeio_test::offset_fault_backend>,
                               delayed_copy_engine>
                        run(context, ring, {&f}, ranges, operation::read);
                    try {
                        while (run.pending()) {
                            for (std::size_t i : run.advance())
                                ++reported.at(i);
                        }
                    } catch (...) {
                        BOOST_TEST(!run.pending());
                        throw;
                    }
                }
            } catch (const staged_error& e) {
                failed = e.range();
            }
            BOOST_TEST(failed == 2u);
            BOOST_TEST(reported == (std::vector<unsigned>{1, 1, 0}));
            for (std::size_t i = 0; i < 2; ++i) {
                BOOST_TEST(
                    std::memcmp(destination.data() + i * slot, bytes.data() + i * slot, slot) == 0);
            }
        }
    }
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
}

BOOST_AUTO_TEST_CASE(a_failed_write_reports_the_ranges_written_and_the_empty_ones_and_no_other) {
    // Range 0 is empty, range 1 one slot, range 2 two slots; the write of window w fails. A
    // window filled and never written (window 2, when window 1 fails) is not reported.
    std::vector<unsigned char> bytes = nvmeio_test::pattern(3 * slot, 9);
    const auto at = [&](std::size_t b) {
        return reinterpret_cast<std::uintptr_t>(bytes.data() + b);
    };
    const std::vector<staged_range> ranges = {
        {0, 0, 0, 0, false}, {0, 0, slot, at(0), false}, {0, slot, 2 * slot, at(slot), false}};
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    for (std::size_t failing = 0; failing < 3; ++failing) {
        BOOST_TEST_CONTEXT("the write of window " << failing << " fails") {
            temp_path path("staged");
            file out(path.str(), open_mode::write, direct_io::on);
            nvmeio_test::offset_fault_backend::fail_offset = failing * slot + 5;
            staged_run<basic_aio_context<nvmeio_test::offset_fault_backend>, delayed_copy_engine>
                run(context, ring, {&out}, ranges, operation::write);
            std::vector<unsigned> reported(3, 0);
            bool thrown = false;
            try {
                while (run.pending()) {
                    for (std::size_t i : run.advance())
                        ++reported.at(i);
                }
            } catch (const staged_error&) {
                thrown = true;
            }
            BOOST_TEST(thrown);
            BOOST_TEST(!run.pending());
            BOOST_TEST(reported[0] == 1u);
            BOOST_TEST(reported[1] == (failing > 0 ? 1u : 0u));
            BOOST_TEST(reported[2] == 0u);
            BOOST_TEST(engine.in_flight() == 0u);
        }
    }
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
}

// ---- copies that fail after they started (a GPU's may) -------------------------------------

namespace {

// `count` ranges of a slot each of one file, read with K = 2 through the late engine (copies of
// 20 ms), window w holding range w; each range's memory holds zeros until its bytes arrive.
struct slot_ranges {
    temp_path path{"staged_late"};
    std::vector<unsigned char> file_bytes;
    std::vector<unsigned char> memory;
    std::vector<staged_range> ranges;

    explicit slot_ranges(std::size_t count) : memory(count * slot, 0) {
        nvmeio_test::spew_pattern(path.str(), count * slot, 70 + count);
        file_bytes = nvmeio_test::slurp(path.str());
        for (std::size_t i = 0; i < count; ++i) {
            ranges.push_back({0, i * slot, slot,
                              reinterpret_cast<std::uintptr_t>(memory.data() + i * slot), false});
        }
    }
    bool arrived(std::size_t i) const {
        return std::memcmp(memory.data() + i * slot, file_bytes.data() + i * slot, slot) == 0;
    }
    bool untouched(std::size_t i) const {
        return std::all_of(memory.begin() + i * slot, memory.begin() + (i + 1) * slot,
                           [](unsigned char b) { return b == 0; });
    }
};

// Advances `run` to its end, counting each range reported; the exception that ends it, if any.
template <class Run>
std::string run_to_the_end(Run& run, std::vector<unsigned>& reported) {
    try {
        while (run.pending()) {
            for (std::size_t i : run.advance())
                ++reported.at(i);
        }
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_failure_with_windows_in_flight_leaves_none_and_reports_only_what_arrived) {
    using faulty = basic_async_context<nvmeio_test::offset_fault_backend>;
    for (std::size_t failing = 0; failing < 6; ++failing) {
        BOOST_TEST_CONTEXT("window " << failing << " fails") {
            slot_ranges six(6);
            faulty context({3, {4, 4096}});
            delayed_copy_engine engine(std::chrono::microseconds{200});
            staging_ring<delayed_copy_engine> ring(engine, {4, slot});
            nvmeio_test::offset_fault_backend::fail_offset = failing * slot + 7;
            {
                file in(six.path.str(), open_mode::read, direct_io::on);
                staged_run<faulty, delayed_copy_engine> run(context, ring, {&in}, six.ranges,
                                                            operation::read);
                std::vector<unsigned> reported(6, 0);
                const std::string error = run_to_the_end(run, reported);
                BOOST_TEST(error.find("read of") != std::string::npos, error);
                BOOST_TEST(engine.in_flight() == 0u);
                for (std::size_t i = 0; i < 6; ++i) {
                    if (reported[i] == 1) BOOST_TEST(six.arrived(i), "range " << i);
                    BOOST_TEST(reported[i] == (i < failing ? 1u : 0u), "range " << i);
                }
            }
            nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
            file again(six.path.str(), open_mode::read, direct_io::on);
            (void)staged_read(context, ring, {&again}, six.ranges);  // the ring serves again
            for (std::size_t i = 0; i < 6; ++i)
                BOOST_TEST(six.arrived(i), "range " << i);
        }
    }
}

BOOST_AUTO_TEST_CASE(a_window_whose_copy_fails_late_is_not_reported_and_the_next_one_is) {
    // Window 0's copy fails as it lands; window 1's completes. The wait for window 0 throws, and
    // only range 1 is reported, by the call that met the failure; the next call throws it.
    slot_ranges data(2);
    file f(data.path.str(), open_mode::read, direct_io::on);
    aio_context context({4, 4096});
    delayed_copy_engine engine(std::chrono::milliseconds{20});
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    engine.fail_copy_late(1);
    staged_run<aio_context, delayed_copy_engine> run(context, ring, {&f}, data.ranges,
                                                     operation::read);
    std::vector<unsigned> reported(2, 0);
    bool failed_when_reported = false;
    std::string what;
    try {
        while (run.pending()) {
            const std::vector<std::size_t> done = run.advance();
            for (std::size_t i : done)
                ++reported.at(i);
            if (!done.empty()) failed_when_reported = run.failed() && run.pending();
        }
    } catch (const std::runtime_error& e) {
        what = e.what();
    }
    BOOST_TEST(nvmeio_test::contains(what, "a copy of slot 0 failed late"), what);
    BOOST_TEST(reported == (std::vector<unsigned>{0, 1}));
    BOOST_TEST(failed_when_reported);
    BOOST_TEST(run.failed());
    BOOST_TEST(!run.pending());
    BOOST_TEST(data.untouched(0));
    BOOST_TEST(data.arrived(1));
    BOOST_TEST(engine.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(a_busy_window_whose_copy_failed_late_is_not_reported_when_an_io_fails) {
    // Window 1's copy fails late; the read of window 2 fails while it is in flight. Range 0 was
    // retired before; range 1, in the window drained after the failure, is not reported.
    slot_ranges data(3);
    file f(data.path.str(), open_mode::read, direct_io::on);
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 4096});
    delayed_copy_engine engine(std::chrono::milliseconds{20});
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    engine.fail_copy_late(2);
    nvmeio_test::offset_fault_backend::fail_offset = 2 * slot + 5;
    staged_run<basic_aio_context<nvmeio_test::offset_fault_backend>, delayed_copy_engine> run(
        context, ring, {&f}, data.ranges, operation::read);
    std::vector<unsigned> reported(3, 0);
    const std::string what = run_to_the_end(run, reported);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(nvmeio_test::contains(what, data.path.str()), what);  // the I/O's failure
    BOOST_TEST(reported == (std::vector<unsigned>{1, 0, 0}));
    BOOST_TEST(data.arrived(0));
    BOOST_TEST(data.untouched(1));
    BOOST_TEST(engine.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(pieces_started_before_a_failed_copy_call_are_not_reported_if_one_failed_late) {
    // One window of eight ranges: the 2nd copy fails late, the 4th call throws. Ranges 0 and 2
    // arrived, but the run cannot tell them from range 1: none is reported.
    aio_context context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    one_window window("staged_late", 24, std::vector<unsigned char>(slot, 0));
    file f(window.path.str(), open_mode::read, direct_io::on);
    engine.fail_copy_late(2);
    engine.fail_copy_call(4);
    std::vector<unsigned> reported(8, 0);
    BOOST_CHECK_THROW((void)staged_read(context, ring, {&f}, window.ranges,
                                        [&](std::size_t i) { ++reported.at(i); }),
                      std::runtime_error);
    BOOST_TEST(engine.in_flight() == 0u);
    BOOST_TEST(reported == std::vector<unsigned>(8, 0));
    BOOST_TEST(window.arrived(0));
    BOOST_TEST(window.untouched(1));
    BOOST_TEST(window.arrived(2));
}

BOOST_AUTO_TEST_CASE(a_write_whose_copy_into_the_slot_fails_late_writes_nothing_of_its_window) {
    // Two windows; the copy into window 1's slot fails late: window 0 is written and reported,
    // window 1 neither.
    std::vector<unsigned char> bytes = nvmeio_test::pattern(2 * slot, 25);
    const std::vector<staged_range> ranges = {
        {0, 0, slot, reinterpret_cast<std::uintptr_t>(bytes.data()), false},
        {0, slot, slot, reinterpret_cast<std::uintptr_t>(bytes.data() + slot), false}};
    temp_path path("staged_late");
    nvmeio_test::spew_pattern(path.str(), 2 * slot, 26);
    std::vector<unsigned char> expected = nvmeio_test::slurp(path.str());
    std::memcpy(expected.data(), bytes.data(), slot);
    file out(path.str(), open_mode::read_write, direct_io::on);
    aio_context context({4, 4096});
    delayed_copy_engine engine(std::chrono::milliseconds{5});
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    engine.fail_copy_late(2);
    std::vector<unsigned> reported(2, 0);
    BOOST_CHECK_THROW(
        (void)staged_write(context, ring, {&out}, ranges, [&](std::size_t i) { ++reported.at(i); }),
        std::runtime_error);
    BOOST_TEST(reported == (std::vector<unsigned>{1, 0}));
    BOOST_TEST(nvmeio_test::slurp(path.str()) == expected);
    BOOST_TEST(engine.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(an_on_done_that_throws_leaves_no_copy_running_and_the_memory_may_be_freed) {
    // Six windows, copies of 20 ms: when range 0 is reported, windows 1 and 2 are still being
    // copied. The exception from on_done leaves only once they have landed.
    aio_context context({4, 4096});
    delayed_copy_engine engine(std::chrono::milliseconds{20});
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    {
        slot_ranges data(6);  // the destination, freed as the exception leaves
        file f(data.path.str(), open_mode::read, direct_io::on);
        BOOST_CHECK_THROW((void)staged_read(context, ring, {&f}, data.ranges,
                                            [](std::size_t) { throw std::domain_error("stop"); }),
                          std::domain_error);
        BOOST_TEST(engine.in_flight() == 0u, "copies still running after the exception");
    }
    (void)engine.wait_all();  // a late copy would land in freed memory here (ASan sees it)
    BOOST_TEST(engine.in_flight() == 0u);
}

BOOST_AUTO_TEST_CASE(a_run_that_ends_well_has_not_failed) {
    slot_ranges data(3);
    file f(data.path.str(), open_mode::read, direct_io::on);
    aio_context context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    staged_run<aio_context, delayed_copy_engine> run(context, ring, {&f}, data.ranges,
                                                     operation::read);
    std::vector<unsigned> reported(3, 0);
    BOOST_TEST(run_to_the_end(run, reported) == "");
    BOOST_TEST(!run.failed());
    BOOST_TEST(reported == (std::vector<unsigned>{1, 1, 1}));
}

// ---- one file under two indices ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_file_listed_twice_in_a_write_plan_is_written_as_one_file) {
    for (const bool two_handles : {false, true}) {
        BOOST_TEST_CONTEXT((two_handles ? "two handles on one path" : "one file object twice")) {
            temp_path path("staged");
            nvmeio_test::spew_pattern(path.str(), 2 * slot, 41);
            std::vector<unsigned char> expected = nvmeio_test::slurp(path.str());
            std::vector<unsigned char> bytes = nvmeio_test::pattern(200, 42);
            std::memcpy(expected.data(), bytes.data(), 100);
            std::memcpy(expected.data() + 200, bytes.data() + 100, 100);
            file f(path.str(), open_mode::read_write, direct_io::on);
            file g(path.str(), open_mode::read_write, direct_io::on);
            aio_context context({4, 4096});
            delayed_copy_engine engine;
            staging_ring<delayed_copy_engine> ring(engine, {2, slot});
            const auto at = [&](std::size_t b) {
                return reinterpret_cast<std::uintptr_t>(bytes.data() + b);
            };
            (void)staged_write(context, ring, {&f, two_handles ? &g : &f},
                               {{0, 0, 100, at(0), false}, {1, 200, 100, at(100), false}});
            const std::vector<unsigned char> written = nvmeio_test::slurp(path.str());
            BOOST_REQUIRE(written.size() == expected.size());
            std::size_t wrong = 0;
            for (std::size_t b = 0; b < written.size(); ++b)
                wrong += written[b] != expected[b];
            BOOST_TEST(wrong == 0u, wrong << " bytes of the file wrong");
        }
    }
}

BOOST_AUTO_TEST_CASE(
    overlapping_writes_to_one_file_under_two_indices_are_refused_before_any_byte_moves) {
    temp_path path("staged");
    temp_path link("staged_link");
    nvmeio_test::spew_pattern(path.str(), slot, 43);
    const std::vector<unsigned char> before = nvmeio_test::slurp(path.str());
    BOOST_REQUIRE(::link(path.str().c_str(), link.str().c_str()) == 0);
    std::vector<unsigned char> bytes = nvmeio_test::pattern(200, 44);
    const auto at = [&](std::size_t b) {
        return reinterpret_cast<std::uintptr_t>(bytes.data() + b);
    };
    file f(path.str(), open_mode::read_write, direct_io::on);
    file g(path.str(), open_mode::read_write, direct_io::on);
    file h(link.str(), open_mode::read_write, direct_io::on);
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    for (const file* other : {&f, &g, &h}) {
        const std::string what = nvmeio_test::message_of<std::invalid_argument>([&] {
            (void)staged_write(context, ring, {&f, other},
                               {{0, 0, 100, at(0), false}, {1, 50, 100, at(100), false}});
        });
        BOOST_TEST(nvmeio_test::contains(what,
                                         "range 1 (100 bytes at offset 50 of file 1) overlaps "
                                         "range 0 (100 bytes at offset 0 of file 0)"),
                   what);
    }
    BOOST_TEST(nvmeio_test::slurp(path.str()) == before);
}

BOOST_AUTO_TEST_CASE(a_file_listed_twice_in_a_read_plan_reads_each_unit_once) {
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), slot, 45);
    const std::vector<unsigned char> bytes = nvmeio_test::slurp(path.str());
    std::vector<unsigned char> destination(200);
    const auto at = [&](std::size_t b) {
        return reinterpret_cast<std::uintptr_t>(destination.data() + b);
    };
    file f(path.str(), open_mode::read, direct_io::on);
    file g(path.str(), open_mode::read, direct_io::on);
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    for (const file* other : {&f, &g}) {
        std::fill(destination.begin(), destination.end(), 0);
        const staged_outcome outcome = staged_read(
            context, ring, {&f, other}, {{0, 0, 100, at(0), false}, {1, 200, 100, at(100), false}});
        BOOST_TEST(outcome.windows == 1u);
        BOOST_TEST(std::memcmp(destination.data(), bytes.data(), 100) == 0);
        BOOST_TEST(std::memcmp(destination.data() + 100, bytes.data() + 200, 100) == 0);
    }
}

// Handles of one file that a plan uses must move bytes alike, and a write's must be writable:
// else one range would go through another's handle (buffered where O_DIRECT was asked, or
// refused mid-run after other files were written). Both are refused before any byte moves; a
// handle the plan lists but does not use is not its concern.
namespace {

// Two files of a slot each, their bytes before, and the bytes to move from or into.
struct two_files {
    two_files(std::uint64_t seed, std::size_t moved)
        : bytes(nvmeio_test::pattern(moved, seed + 2)) {
        nvmeio_test::spew_pattern(a_path.str(), slot, seed);
        nvmeio_test::spew_pattern(b_path.str(), slot, seed + 1);
        a_before = nvmeio_test::slurp(a_path.str());
        b_before = nvmeio_test::slurp(b_path.str());
    }
    std::uintptr_t at(std::size_t b) { return reinterpret_cast<std::uintptr_t>(bytes.data() + b); }
    bool untouched() const {
        return nvmeio_test::slurp(a_path.str()) == a_before &&
               nvmeio_test::slurp(b_path.str()) == b_before;
    }

    temp_path a_path{"staged_a"};
    temp_path b_path{"staged_b"};
    std::vector<unsigned char> a_before, b_before;
    std::vector<unsigned char> bytes;
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_write_through_a_read_only_handle_is_refused_before_any_byte_moves) {
    two_files files(61, 200);
    const auto at = [&](std::size_t b) { return files.at(b); };
    const temp_path& a_path = files.a_path;
    const temp_path& b_path = files.b_path;
    file a(a_path.str(), open_mode::read_write, direct_io::on);
    file b_read(b_path.str(), open_mode::read, direct_io::on);
    file b(b_path.str(), open_mode::read_write, direct_io::on);
    aio_context context({4, 4096});
    delayed_copy_engine engine;
    staging_ring<delayed_copy_engine> ring(engine, {2, slot});
    // Through index 1, read-only: refused naming the range and its index, nothing written.
    const std::string what = nvmeio_test::message_of<std::invalid_argument>([&] {
        (void)staged_write(context, ring, {&a, &b_read, &b},
                           {{0, 0, 100, at(0), false}, {1, 0, 100, at(100), false}});
    });
    BOOST_TEST(nvmeio_test::contains(what, "range 1 (100 bytes at offset 0 of file 1)"), what);
    BOOST_TEST(nvmeio_test::contains(what, "open_mode::read"), what);
    BOOST_TEST(files.untouched());
    // Through index 2 only: index 1, the same file read-only, is listed but unused.
    (void)staged_write(context, ring, {&a, &b_read, &b},
                       {{0, 0, 100, at(0), false}, {2, 0, 100, at(100), false}});
    std::vector<unsigned char> a_expected = files.a_before;
    std::vector<unsigned char> b_expected = files.b_before;
    std::memcpy(a_expected.data(), files.bytes.data(), 100);
    std::memcpy(b_expected.data(), files.bytes.data() + 100, 100);
    BOOST_TEST(nvmeio_test::slurp(a_path.str()) == a_expected);
    BOOST_TEST(nvmeio_test::slurp(b_path.str()) == b_expected);
}

BOOST_AUTO_TEST_CASE(handles_of_one_file_opened_differently_are_refused_naming_both_indices) {
    two_files files(64, 300);
    const auto at = [&](std::size_t b) { return files.at(b); };
    const temp_path& a_path = files.a_path;
    const temp_path& b_path = files.b_path;
    file a(a_path.str(), open_mode::read_write, direct_io::on);
    file b_buffered(b_path.str(), open_mode::read_write, direct_io::off);
    file b_direct(b_path.str(), open_mode::read_write, direct_io::on);
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    for (const operation op : {operation::read, operation::write}) {
        BOOST_TEST_CONTEXT(to_string(op)) {
            const std::string what = nvmeio_test::message_of<std::invalid_argument>([&] {
                const std::vector<staged_range> ranges = {{0, 0, 100, at(0), false},
                                                          {2, 0, 100, at(100), false},
                                                          {1, 200, 100, at(200), false}};
                if (op == operation::read) {
                    (void)staged_read(context, ring, {&a, &b_buffered, &b_direct}, ranges);
                } else {
                    (void)staged_write(context, ring, {&a, &b_buffered, &b_direct}, ranges);
                }
            });
            BOOST_TEST(nvmeio_test::contains(what, "files 1 and 2 are one file"), what);
            BOOST_TEST(nvmeio_test::contains(what, "file 1 buffered"), what);
            BOOST_TEST(nvmeio_test::contains(what, "file 2 O_DIRECT"), what);
            BOOST_TEST(files.untouched());
        }
    }
}

BOOST_AUTO_TEST_CASE(a_closed_or_moved_from_handle_in_the_list_is_refused_naming_its_index) {
    temp_path path("staged");
    nvmeio_test::spew_pattern(path.str(), slot, 67);
    file f(path.str(), open_mode::read, direct_io::on);
    file closed(path.str(), open_mode::read, direct_io::on);
    closed.close();
    file moved(path.str(), open_mode::read, direct_io::on);
    file taker(std::move(moved));
    std::vector<unsigned char> destination(100);
    const std::vector<staged_range> ranges = {
        {0, 0, 100, reinterpret_cast<std::uintptr_t>(destination.data()), false}};
    aio_context context({4, 4096});
    host_copy_engine engine;
    staging_ring<host_copy_engine> ring(engine, {2, slot});
    for (const file* unusable : {&closed, &moved}) {
        std::string what;
        try {
            what = nvmeio_test::message_of<std::invalid_argument>([&] {
                (void)staged_read(context, ring, {&f, unusable}, ranges);
            });
        } catch (const std::exception& e) {
            what = std::string("another exception: ") + e.what();
        }
        BOOST_TEST(
            nvmeio_test::contains(what, "staged read: file 1 ('" + path.str() + "') is not open"),
            what);
    }
}

// ---- the CUDA engine, on a driver table of test functions ----------------------------------

namespace fake = nvmeio_test::queued_cuda;

BOOST_AUTO_TEST_CASE(
    the_cuda_engine_locks_the_ring_once_keeps_an_event_per_slot_and_leaves_the_context_stack_as_it_was) {
    fake::reset();
    const cuda_driver driver = fake::table();
    const auto made = make_model(8, 20);
    model& m = *made;
    {
        cuda_copy_engine engine(0, &driver);
        aio_context context({8, 4096});
        host_copy_engine unused;
        (void)unused;
        std::vector<unsigned char> destination(m.destination_size + 1);
        std::size_t next = 0;
        for (auto& r : m.ranges) {
            r.address = reinterpret_cast<std::uintptr_t>(destination.data() + next);
            next += r.length;
        }
        file f0(m.paths[0].str(), open_mode::read, direct_io::on);
        file f1(m.paths[1].str(), open_mode::read, direct_io::on);
        {
            staging_ring<cuda_copy_engine> ring(engine, {3, slot});
            BOOST_TEST(fake::state.registered == 1);
            BOOST_TEST(fake::state.events == 3);
            (void)staged_read(context, ring, {&f0, &f1}, m.ranges);
        }
        BOOST_TEST(fake::state.unregistered == 1);
        BOOST_TEST(fake::state.events == 0);
        BOOST_TEST(fake::state.copies > 0);
        const auto file1 = nvmeio_test::slurp(m.paths[1].str());
        for (const auto& r : m.ranges) {
            if (r.file == 1 && r.length != 0) {
                BOOST_TEST(std::memcmp(reinterpret_cast<const void*>(r.address),
                                       file1.data() + r.offset, r.length) == 0);
            }
        }
        // A failed copy: std::system_error in the cuda category, naming the call and the result.
        staging_ring<cuda_copy_engine> ring(engine, {2, slot});
        std::vector<unsigned char> small(13);
        fake::state.fail_to_device_call = 1;
        const std::string what = nvmeio_test::message_of<std::system_error>([&] {
            (void)staged_read(context, ring, {&f0},
                              {{0, 0, 13, reinterpret_cast<std::uintptr_t>(small.data()), false}});
        });
        BOOST_TEST(nvmeio_test::contains(
            what, "cuMemcpyHtoDAsync of 13 bytes on cuda:0 failed (CUDA_ERROR_INVALID_VALUE)"));
    }
    BOOST_TEST(fake::state.pushes == fake::state.pops);
}

BOOST_AUTO_TEST_CASE(a_failed_driver_call_leaves_no_copy_queued_when_the_exception_leaves) {
    // On a stream that runs copies only when synchronized: the 4th copy to the device (a read),
    // the event record after all eight (a read), the 4th copy to the host (a write) fails.
    enum class failing { to_device, record, to_host };
    for (const failing call : {failing::to_device, failing::record, failing::to_host}) {
        BOOST_TEST_CONTEXT("failing call " << static_cast<int>(call)) {
            fake::reset();
            const cuda_driver driver = fake::table();
            const bool read = call != failing::to_host;
            one_window window(
                "staged_first", 51,
                read ? std::vector<unsigned char>(slot, 0) : nvmeio_test::pattern(slot, 52));
            file f(window.path.str(), read ? open_mode::read : open_mode::read_write,
                   direct_io::on);
            aio_context context({4, 4096});
            {
                cuda_copy_engine engine(0, &driver);
                {
                    staging_ring<cuda_copy_engine> ring(engine, {2, slot});
                    if (call == failing::to_device) fake::state.fail_to_device_call = 4;
                    if (call == failing::record) fake::state.fail_record_call = 1;
                    if (call == failing::to_host) fake::state.fail_to_host_call = 4;
                    const std::string what = nvmeio_test::message_of<std::system_error>([&] {
                        if (read) {
                            (void)staged_read(context, ring, {&f}, window.ranges);
                        } else {
                            (void)staged_write(context, ring, {&f}, window.ranges);
                        }
                    });
                    BOOST_TEST(nvmeio_test::contains(what, "(CUDA_ERROR_INVALID_VALUE)"), what);
                    BOOST_TEST(fake::state.queue.size() == 0u,
                               fake::state.queue.size() << " copies queued after the exception");
                }  // the ring detached right after the exception
                BOOST_TEST(fake::state.queued_at_unregister == 0u);
                BOOST_TEST(fake::state.unregistered == 1);
            }
            BOOST_TEST(fake::state.pushes == fake::state.pops);
        }
    }
}

BOOST_AUTO_TEST_CASE(detaching_a_ring_waits_for_copies_not_yet_recorded) {
    fake::reset();
    const cuda_driver driver = fake::table();
    cuda_copy_engine engine(0, &driver);
    std::vector<unsigned char> device(100, 0);
    {
        staging_ring<cuda_copy_engine> ring(engine, {2, slot});
        std::memset(ring.slot(1), 7, 100);
        engine.copy_from_slot(1, reinterpret_cast<std::uintptr_t>(device.data()), ring.slot(1),
                              100);
    }
    BOOST_TEST(fake::state.queued_at_unregister == 0u);
    BOOST_TEST(device == std::vector<unsigned char>(100, 7));
}

BOOST_AUTO_TEST_CASE(the_cuda_engine_says_which_device_is_missing) {
    fake::reset();
    const cuda_driver driver = fake::table();
    BOOST_TEST(nvmeio_test::contains(
        nvmeio_test::message_of<std::invalid_argument>([&] { cuda_copy_engine(3, &driver); }),
        "CUDA device 3 asked for; the driver sees 1"));
    fake::state.devices = 0;
    bool thrown = false;
    try {
        cuda_copy_engine engine(0, &driver);
    } catch (const std::system_error& e) {
        thrown = true;
        BOOST_TEST((e.code() == std::errc::no_such_device));
        BOOST_TEST(nvmeio_test::contains(e.what(), "cuInit failed"));
    }
    fake::state.devices = 1;
    BOOST_TEST(thrown);
}

BOOST_AUTO_TEST_CASE(a_driver_table_missing_an_entry_the_engine_calls_is_refused_naming_it) {
    // Each entry the engine calls, left out in turn: refused before any call, naming it (a
    // table without stream_synchronize crashed every ring's detach).
    const std::pair<void (*)(cuda_driver&), const char*> entries[] = {
        {[](cuda_driver& d) { d.stream_synchronize = nullptr; },
         "stream_synchronize (cuStreamSynchronize)"},
        {[](cuda_driver& d) { d.event_query = nullptr; }, "event_query (cuEventQuery)"},
        {[](cuda_driver& d) { d.init = nullptr; }, "init (cuInit)"},
        {[](cuda_driver& d) { d.copy_to_host = nullptr; }, "copy_to_host (cuMemcpyDtoHAsync)"},
    };
    for (const auto& [leave_out, name] : entries) {
        BOOST_TEST_CONTEXT(name) {
            fake::reset();
            cuda_driver driver = fake::table();
            leave_out(driver);
            const std::string what = nvmeio_test::message_of<std::invalid_argument>(
                [&] { cuda_copy_engine engine(0, &driver); });
            BOOST_TEST(nvmeio_test::contains(what, std::string("lacks ") + name), what);
            BOOST_TEST(fake::state.pushes == 0);
        }
    }
    // The entries only the helpers call (allocate, free, copy_back) may be left out: the fake
    // table has none, and the engine serves a ring.
    const cuda_driver driver = fake::table();
    cuda_copy_engine engine(0, &driver);
    BOOST_TEST(nvmeio_test::contains(
        nvmeio_test::message_of<std::invalid_argument>([&] { (void)engine.allocate_device(10); }),
        "lacks allocate (cuMemAlloc)"));
}

BOOST_AUTO_TEST_CASE(without_nvidias_driver_opening_it_says_what_is_missing) {
    void* present = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (present != nullptr) {
        ::dlclose(present);
        BOOST_TEST_MESSAGE("libcuda.so.1 is present: the driver opens");
        BOOST_CHECK_NO_THROW((void)cuda_driver::open());
        return;
    }
    bool thrown = false;
    try {
        (void)cuda_driver::open();
    } catch (const std::system_error& e) {
        thrown = true;
        BOOST_TEST((e.code() == std::errc::no_such_file_or_directory));
        BOOST_TEST(
            nvmeio_test::contains(e.what(), "the CUDA driver (libcuda.so.1) could not be opened"));
    }
    BOOST_TEST(thrown);
}

#define BOOST_TEST_MODULE unit_edge
#include <boost/test/unit_test.hpp>

// Unaligned edges (detail/unit_edge.hpp), differentially: each case, a range whose ends fall on,
// inside or past the file's last alignment unit, is written and read every way nvmeio has on an
// O_DIRECT handle (file::write_at/read_at's bounce, a transfer whose tail is the engine's
// remnant, a batch straight from aligned memory with its tail staged and padded, a batch staged
// from unaligned memory and cut mid-unit), and each must leave the file with the bytes and the
// size of a plain model, and read what the model holds.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nvmeio/batch.hpp>
#include <nvmeio/detail/unit_edge.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::temp_path;

namespace {

using bytes = std::vector<unsigned char>;

struct edge_case {
    std::uint64_t position;
    std::size_t length;
};

// Ranges around a file of 3 units and 123 bytes: ends before, at and past its end, inside one
// unit, across two, past the end with a hole, longer than the bounce buffer and a block.
std::vector<edge_case> edge_cases(std::size_t u) {
    return {{0, u + 5},        {u, 2 * u + 100},     {2 * u, u + 200},  {2 * u + 7, u + 116},
            {3 * u + 100, 50}, {u + 1, 10},          {u - 3, 6},        {5 * u, 77},
            {6 * u + 9, u},    {2 * u, 3 * u + 1},   {u, 2 * u},        {u + 13, 200'000},
            {0, 3 * u + 123},  {3 * u + 123, u - 1}, {3 * u + 200, 10}, {7, u}};
}

// One way of moving [position, position + data.size()) of `f`; a read answers the bytes moved.
using way = std::function<std::size_t(const file& f, bool write, std::uint64_t position,
                                      unsigned char* data, std::size_t length)>;

aio_context& context() {
    static aio_context c({4, 16 * 1024});  // blocks shorter than the longest case
    return c;
}

// The ways. Those that need an aligned start move from the unit the range starts in: the bytes
// before it are the file's own (a read throws them away, a write puts back what the model
// holds), so that every way meets the range's end where the range meets it.
std::vector<std::pair<std::string, way>> ways(const std::function<bytes()>& model_now) {
    auto from_unit = [model_now](auto move) {
        return [model_now, move](const file& f, bool write, std::uint64_t position,
                                 unsigned char* data, std::size_t length) -> std::size_t {
            const auto cover = detail::unit_cover::of(position, length, f.required_alignment());
            bytes whole(cover.skip + length);
            const bytes before = model_now();
            for (std::size_t i = 0; i < cover.skip; ++i)
                whole[i] = cover.start + i < before.size() ? before[cover.start + i] : 0;
            if (write) std::memcpy(whole.data() + cover.skip, data, length);
            const std::size_t got = move(f, write, cover.start, whole);
            if (write) return length;
            const std::size_t mine = got > cover.skip ? got - cover.skip : 0;
            std::memcpy(data, whole.data() + cover.skip, mine);
            return mine;
        };
    };
    return {
        {"file::write_at/read_at",
         [](const file& f, bool write, std::uint64_t position, unsigned char* data,
            std::size_t length) -> std::size_t {
             if (!write) return f.read_at(nvmeio::memory(data, length), position);
             f.write_at(nvmeio::memory(data, length), position);
             return length;
         }},
        {"transfer (engine remnant)",
         from_unit([](const file& f, bool write, std::uint64_t at, bytes& whole) -> std::size_t {
             aligned_buffer memory(std::max<std::size_t>(whole.size(), 1));
             std::memcpy(memory.data(), whole.data(), whole.size());
             const auto view = nvmeio::memory(memory).first(whole.size());
             const std::size_t got =
                 transfer(context(), f, write ? operation::write : operation::read, view, at).bytes;
             std::memcpy(whole.data(), memory.data(), whole.size());
             return got;
         })},
        {"batch straight (padded tail)",
         from_unit([](const file& f, bool write, std::uint64_t at, bytes& whole) -> std::size_t {
             aligned_buffer memory(std::max<std::size_t>(whole.size(), 1));
             std::memcpy(memory.data(), whole.data(), whole.size());
             const std::vector<batch_request> one{{nvmeio::memory(memory).first(whole.size()), at}};
             const batch_outcome o =
                 write ? write_batch(context(), f, one) : read_batch(context(), f, one);
             std::memcpy(whole.data(), memory.data(), whole.size());
             return o.results[0].bytes;
         })},
        {"batch staged, cut mid-unit",
         from_unit([](const file& f, bool write, std::uint64_t at, bytes& whole) -> std::size_t {
             bytes skewed(whole.size() + 1);  // one byte off whatever the allocator aligns
             std::memcpy(skewed.data() + 1, whole.data(), whole.size());
             const std::size_t cut = whole.size() / 2 | 1;  // odd: the second starts mid-unit
             const auto all = nvmeio::memory(skewed).slice(1, whole.size());
             std::vector<batch_request> two{{all.first(std::min(cut, whole.size())), at}};
             if (cut < whole.size()) two.push_back({all.slice(cut, whole.size() - cut), at + cut});
             const batch_outcome o =
                 write ? write_batch(context(), f, two) : read_batch(context(), f, two);
             std::memcpy(whole.data(), skewed.data() + 1, whole.size());
             std::size_t got = 0;
             for (const batch_result& r : o.results)
                 got += r.bytes;
             return got;
         })},
    };
}

}  // namespace

BOOST_AUTO_TEST_CASE(cover_names_the_partial_units_a_write_merges) {
    auto partial = [](std::uint64_t position, std::size_t length) {
        std::vector<std::size_t> at;
        (void)detail::unit_cover::of(position, length, 512)
            .for_each_partial_unit([&](std::size_t a) {
                at.push_back(a);
                return true;
            });
        return at;
    };
    const auto c = detail::unit_cover::of(1000, 100, 512);
    BOOST_TEST(c.start == 512u);
    BOOST_TEST(c.skip == 488u);
    BOOST_TEST(c.span == 1024u);
    BOOST_TEST((partial(1000, 100) == std::vector<std::size_t>{0, 512}));
    BOOST_TEST((partial(1000, 24) == std::vector<std::size_t>{0}));   // both ends in one unit
    BOOST_TEST((partial(1024, 100) == std::vector<std::size_t>{0}));  // the tail only
    BOOST_TEST((partial(1000, 536) == std::vector<std::size_t>{0}));  // the head only
    BOOST_TEST(partial(1024, 1024).empty());
    BOOST_TEST(detail::unit_cover::of(1000, 100'000, 512, 4096).length == 4096u - 488u);
    BOOST_TEST(detail::bytes_found(10, 100, 5) == 0u);
    BOOST_TEST(detail::bytes_found(10, 100, 50) == 40u);
    BOOST_TEST(detail::bytes_found(10, 100, 500) == 100u);
}

BOOST_AUTO_TEST_CASE(every_way_writes_an_unaligned_edge_to_the_same_bytes_and_size) {
    temp_path path("unit_edge_write");
    std::size_t unit;
    {
        nvmeio_test::spew_pattern(path.str(), 1, 0);
        unit = file(path.str(), open_mode::read, direct_io::on).required_alignment();
    }
    const std::size_t size = 3 * unit + 123;
    const bytes initial = nvmeio_test::pattern(size, 1);
    bytes model;
    for (const auto& [name, move] : ways([&] { return model; })) {
        for (const edge_case& e : edge_cases(unit)) {
            BOOST_TEST_CONTEXT(name << ": write of " << e.length << " at " << e.position
                                    << " (unit " << unit << ", file " << size << ")") {
                nvmeio_test::spew(path.str(), initial.data(), size);
                model = initial;
                bytes data = nvmeio_test::pattern(e.length, e.position + e.length);
                {
                    file f(path.str(), open_mode::read_write, direct_io::on);
                    BOOST_TEST_REQUIRE(f.is_direct());
                    (void)move(f, true, e.position, data.data(), e.length);
                }
                model.resize(std::max<std::size_t>(model.size(), e.position + e.length));
                std::memcpy(model.data() + e.position, data.data(), e.length);
                const bytes got = nvmeio_test::slurp(path.str());
                BOOST_TEST(got.size() == model.size());
                BOOST_TEST((got == model));
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(every_way_reads_an_unaligned_edge_to_the_same_bytes_and_count) {
    temp_path path("unit_edge_read");
    nvmeio_test::spew_pattern(path.str(), 1, 0);
    const std::size_t unit = file(path.str(), open_mode::read, direct_io::on).required_alignment();
    const std::size_t size = 3 * unit + 123;
    const bytes model = nvmeio_test::pattern(size, 2);
    nvmeio_test::spew(path.str(), model.data(), size);
    file f(path.str(), open_mode::read, direct_io::on);
    BOOST_TEST_REQUIRE(f.is_direct());
    for (const auto& [name, move] : ways([&] { return model; })) {
        for (const edge_case& e : edge_cases(unit)) {
            BOOST_TEST_CONTEXT(name << ": read of " << e.length << " at " << e.position << " (unit "
                                    << unit << ", file " << size << ")") {
                bytes data(e.length, 0xEE);
                const std::size_t got = move(f, false, e.position, data.data(), e.length);
                const std::size_t want =
                    e.position < size ? std::min<std::size_t>(e.length, size - e.position) : 0;
                BOOST_TEST(got == want);
                BOOST_TEST(std::memcmp(data.data(),
                                       model.data() + std::min<std::size_t>(e.position, size),
                                       std::min(got, want)) == 0);
            }
        }
    }
}

#define BOOST_TEST_MODULE batch
#include <unistd.h>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nvmeio/batch.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend_support.hpp"
#include "offset_fault_backend.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t block = 64 * 1024;

// `count` requests laid end to end in the file with lengths 1..3 blocks plus a ragged part,
// each with its own buffer, listed in a shuffled order.
struct layout {
    std::vector<std::vector<unsigned char>> buffers;
    std::vector<batch_request> requests;
    std::vector<unsigned char> file_bytes;
};

layout make_layout(std::size_t count, std::uint64_t seed, bool ragged) {
    layout l;
    std::mt19937_64 random(seed);
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < count; ++i) {
        std::size_t length = (1 + random() % 3) * 4096 * (1 + random() % 4);
        if (ragged) length += random() % 4096;
        l.buffers.push_back(nvmeio_test::pattern(length, seed * 1000 + i));
        l.requests.push_back({l.buffers.back(), offset});
        l.file_bytes.insert(l.file_bytes.end(), l.buffers.back().begin(), l.buffers.back().end());
        offset += length;
    }
    std::shuffle(l.requests.begin(), l.requests.end(), random);
    return l;
}

// Fresh buffers for reading `l` back.
std::vector<std::vector<unsigned char>> blank_buffers(layout& l) {
    std::vector<std::vector<unsigned char>> out;
    for (batch_request& r : l.requests) {
        out.emplace_back(r.memory.size(), 0xEE);
        r.memory = out.back();
    }
    return out;
}

template <class Context>
void scattered_round_trip(Context& context, bool ragged, batch_options options = {}) {
    temp_path path("batch");
    layout l = make_layout(120, ragged ? 7 : 8, ragged);
    if (options.max_io_size == batch_options{}.max_io_size) options.max_io_size = 1 << 20;
    {
        file out(path.str(), open_mode::write);
        const batch_outcome w = write_batch(context, out, l.requests, options);
        BOOST_TEST(w.first_failure() == l.requests.size());
        BOOST_TEST(w.ios < l.requests.size() / 4);  // coalesced
        BOOST_TEST(w.bounced_bytes == l.file_bytes.size());
        for (std::size_t i = 0; i < l.requests.size(); ++i)
            BOOST_TEST(w.results[i].bytes == l.requests[i].memory.size());
    }
    BOOST_TEST((nvmeio_test::slurp(path.str()) == l.file_bytes));
    std::vector<std::vector<unsigned char>> expected;
    for (const batch_request& r : l.requests)
        expected.emplace_back(static_cast<unsigned char*>(r.memory.data()),
                              static_cast<unsigned char*>(r.memory.data()) + r.memory.size());
    auto targets = blank_buffers(l);
    file in(path.str(), open_mode::read);
    const batch_outcome got = read_batch(context, in, l.requests, options);
    for (std::size_t i = 0; i < l.requests.size(); ++i) {
        BOOST_TEST(got.results[i].bytes == l.requests[i].memory.size());
        BOOST_TEST((targets[i] == expected[i]), "request " << i);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(scattered_buffers_round_trip_through_coalesced_ios, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    basic_aio_context<TestType> context({8, block});
    for (bool ragged : {false, true}) {
        BOOST_TEST_CONTEXT("ragged=" << ragged) {
            scattered_round_trip(context, ragged);
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(parallel_batch_round_trips_and_keeps_ragged_ends, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    parallel_options o;
    o.threads = 3;
    o.context = {8, block};
    basic_parallel_context<TestType> context(o);
    for (bool ragged : {false, true}) {
        BOOST_TEST_CONTEXT("ragged=" << ragged) {
            scattered_round_trip(context, ragged);
        }
    }
}

BOOST_AUTO_TEST_CASE(parallel_ragged_writes_with_gaps_keep_every_byte) {
    // Groups ending off the alignment, separated by gaps: a trim after one of them must never
    // cut the bytes of a later one.
    parallel_options o;
    o.threads = 4;
    o.context = {4, block};
    parallel_context context(o);
    temp_path path("batch_gaps");
    std::vector<std::vector<unsigned char>> buffers;
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < 32; ++i) {
        buffers.push_back(nvmeio_test::pattern(3 * 4096 + 100 + i, 300 + i));
        requests.push_back({buffers.back(), i * 4 * 4096});
    }
    {
        file out(path.str(), open_mode::write);
        (void)write_batch(context, out, requests);
    }
    const auto bytes = nvmeio_test::slurp(path.str());
    BOOST_TEST_REQUIRE(bytes.size() == requests.back().offset + requests.back().memory.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        BOOST_TEST(std::memcmp(bytes.data() + requests[i].offset, buffers[i].data(),
                               buffers[i].size()) == 0,
                   "request " << i);
    }
}

BOOST_AUTO_TEST_CASE(buffers_adjacent_in_memory_go_straight_without_copies) {
    temp_path path("batch_flat");
    const std::size_t count = 16;
    aligned_buffer flat(count * block);
    nvmeio_test::fill_pattern(flat.data(), flat.size(), 12);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i)
        requests.push_back({nvmeio::memory(flat).slice(i * block, block), i * block});
    aio_context context({8, block});
    batch_options options;
    options.max_io_size = 4 * block;
    file f(path.str(), open_mode::write);
    const batch_outcome w = write_batch(context, f, requests, options);
    BOOST_TEST(w.ios == count / 4);  // max_io_size respected
    BOOST_TEST(w.bounced_bytes == 0u);
    const auto bytes = nvmeio_test::slurp(path.str());
    BOOST_TEST_REQUIRE(bytes.size() == flat.size());
    BOOST_TEST(std::memcmp(bytes.data(), flat.data(), flat.size()) == 0);
}

BOOST_AUTO_TEST_CASE(gaps_split_ios_and_requests_past_the_end_report_what_exists) {
    temp_path path("batch_eof");
    const std::size_t size = 5 * 4096 + 10;
    const auto bytes = nvmeio_test::pattern(size, 13);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    aio_context context({4, block});
    file in(path.str(), open_mode::read);
    std::vector<std::vector<unsigned char>> targets(4, std::vector<unsigned char>(2 * 4096));
    const std::vector<batch_request> requests = {
        {nvmeio::memory(targets[0]).first(4096), 0},      // alone (a gap follows)
        {targets[1], 8192},                               // with the next one
        {targets[2], 16384},                              // straddles the end: 4096 + 10 exist
        {nvmeio::memory(targets[3]).first(4096), 40960},  // wholly past the end
    };
    const batch_outcome got = read_batch(context, in, requests);
    BOOST_TEST(got.ios == 3u);
    BOOST_TEST(got.results[0].bytes == 4096u);
    BOOST_TEST(got.results[1].bytes == 2 * 4096u);
    BOOST_TEST(got.results[2].bytes == 4096u + 10);
    BOOST_TEST(got.results[3].bytes == 0u);
    BOOST_TEST(std::memcmp(targets[0].data(), bytes.data(), 4096) == 0);
    BOOST_TEST(std::memcmp(targets[1].data(), bytes.data() + 8192, 2 * 4096) == 0);
    BOOST_TEST(std::memcmp(targets[2].data(), bytes.data() + 16384, 4096 + 10) == 0);
}

BOOST_AUTO_TEST_CASE(a_failed_io_fails_its_requests_only_and_read_batch_throws_it) {
    temp_path path("batch_fault");
    const std::size_t size = 8 * block;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(size, 14).data(), size);
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, block});
    file in(path.str(), open_mode::read);
    std::vector<std::vector<unsigned char>> targets(8, std::vector<unsigned char>(block));
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < 8; ++i)
        requests.push_back({targets[i], (7 - i) * block});
    batch_options options;
    options.max_io_size = 2 * block;  // four I/Os of two requests
    nvmeio_test::offset_fault_backend::fail_offset = 4 * block + 5;
    std::error_code ec;
    const batch_outcome got = transfer_batch(context, in, operation::read, requests, options, ec);
    BOOST_TEST(ec == std::make_error_code(std::errc::io_error));
    // File blocks 4 and 5 share an I/O: requests 3 (offset 4 blocks) and 2 (offset 5 blocks).
    for (std::size_t i = 0; i < 8; ++i) {
        const bool failed = i == 2 || i == 3;
        BOOST_TEST(static_cast<bool>(got.results[i].failure) == failed, "request " << i);
        BOOST_TEST(got.results[i].bytes == (failed ? 0u : block), "request " << i);
    }
    BOOST_TEST(got.first_failure() == 2u);
    try {
        (void)read_batch(context, in, requests, options);
        BOOST_ERROR("the injected failure was not thrown");
    } catch (const io_error& e) {
        BOOST_TEST(e.code() == std::error_code(EIO, std::generic_category()));
        BOOST_TEST(e.offset() == 4 * block);
    }
    // transfer_batch throws the same, after trying every request: the other six are read.
    for (std::vector<unsigned char>& t : targets)
        std::fill(t.begin(), t.end(), 0);
    try {
        (void)transfer_batch(context, in, operation::read, requests, options);
        BOOST_ERROR("the injected failure was not thrown");
    } catch (const io_error& e) {
        BOOST_TEST(e.offset() == 4 * block);
    }
    const auto bytes = nvmeio_test::pattern(size, 14);
    BOOST_TEST(std::memcmp(targets[0].data(), bytes.data() + 7 * block, block) == 0);
    BOOST_TEST(std::memcmp(targets[7].data(), bytes.data(), block) == 0);
    // read_batch's std::error_code form reports it with every request's record.
    const batch_outcome records = read_batch(context, in, requests, options, ec);
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    BOOST_TEST(records.first_failure() == 2u);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    const batch_outcome clean = read_batch(context, in, requests, options, ec);
    BOOST_TEST(!ec);
    BOOST_TEST(clean.first_failure() == requests.size());
}

BOOST_AUTO_TEST_CASE(write_batch_error_code_form_reports_the_first_failed_request) {
    temp_path path("batch_write_fault");
    const std::size_t size = 4 * block;
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, block});
    file out(path.str(), open_mode::write);
    const auto bytes = nvmeio_test::pattern(size, 15);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < 4; ++i)
        requests.push_back(
            {nvmeio::memory(const_cast<unsigned char*>(bytes.data()) + i * block, block),
             i * block});
    batch_options options;
    options.max_io_size = block;  // one I/O per request
    nvmeio_test::offset_fault_backend::fail_offset = 2 * block;
    std::error_code ec;
    const batch_outcome got = write_batch(context, out, requests, options, ec);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(ec == std::error_code(EIO, std::generic_category()));
    BOOST_TEST(got.first_failure() == 2u);
    BOOST_TEST(got.results[3].bytes == block);
    BOOST_CHECK_THROW(
        {
            nvmeio_test::offset_fault_backend::fail_offset = block;
            const batch_outcome thrown = write_batch(context, out, requests, options);
            (void)thrown;
        },
        io_error);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
}

BOOST_AUTO_TEST_CASE(unaligned_offset_not_continuing_a_request_is_rejected_by_index) {
    temp_path path("batch_rules");
    nvmeio_test::spew(path.str(), std::string(4 * 4096, 'z').data(), 4 * 4096);
    aio_context context({4, block});
    file in(path.str(), open_mode::read);
    std::vector<unsigned char> a(4096), b(100);
    const std::vector<batch_request> requests = {{a, 0}, {b, 5000}};
    try {
        (void)read_batch(context, in, requests);
        BOOST_ERROR("an unaligned offset was accepted");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("batch request 1") != std::string::npos, what);
        BOOST_TEST(what.find("offset 5000") != std::string::npos, what);
    }
    // Continuing the previous request, the same offset is fine.
    std::vector<unsigned char> c(904);
    const std::vector<batch_request> joined = {{a, 0}, {c, 4096}, {b, 5000}};
    const batch_outcome got = read_batch(context, in, joined);
    BOOST_TEST(got.ios == 1u);
    BOOST_TEST(got.results[2].bytes == 100u);
    BOOST_TEST(b[99] == 'z');

    // The same rule, asked before opening: in file order, whatever the caller's order; empty
    // requests do not count.
    BOOST_TEST(!offsets_fit_direct(requests, 4096));
    BOOST_TEST(offsets_fit_direct(joined, 4096));
    BOOST_TEST(offsets_fit_direct({joined[2], joined[0], joined[1]}, 4096));
    BOOST_TEST(!offsets_fit_direct({joined[2], joined[0]}, 4096));
    BOOST_TEST(offsets_fit_direct({{mutable_memory{}, 7}, {a, 0}}, 4096));
    BOOST_TEST(offsets_fit_direct({joined[2]}, 4));
}

namespace {

// Runs `run(name, context)` on every context a batch runs on: an aio context and a three-thread
// parallel context of each backend in this build.
template <class Run>
void on_every_context(Run&& run) {
    nvmeio_test::for_each_backend([&](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        basic_aio_context<backend> single({8, block});
        run(std::string(backend::name) + " aio context", single);
        parallel_options o;
        o.threads = 3;
        o.context = {8, block};
        basic_parallel_context<backend> parallel(o);
        run(std::string(backend::name) + " parallel context", parallel);
    });
}

// A batch of requests given as (length, offset), each with its own buffer of a pattern; a
// length of 0 is an empty request.
struct shaped_batch {
    std::vector<std::vector<unsigned char>> buffers;
    std::vector<batch_request> requests;

    explicit shaped_batch(const std::vector<std::pair<std::size_t, std::uint64_t>>& shape) {
        buffers.reserve(shape.size());
        for (const auto& [length, offset] : shape) {
            buffers.push_back(nvmeio_test::pattern(length, 900 + buffers.size()));
            requests.push_back(
                {length == 0 ? mutable_memory{} : mutable_memory(buffers.back()), offset});
        }
    }
};

}  // namespace

// Two write requests of one batch whose bytes overlap are refused, naming both by index with
// their lengths and offsets, before any byte moves: on every context, O_DIRECT and buffered, in
// the throwing and the std::error_code form. The first two shapes cut the file short or put old
// bytes back when they were taken (a shorter request first at the same offset; a short one
// inside a longer one, its padded unit merged from bytes read before the longer one's landed);
// the last two share bytes across a request between them in the caller's order, and whole
// aligned units.
BOOST_AUTO_TEST_CASE(overlapping_write_requests_are_refused_naming_both_before_any_byte_moves) {
    struct overlap_case {
        const char* name;
        std::size_t old_size;
        std::vector<std::pair<std::size_t, std::uint64_t>> shape;  // (length, offset)
        std::string named;                                         // the pair the message names
        std::string shared;                                        // the bytes they share
    };
    const std::vector<overlap_case> cases = {
        {"a shorter request first at the same offset, on an empty file",
         0,
         {{600, 0}, {1000, 0}},
         "batch requests 0 (600 bytes at offset 0) and 1 (1000 bytes at offset 0)",
         "[0, 600)"},
        {"a short request inside a longer one",
         8192,
         {{4096, 0}, {10, 512}},
         "batch requests 0 (4096 bytes at offset 0) and 1 (10 bytes at offset 512)",
         "[512, 522)"},
        {"apart in the caller's order, with an empty request between",
         8192,
         {{8192, 0}, {0, 5000}, {4096, 16384}, {100, 4096}},
         "batch requests 0 (8192 bytes at offset 0) and 3 (100 bytes at offset 4096)",
         "[4096, 4196)"},
        {"the same aligned units twice",
         0,
         {{4096, 4096}, {8192, 0}},
         "batch requests 0 (4096 bytes at offset 4096) and 1 (8192 bytes at offset 0)",
         "[4096, 8192)"},
    };
    on_every_context([&](const std::string& context_name, auto& context) {
        for (const direct_io direct : {direct_io::on, direct_io::off}) {
            for (const overlap_case& c : cases) {
                for (const bool throwing : {true, false}) {
                    BOOST_TEST_CONTEXT(context_name << ", " << to_string(direct) << ", " << c.name
                                                    << (throwing ? ", throwing" : ", error_code")) {
                        temp_path path("batch_overlap");
                        const auto old = nvmeio_test::pattern(c.old_size, 77);
                        nvmeio_test::spew(path.str(), old.data(), old.size());
                        shaped_batch batch(c.shape);
                        file f(path.str(), open_mode::read_write, direct);
                        const std::string what =
                            nvmeio_test::message_of<std::invalid_argument>([&] {
                                if (throwing) {
                                    (void)write_batch(context, f, batch.requests);
                                } else {
                                    std::error_code ec;
                                    (void)write_batch(context, f, batch.requests, {}, ec);
                                }
                            });
                        BOOST_TEST(nvmeio_test::contains(what, c.named), what);
                        BOOST_TEST(nvmeio_test::contains(what, c.shared), what);
                        BOOST_TEST(nvmeio_test::contains(what, path.str()), what);
                        BOOST_TEST((nvmeio_test::slurp(path.str()) == old));
                    }
                }
            }
        }
    });
}

// Overlapping requests are a write's concern only: read requests may share bytes, and each gets
// the file's. The shapes start on the file's O_DIRECT unit `u`: two from offset 0, the shorter
// first, and a short one inside a longer one.
BOOST_AUTO_TEST_CASE(overlapping_read_requests_each_get_the_files_bytes) {
    on_every_context([&](const std::string& context_name, auto& context) {
        for (const direct_io direct : {direct_io::on, direct_io::off}) {
            BOOST_TEST_CONTEXT(context_name << ", " << to_string(direct)) {
                temp_path path("batch_overlap_read");
                nvmeio_test::spew(path.str(), nullptr, 0);
                file f(path.str(), open_mode::read, direct);
                const std::size_t u = f.alignment().offset;
                const auto bytes = nvmeio_test::pattern(std::max<std::size_t>(8192, 2 * u), 78);
                nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
                shaped_batch batch(
                    {{600, 0}, {1000, 0}, {10, u}, {std::max<std::size_t>(4096, 2 * u), 0}});
                const batch_outcome got = read_batch(context, f, batch.requests);
                for (std::size_t i = 0; i < batch.requests.size(); ++i) {
                    const batch_request& r = batch.requests[i];
                    BOOST_TEST(got.results[i].bytes == r.memory.size(), "request " << i);
                    BOOST_TEST(
                        std::memcmp(r.memory.data(), bytes.data() + r.offset, r.memory.size()) == 0,
                        "request " << i);
                }
            }
        }
    });
}

// Write requests that share an O_DIRECT unit but no bytes (adjacent ones, ones with an empty
// request between them, and, where the file takes any offset, ones with a gap inside the unit)
// leave exactly their bytes, the file's bytes around them, and a size of max(old size, furthest
// end): on every context, O_DIRECT and buffered, over an empty file, one that ends inside the
// unit and one that ends past it.
BOOST_AUTO_TEST_CASE(write_requests_sharing_a_unit_but_no_bytes_keep_every_byte_and_the_size) {
    using shape = std::vector<std::pair<std::size_t, std::uint64_t>>;
    const std::vector<std::pair<const char*, shape>> shapes = {
        {"adjacent, the later one first", {{200, 100}, {100, 0}}},
        {"adjacent, the furthest end not last", {{400, 600}, {600, 0}}},
        {"adjacent across a unit's end", {{100, 5000}, {5000, 0}}},
        {"adjacent with an empty request between", {{100, 0}, {0, 50}, {0, 100}, {200, 100}}},
        {"a gap inside the unit", {{100, 200}, {100, 0}}},  // buffered only: O_DIRECT refuses
    };
    on_every_context([&](const std::string& context_name, auto& context) {
        for (const direct_io direct : {direct_io::on, direct_io::off}) {
            for (const auto& [name, s] : shapes) {
                const bool gap = std::string(name) == "a gap inside the unit";
                if (gap && direct == direct_io::on) continue;
                for (const std::size_t old_size :
                     {std::size_t{0}, std::size_t{150}, std::size_t{8192}}) {
                    BOOST_TEST_CONTEXT(context_name << ", " << to_string(direct) << ", " << name
                                                    << ", old size " << old_size) {
                        temp_path path("batch_shared_unit");
                        const auto old = nvmeio_test::pattern(old_size, 79);
                        nvmeio_test::spew(path.str(), old.data(), old.size());
                        shaped_batch batch(s);
                        std::vector<unsigned char> expected = old;
                        for (const batch_request& r : batch.requests) {
                            const std::size_t end = r.offset + r.memory.size();
                            if (expected.size() < end) expected.resize(end, 0);
                            if (r.memory.size() != 0)
                                std::memcpy(expected.data() + r.offset, r.memory.data(),
                                            r.memory.size());
                        }
                        {
                            file f(path.str(), open_mode::read_write, direct);
                            const batch_outcome w = write_batch(context, f, batch.requests);
                            for (std::size_t i = 0; i < batch.requests.size(); ++i)
                                BOOST_TEST(w.results[i].bytes == batch.requests[i].memory.size(),
                                           "request " << i);
                        }
                        BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
                    }
                }
            }
        }
    });
}

// Among a wave's padded writes with one padded end, the file is kept to the furthest end the
// caller wrote, whichever comes first. Batches cannot reach this since overlapping write requests
// are refused (distinct groups start on distinct units); the merge step is pinned on its own.
BOOST_AUTO_TEST_CASE(equal_padded_ends_keep_the_furthest_wanted_end) {
    aio_context context({4, block});
    temp_path path("batch_equal_padded_ends");
    nvmeio_test::spew(path.str(), nullptr, 0);
    file f(path.str(), open_mode::read_write);
    const std::size_t unit = f.required_alignment();
    BOOST_TEST_REQUIRE(unit >= 4u);
    for (const bool longer_first : {true, false}) {
        BOOST_TEST_CONTEXT("the longer one first: " << longer_first) {
            const std::size_t shorter = unit / 4, longer = unit / 2;
            detail::batch_wave w;
            for (const std::size_t wanted :
                 {longer_first ? longer : shorter, longer_first ? shorter : longer}) {
                w.segments.push_back({nullptr, 0, unit, nullptr, 0, {}});
                w.wanted.push_back(wanted);
                w.first_piece.push_back(0);
                ++w.padded;
            }
            detail::merged_units merged;
            const auto [padded_end, keep] =
                detail::read_merged_units(context, f, w, merged, {}, nullptr, block);
            BOOST_TEST(padded_end == unit);
            BOOST_TEST(keep == longer);
        }
    }
}

// libaio, watching the requests over bounce memory (memory outside every `caller` range): their
// bytes in all, the most in flight at once, and any submitted over memory that a request still in
// flight uses.
class recording_backend {
  public:
    static constexpr const char* name = "recording";
    struct range {
        const unsigned char* begin;
        const unsigned char* end;
    };
    static inline std::vector<range> caller;
    static inline std::size_t bounced_bytes = 0;
    static inline std::size_t most_bounced_in_flight = 0;
    static inline std::size_t overlaps = 0;
    static inline std::set<const unsigned char*> bounced_addresses;  // where bounced requests began

    static void watch(const std::vector<batch_request>& requests) {
        caller.clear();
        for (const batch_request& r : requests) {
            const auto* begin = static_cast<const unsigned char*>(r.memory.data());
            caller.push_back({begin, begin + r.memory.size()});
        }
        bounced_bytes = most_bounced_in_flight = overlaps = 0;
        bounced_addresses.clear();
    }

    explicit recording_backend(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        const int rc = real_.submit(requests, count);
        for (int i = 0; i < rc; ++i) {
            const auto* begin = static_cast<const unsigned char*>(requests[i].buffer);
            const range r{begin, begin + requests[i].length};
            for (const flight& other : in_flight_)
                if (r.begin < other.memory.end && other.memory.begin < r.end) ++overlaps;
            const bool bounced = std::none_of(caller.begin(), caller.end(), [&](const range& c) {
                return r.begin >= c.begin && r.end <= c.end;
            });
            in_flight_.push_back({requests[i].user_data, r, bounced});
            if (!bounced) continue;
            bounced_addresses.insert(begin);
            bounced_bytes += requests[i].length;
            bounced_in_flight_ += requests[i].length;
            most_bounced_in_flight = std::max(most_bounced_in_flight, bounced_in_flight_);
        }
        return rc;
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        const int rc = real_.reap(out, min, max, timeout);
        for (int i = 0; i < rc; ++i) {
            const auto done = std::find_if(in_flight_.begin(), in_flight_.end(), [&](auto& f) {
                return f.user_data == out[i].user_data;
            });
            if (done == in_flight_.end()) continue;
            if (done->bounced)
                bounced_in_flight_ -=
                    static_cast<std::size_t>(done->memory.end - done->memory.begin);
            in_flight_.erase(done);
        }
        return rc;
    }
    unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

  private:
    struct flight {
        std::uint64_t user_data;
        range memory;
        bool bounced;
    };
    libaio_backend real_;
    std::vector<flight> in_flight_;
    std::size_t bounced_in_flight_ = 0;
};

// A write reserves (fallocate) only the runs of adjacent segments that end past the file's size;
// one inside it, a KV block rewritten in place, costs nothing.
BOOST_AUTO_TEST_CASE(writes_reserve_only_the_runs_that_end_past_the_file) {
    using detail::segment;
    const std::vector<segment> segments = {
        {nullptr, 0, 4096, nullptr, 0, {}},
        {nullptr, 4096, 4096, nullptr, 0, {}},   // one run to 8 KiB
        {nullptr, 16384, 4096, nullptr, 0, {}},  // to 20 KiB
        {nullptr, 24576, 100, nullptr, 0, {}},
        {nullptr, 24676, 5000, nullptr, 0, {}},  // to 29,676
    };
    const auto runs_past = [&](std::uint64_t size) {
        std::vector<std::pair<std::size_t, std::size_t>> runs;
        detail::for_each_run_past(segments.data(), segments.size(), size,
                                  [&](std::size_t a, std::size_t b) { runs.emplace_back(a, b); });
        return runs;
    };
    using runs = std::vector<std::pair<std::size_t, std::size_t>>;
    BOOST_TEST((runs_past(1u << 20) == runs{}));
    BOOST_TEST((runs_past(29676) == runs{}));
    BOOST_TEST((runs_past(29675) == runs{{3, 4}}));
    BOOST_TEST((runs_past(8192) == runs{{2, 2}, {3, 4}}));
    BOOST_TEST((runs_past(0) == runs{{0, 1}, {2, 2}, {3, 4}}));
    // A segment that arrives failed (its merge read failed) is moved by nobody: no run has it.
    std::vector<segment> failed = segments;
    failed[3].failure = {std::make_error_code(std::errc::io_error), "read", "", 24576, 100};
    using detail::for_each_run_past;
    runs seen;
    for_each_run_past(failed.data(), failed.size(), 0,
                      [&](std::size_t a, std::size_t b) { seen.emplace_back(a, b); });
    BOOST_TEST((seen == runs{{0, 1}, {2, 2}, {4, 4}}));
}

// A written request within one unit whose merge read fails writes nothing and leaves the file as
// it was, its size too: whether the file ended at that unit's end, inside it (before or past the
// writer's end) or before it. (The size was cut to the writer's end when the file ended at the
// unit's end, and the range reserved and so grown when it ended before.) A longer request's other
// bytes go in other I/Os, which may be written, as with any failed write.
BOOST_AUTO_TEST_CASE(a_failed_merge_read_leaves_the_file_as_it_was) {
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, block});
    temp_path path("batch_merge_fails");
    nvmeio_test::spew(path.str(), nullptr, 0);
    const std::size_t unit = file(path.str(), open_mode::read).required_alignment();
    BOOST_TEST_REQUIRE(unit > 1u);  // O_DIRECT: a ragged write merges its last unit
    std::vector<unsigned char> bytes = nvmeio_test::pattern(unit / 2, 41);
    for (const std::size_t size : {unit, unit / 4, 3 * unit / 4, std::size_t{0}}) {
        BOOST_TEST_CONTEXT("the file's size " << size) {
            const std::vector<unsigned char> old = nvmeio_test::pattern(size, 42);
            nvmeio_test::spew(path.str(), old.data(), old.size());
            file f(path.str(), open_mode::read_write);
            nvmeio_test::offset_fault_backend::fail_offset = 0;
            std::error_code ec;
            const batch_outcome got =
                write_batch(context, f, std::vector<batch_request>{{bytes, 0}}, {}, ec);
            nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
            BOOST_TEST(ec == std::make_error_code(std::errc::io_error));
            BOOST_TEST(got.results[0].bytes == 0u);
            BOOST_TEST(got.results[0].failure.operation == "read (merging an unaligned write)");
            BOOST_TEST((nvmeio_test::slurp(path.str()) == old));
        }
    }
}

// KV blocks at odd addresses (no O_DIRECT alignment takes them), at every other slot: each is
// copied through one of a few staging slots as its request goes out or comes back, so the bounce
// memory is a handful of blocks whatever the batch's size (`bounce_size` caps it further), none
// of it is reused while the kernel still uses it, and every byte arrives. A read meeting the end
// of the file inside the last block moves the bytes before it and goes no further.
BOOST_AUTO_TEST_CASE(scattered_unaligned_blocks_go_through_a_few_reused_staging_slots) {
    const unsigned depth = 8;
    basic_aio_context<recording_backend> context({depth, block});
    const std::size_t count = 64;
    std::vector<unsigned char> slab(count * block + 1);
    unsigned char* first = slab.data() + 1;  // odd: every block is staged
    const std::vector<unsigned char> bytes = nvmeio_test::pattern(count * block, 77);
    std::memcpy(first, bytes.data(), bytes.size());
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i)
        requests.push_back({nvmeio::memory(slab).slice(1 + i * block, block), 2 * i * block});
    for (const std::size_t slots : {std::size_t{depth}, std::size_t{2}}) {
        BOOST_TEST_CONTEXT("staging slots " << slots) {
            batch_options options;
            if (slots != depth) options.bounce_size = slots * block;
            const auto check_staged = [&](const batch_outcome& outcome, std::size_t moved) {
                BOOST_TEST(outcome.ios == count);
                BOOST_TEST(outcome.bounced_bytes == count * block);
                BOOST_TEST(recording_backend::bounced_bytes >= moved);
                BOOST_TEST(recording_backend::bounced_addresses.size() <= slots);
                BOOST_TEST(recording_backend::most_bounced_in_flight <= slots * block);
                BOOST_TEST(recording_backend::overlaps == 0u);
            };
            temp_path path("batch_staged");
            recording_backend::watch(requests);
            {
                file out(path.str(), open_mode::write);
                check_staged(write_batch(context, out, requests, options), count * block);
            }
            const std::vector<unsigned char> written = nvmeio_test::slurp(path.str());
            BOOST_TEST_REQUIRE(written.size() == (2 * count - 1) * block);
            for (std::size_t i = 0; i < count; ++i) {
                BOOST_TEST(std::memcmp(written.data() + 2 * i * block, bytes.data() + i * block,
                                       block) == 0,
                           "block " << i);
            }
            // The file now ends 1000 bytes into the last block.
            const std::size_t short_by = block - 1000;
            BOOST_TEST_REQUIRE(
                ::truncate(path.str().c_str(), static_cast<off_t>(written.size() - short_by)) == 0);
            std::memset(first, 0, count * block);
            recording_backend::watch(requests);
            file in(path.str(), open_mode::read);
            std::error_code ec;
            const batch_outcome got = read_batch(context, in, requests, options, ec);
            check_staged(got, count * block - short_by);
            BOOST_TEST(got.results.back().bytes == 1000u);
            BOOST_TEST(std::memcmp(first, bytes.data(), bytes.size() - short_by) == 0);
            BOOST_TEST(std::count(first + count * block - short_by, first + count * block, 0) ==
                       static_cast<std::ptrdiff_t>(short_by));
            std::memcpy(first, bytes.data(), bytes.size());
        }
    }
}

// About 5 MiB of unaligned buffers with 256 KiB of bounce memory at depth 8 of 64 KiB: the
// bounced requests in flight never hold more than that (8 x 64 KiB would), never over memory a
// request in flight still uses; every byte arrives, ragged or not, and a run longer than the
// bounce memory goes through it in turn.
BOOST_AUTO_TEST_CASE(bounced_bytes_beyond_bounce_size_go_through_reused_slots) {
    basic_aio_context<recording_backend> context({8, block});
    batch_options options;
    options.max_io_size = 128 * 1024;
    options.bounce_size = 256 * 1024;
    for (bool ragged : {false, true}) {
        BOOST_TEST_CONTEXT("ragged=" << ragged) {
            temp_path path("batch_waves");
            layout l = make_layout(120, ragged ? 7 : 8, ragged);
            // Ragged requests join into one run of about 2.5 MiB (no aligned offset to cut it
            // at), which goes through the staging slots in chunks: the bound holds for it too.
            const std::size_t bound = options.bounce_size;
            // What the backend saw of one batch: every byte bounced, within the bound, never
            // over memory in flight.
            const auto check_waves = [&](const batch_outcome& outcome) {
                BOOST_TEST(outcome.bounced_bytes == l.file_bytes.size());
                if (ragged) {  // one I/O, longer than the bounce memory
                    BOOST_TEST(outcome.ios == 1u);
                    BOOST_TEST(l.file_bytes.size() > 4 * options.bounce_size);
                }
                BOOST_TEST(recording_backend::bounced_bytes >= l.file_bytes.size());
                BOOST_TEST(recording_backend::most_bounced_in_flight > 0u);
                BOOST_TEST(recording_backend::most_bounced_in_flight <= bound);
                BOOST_TEST(recording_backend::overlaps == 0u);
            };
            recording_backend::watch(l.requests);
            {
                file out(path.str(), open_mode::write);
                check_waves(write_batch(context, out, l.requests, options));
            }
            BOOST_TEST((nvmeio_test::slurp(path.str()) == l.file_bytes));

            std::vector<std::vector<unsigned char>> expected;
            for (const batch_request& r : l.requests)
                expected.emplace_back(
                    static_cast<unsigned char*>(r.memory.data()),
                    static_cast<unsigned char*>(r.memory.data()) + r.memory.size());
            auto targets = blank_buffers(l);
            recording_backend::watch(l.requests);
            file in(path.str(), open_mode::read);
            check_waves(read_batch(context, in, l.requests, options));
            for (std::size_t i = 0; i < l.requests.size(); ++i)
                BOOST_TEST((targets[i] == expected[i]), "request " << i);
        }
    }
}

// A context keeps its staging slots for the next batch. Slots that a small batch left few must
// still grow for a later, larger one, not cap it at what they hold: 256 bounced 4 KiB requests
// after a one-request batch still fill the queue.
BOOST_AUTO_TEST_CASE(staging_left_small_by_one_batch_grows_for_the_next) {
    basic_aio_context<recording_backend> context({32, block});
    temp_path path("batch_small_staging");
    // Ragged lengths: each request goes whole through a staging slot, padded to a unit.
    constexpr std::size_t count = 256, size = 4000;
    std::vector<unsigned char> memory(count * (size + 1) + 1, 7);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i)  // odd addresses: bounced; gaps: one group each
        requests.push_back({nvmeio::memory(memory).slice(1 + i * (size + 1), size), i * 8192});
    file out(path.str(), open_mode::write);
    (void)write_batch(context, out, {requests.front()});
    recording_backend::watch(requests);
    const batch_outcome outcome = write_batch(context, out, requests);
    BOOST_TEST(outcome.ios == count);
    BOOST_TEST(recording_backend::most_bounced_in_flight >= 16 * size);
    // Bounce memory of 16 units: the same requests within it, none over another in flight.
    batch_options waves;
    waves.bounce_size = 16 * 4096;
    recording_backend::watch(requests);
    (void)write_batch(context, out, requests, waves);
    BOOST_TEST(recording_backend::most_bounced_in_flight <= 16 * 4096);
    BOOST_TEST(recording_backend::overlaps == 0u);
    std::vector<unsigned char> back(count * (size + 1) + 1, 0);
    std::vector<batch_request> reads = requests;
    for (std::size_t i = 0; i < count; ++i)
        reads[i].memory = nvmeio::memory(back).slice(1 + i * (size + 1), size);
    recording_backend::watch(reads);
    file in(path.str(), open_mode::read);
    (void)read_batch(context, in, reads, waves);
    BOOST_TEST(recording_backend::most_bounced_in_flight <= 16 * 4096);
    for (std::size_t i = 0; i < count; ++i)
        BOOST_TEST(std::count(back.data() + 1 + i * (size + 1),
                              back.data() + 1 + i * (size + 1) + size, 7) == size,
                   "request " << i);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(aligned_scattered_buffers_go_member_by_member_without_copies,
                              TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    temp_path path("batch_members");
    std::vector<aligned_buffer> buffers;
    std::vector<batch_request> requests;
    std::vector<unsigned char> expected;
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < 24; ++i) {
        const std::size_t length = (1 + i % 4) * 16 * 1024;
        buffers.emplace_back(length);
        nvmeio_test::fill_pattern(buffers.back().data(), length, 500 + i);
        const auto* bytes = reinterpret_cast<const unsigned char*>(buffers.back().data());
        expected.insert(expected.end(), bytes, bytes + length);
        requests.push_back({buffers.back(), offset});
        offset += length;
    }
    std::reverse(requests.begin(), requests.end());
    basic_aio_context<TestType> context({4, block});
    batch_options options;
    options.min_direct_size = 4096;
    {
        file out(path.str(), open_mode::write);
        const batch_outcome w = write_batch(context, out, requests, options);
        BOOST_TEST(w.bounced_bytes == 0u);
    }
    BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
    for (aligned_buffer& b : buffers)
        std::memset(b.data(), 0, b.size());
    file in(path.str(), open_mode::read);
    const batch_outcome got = read_batch(context, in, requests, options);
    BOOST_TEST(got.bounced_bytes == 0u);
    std::vector<unsigned char> back;
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
        const auto* bytes = static_cast<const unsigned char*>(it->memory.data());
        back.insert(back.end(), bytes, bytes + it->memory.size());
    }
    BOOST_TEST((back == expected));
}

BOOST_AUTO_TEST_CASE(member_by_member_failure_fails_that_member_only) {
    temp_path path("batch_member_fault");
    const std::size_t count = 8;
    nvmeio_test::spew(path.str(), nvmeio_test::pattern(count * block, 15).data(), count * block);
    std::vector<aligned_buffer> buffers;
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i) {
        buffers.emplace_back(block);
        requests.push_back({buffers.back(), i * block});
    }
    basic_aio_context<nvmeio_test::offset_fault_backend> context({4, 16 * 1024});
    batch_options options;
    options.min_direct_size = 4096;
    file in(path.str(), open_mode::read);
    nvmeio_test::offset_fault_backend::fail_offset = 3 * block + 20000;
    std::error_code ec;
    const batch_outcome got = transfer_batch(context, in, operation::read, requests, options, ec);
    nvmeio_test::offset_fault_backend::fail_offset = ~std::uint64_t{0};
    BOOST_TEST(static_cast<bool>(ec));
    for (std::size_t i = 0; i < count; ++i) {
        BOOST_TEST(static_cast<bool>(got.results[i].failure) == (i == 3), "request " << i);
        BOOST_TEST(got.results[i].bytes == (i == 3 ? 0u : block), "request " << i);
    }
    BOOST_TEST(got.results[3].failure.offset == 3 * block + 16 * 1024);
    BOOST_TEST(got.bounced_bytes == 0u);
}

// Requests smaller than one alignment unit, or with ragged ends, scattered with gaps: each costs
// one queued I/O of whole units (the measured request count proves none went synchronously),
// reads are exact, writes merge the units with the file's bytes and leave the size right.
BOOST_AUTO_TEST_CASE_TEMPLATE(small_and_ragged_requests_go_through_the_queue_one_unit_each,
                              TestType, backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    basic_aio_context<TestType> context({16, block});
    for (const transfer_config& config : nvmeio_test::every_config()) {
        BOOST_TEST_CONTEXT(to_string(config.strategy) << "/" << to_string(config.submit)) {
            temp_path path("batch_small");
            const std::size_t count = 300;
            const std::size_t stride = 3 * 4096;
            // The file ends inside the last request's last unit: before its end (the file grows to
            // it) or after it (the file keeps its size), alternately.
            const std::size_t old_size =
                count * stride - (config.submit == submit_mode::block ? 10'000 : 7000);
            const auto old_bytes = nvmeio_test::pattern(old_size, 31);
            nvmeio_test::spew(path.str(), old_bytes.data(), old_bytes.size());
            std::vector<std::vector<unsigned char>> buffers;
            std::vector<batch_request> requests;
            std::vector<unsigned char> expected = old_bytes;
            for (std::size_t i = 0; i < count; ++i) {
                // 1 to 100 bytes, or a unit and a bit, at aligned offsets, in odd memory.
                const std::size_t length = i % 3 == 2 ? 4096 + 1 + i : 1 + i % 100;
                buffers.push_back(nvmeio_test::pattern(length + 1, 1000 + i));
                requests.push_back({nvmeio::memory(buffers.back()).slice(1, length), i * stride});
                if (expected.size() < i * stride + length) expected.resize(i * stride + length, 0);
                std::memcpy(expected.data() + i * stride, buffers.back().data() + 1, length);
            }
            batch_options options;
            options.config = config;
            options.config.measure = true;
            {
                file out(path.str(), open_mode::read_write);
                const batch_outcome w = write_batch(context, out, requests, options);
                // Each request ends inside a unit: the unit is read for merging, then the
                // request is written, one queued I/O each.
                BOOST_TEST(w.perf.requests == 2 * count);
                BOOST_TEST(w.perf.resubmissions == 0u);
            }
            BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
            std::vector<std::vector<unsigned char>> back;
            for (batch_request& r : requests) {
                back.emplace_back(r.memory.size() + 2, 0xEE);
                r.memory = nvmeio::memory(back.back()).slice(1, r.memory.size());
            }
            file in(path.str(), open_mode::read);
            const batch_outcome got = read_batch(context, in, requests, options);
            for (std::size_t i = 0; i < count; ++i) {
                BOOST_TEST_CONTEXT("request " << i) {
                    BOOST_TEST(got.results[i].bytes == requests[i].memory.size());
                    BOOST_TEST(std::memcmp(requests[i].memory.data(), expected.data() + i * stride,
                                           requests[i].memory.size()) == 0);
                    BOOST_TEST(back[i].front() == 0xEE);  // nothing written around the buffer
                    BOOST_TEST(back[i].back() == 0xEE);
                }
            }
            BOOST_TEST(got.perf.requests == count);
            std::size_t total = 0;
            for (const batch_request& r : requests)
                total += r.memory.size();
            BOOST_TEST(got.perf.bytes == total);
        }
    }
}

BOOST_AUTO_TEST_CASE(batch_options_config_reaches_the_engine) {
    temp_path path("batch_config");
    const std::size_t count = 64;
    aligned_buffer flat(count * 4096);
    nvmeio_test::fill_pattern(flat.data(), flat.size(), 3);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i)  // gaps: one I/O per request
        requests.push_back({nvmeio::memory(flat).slice(i * 4096, 4096), i * 2 * 4096});
    aio_context context({8, block});
    file f(path.str(), open_mode::write);
    for (submit_mode mode : {submit_mode::single, submit_mode::block}) {
        batch_options options;
        options.config = {strategy_kind::sequential, mode, true};
        const batch_outcome w = write_batch(context, f, requests, options);
        BOOST_TEST(w.perf.requests == count);
        BOOST_TEST(w.perf.bytes == count * 4096);
        BOOST_TEST(w.perf.elapsed_us > 0);
        BOOST_TEST(w.perf.completion.count == count);
        if (mode == submit_mode::single) {
            BOOST_TEST(w.perf.submit.count == count);
        } else {  // sequential, depth 8: rounds of 8 in paced calls of 1, 1, 2, 4
            BOOST_TEST(w.perf.submit.count == count / 8 * 4);
        }
    }
    batch_options quiet;  // not measuring: nothing is recorded
    const batch_outcome r = read_batch(context, f, requests, quiet);
    BOOST_TEST(r.perf.requests == 0u);
    BOOST_TEST(r.perf.submit.count == 0u);
}

BOOST_AUTO_TEST_CASE(sizes_near_size_max_in_batch_options_do_not_overflow) {
    temp_path path("batch_huge_options");
    aio_context context({4, block});
    std::vector<std::vector<unsigned char>> buffers;
    std::vector<batch_request> requests;
    std::vector<unsigned char> expected;
    for (std::size_t i = 0; i < 20; ++i) {
        buffers.push_back(nvmeio_test::pattern(5000 + i, 60 + i));
        requests.push_back({buffers.back(), expected.size()});
        expected.insert(expected.end(), buffers.back().begin(), buffers.back().end());
    }
    const std::size_t huge = std::numeric_limits<std::size_t>::max();
    for (int which = 0; which < 4; ++which) {
        BOOST_TEST_CONTEXT("setting " << which) {
            batch_options options;
            if (which == 0 || which == 3) options.bounce_size = huge;
            if (which == 1 || which == 3) options.max_io_size = huge;
            if (which == 2 || which == 3) options.min_direct_size = huge;
            {
                file out(path.str(), open_mode::write);
                (void)write_batch(context, out, requests, options);
            }
            BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
            file in(path.str(), open_mode::read);
            std::vector<std::vector<unsigned char>> back;
            std::vector<batch_request> reads = requests;
            for (batch_request& r : reads) {
                back.emplace_back(r.memory.size());
                r.memory = back.back();
            }
            (void)read_batch(context, in, reads, options);
            for (std::size_t i = 0; i < reads.size(); ++i)
                BOOST_TEST((back[i] == buffers[i]));
        }
    }
}

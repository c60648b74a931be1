// Racing writers of disjoint ranges of one file, over every front end, O_DIRECT and buffered:
// after every round each byte must be the writer's byte, the byte that was there before, or zero
// (never written), and the file exactly max(previous size, every end written) long.
//
// NVMEIO_WRITERS_ROUNDS  rounds per front end and mode (default 100; scripts/sanitize.sh lowers it)
// NVMEIO_WRITERS_SEED    the seed (default: random); printed on failure for a replay
#define BOOST_TEST_MODULE concurrent_writers
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <nvmeio/async.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::temp_path;

namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* text = std::getenv(name);
    return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 10) : fallback;
}

std::size_t rounds() {
    return static_cast<std::size_t>(env_number("NVMEIO_WRITERS_ROUNDS", 100));
}

std::uint64_t seed() {
    static const std::uint64_t value = env_number("NVMEIO_WRITERS_SEED", std::random_device{}());
    return value;
}

constexpr std::size_t block = 16 * 1024;  // small requests: many per range, tails everywhere

// One writer's range, its bytes, and a buffer O_DIRECT accepts holding them.
struct writer_range {
    std::uint64_t offset = 0;
    std::size_t length = 0;
    std::vector<unsigned char> bytes;
    aligned_buffer buffer;
};

// What a round writes and what the file must look like after it.
struct round_plan {
    std::vector<unsigned char> before;  // the file's bytes before the round
    std::vector<writer_range> ranges;   // in file order
    std::string describe() const {
        std::ostringstream out;
        out << "previous size " << before.size() << ", ranges";
        for (const writer_range& r : ranges)
            out << " [" << r.offset << ", " << r.offset + r.length << ")";
        return out.str();
    }
    std::vector<unsigned char> expected() const {
        std::size_t size = before.size();
        for (const writer_range& r : ranges)
            size = std::max<std::size_t>(size, r.offset + r.length);
        std::vector<unsigned char> image(size, 0);
        std::copy(before.begin(), before.end(), image.begin());
        for (const writer_range& r : ranges)
            std::copy(r.bytes.begin(), r.bytes.end(), image.begin() + r.offset);
        return image;
    }
};

// `writers` ranges that share no `unit`-sized alignment unit, in file order, with odd lengths
// (mostly not a multiple of the unit), gaps of 0 to 2 units, over a file that is empty or holds
// up to a little past the ranges' end.
round_plan make_plan(std::mt19937_64& rng, std::size_t unit, unsigned writers,
                     std::size_t max_length) {
    round_plan plan;
    std::uint64_t cursor = 0;
    for (unsigned i = 0; i < writers; ++i) {
        writer_range r;
        r.offset = align_up(cursor, unit) + unit * std::uniform_int_distribution<int>(0, 2)(rng);
        const int shape = std::uniform_int_distribution<int>(0, 9)(rng);
        if (shape == 0) {
            r.length = unit * std::uniform_int_distribution<std::size_t>(1, 8)(rng);
        } else if (shape < 4) {
            r.length = std::uniform_int_distribution<std::size_t>(1, 2 * unit + 7)(rng);
        } else {
            r.length = std::uniform_int_distribution<std::size_t>(1, max_length)(rng);
        }
        r.bytes = nvmeio_test::pattern(r.length, rng());
        r.buffer = aligned_buffer(r.length);
        std::memcpy(r.buffer.data(), r.bytes.data(), r.length);
        cursor = r.offset + r.length;
        plan.ranges.push_back(std::move(r));
    }
    if (rng() % 2 == 0) {
        const std::size_t previous =
            std::uniform_int_distribution<std::size_t>(1, cursor + 2 * unit)(rng);
        plan.before = nvmeio_test::pattern(previous, rng());
    }
    return plan;
}

// Runs `count` jobs on their own threads, all released at once, and rethrows the first error
// (jobs throw instead of using Boost.Test's macros, which are not thread-safe).
void race(std::size_t count, const std::function<void(std::size_t)>& job) {
    std::atomic<std::size_t> arrived{0};
    std::mutex error_mutex;
    std::string error;
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < count; ++i) {
        threads.emplace_back([&, i] {
            arrived.fetch_add(1);
            while (arrived.load() < count)
                std::this_thread::yield();
            try {
                job(i);
            } catch (const std::exception& e) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (error.empty()) error = e.what();
            }
        });
    }
    for (std::thread& t : threads)
        t.join();
    if (!error.empty()) throw std::runtime_error(error);
}

void require_whole(std::size_t moved, const writer_range& r) {
    if (moved != r.length) {
        throw std::runtime_error("write of " + std::to_string(r.length) + " bytes at offset " +
                                 std::to_string(r.offset) + " reported " + std::to_string(moved));
    }
}

// The ranges in a shuffled order, so that the later range does not always start first.
std::vector<std::size_t> shuffled(std::mt19937_64& rng, std::size_t count) {
    std::vector<std::size_t> order(count);
    for (std::size_t i = 0; i < count; ++i)
        order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    return order;
}

// A front end: writes every range of the plan, racing, through `f` (open on `path`).
using front_end = std::function<void(std::mt19937_64& rng, file& f, const std::string& path,
                                     direct_io mode, round_plan& plan)>;

// Plays `rounds()` rounds of `write_all` for each mode and checks every byte and the size.
void play(const std::string& name, unsigned max_writers, std::size_t max_length,
          const front_end& write_all) {
    for (direct_io mode : {direct_io::on, direct_io::off}) {
        std::mt19937_64 rng(seed() ^ std::hash<std::string>{}(name + to_string(mode)));
        // O_DIRECT on the disk under test; buffered on tmpfs, as fast as the logic allows.
        temp_path path("writers_" + name, mode == direct_io::on ? nvmeio_test::scratch_dir()
                                                                : std::string("/dev/shm"));
        std::size_t failures = 0;
        for (std::size_t round = 0; round < rounds() && failures == 0; ++round) {
            nvmeio_test::spew(path.str(), nullptr, 0);
            file f(path.str(), open_mode::read_write, mode);
            BOOST_REQUIRE(f.is_direct() == (mode == direct_io::on));
            const std::size_t unit = f.required_alignment();
            const auto writers = std::uniform_int_distribution<unsigned>(2, max_writers)(rng);
            round_plan plan = make_plan(rng, unit, writers, max_length);
            nvmeio_test::spew(path.str(), plan.before.data(), plan.before.size());
            std::string error;
            try {
                write_all(rng, f, path.str(), mode, plan);
            } catch (const std::exception& e) {
                error = e.what();
            }
            const std::vector<unsigned char> expected = plan.expected();
            const std::vector<unsigned char> actual = nvmeio_test::slurp(path.str());
            if (error.empty() && actual == expected) continue;
            ++failures;
            std::size_t first = 0;
            while (first < std::min(actual.size(), expected.size()) &&
                   actual[first] == expected[first])
                ++first;
            BOOST_ERROR(name << ", direct_io::" << to_string(mode) << ", round " << round << ": "
                             << (error.empty() ? "" : "threw '" + error + "', ") << "file is "
                             << actual.size() << " bytes, expected " << expected.size()
                             << "; first wrong byte at " << first << " (unit " << unit << "; "
                             << plan.describe() << "); replay with NVMEIO_WRITERS_SEED=" << seed()
                             << " NVMEIO_WRITERS_ROUNDS=" << round + 1);
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(write_at_from_several_threads_on_one_handle) {
    play("write_at_one_handle", 6, 3 * 64 * 1024 + 99,
         [](std::mt19937_64& rng, file& f, const std::string&, direct_io, round_plan& plan) {
             const auto order = shuffled(rng, plan.ranges.size());
             race(order.size(), [&](std::size_t i) {
                 const writer_range& r = plan.ranges[order[i]];
                 f.write_at(r.bytes, r.offset);
             });
         });
}

BOOST_AUTO_TEST_CASE(write_at_through_several_handles_of_one_file) {
    play(
        "write_at_own_handles", 6, 3 * 64 * 1024 + 99,
        [](std::mt19937_64& rng, file&, const std::string& path, direct_io mode, round_plan& plan) {
            const auto order = shuffled(rng, plan.ranges.size());
            std::vector<file> handles;
            for (std::size_t i = 0; i < order.size(); ++i)
                handles.emplace_back(path, open_mode::read_write, mode);
            race(order.size(), [&](std::size_t i) {
                const writer_range& r = plan.ranges[order[i]];
                handles[i].write_at(r.bytes, r.offset);
            });
        });
}

BOOST_AUTO_TEST_CASE(write_on_separate_contexts_of_every_backend) {
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        std::vector<std::unique_ptr<basic_aio_context<backend>>> contexts;
        for (int i = 0; i < 5; ++i)
            contexts.push_back(
                std::make_unique<basic_aio_context<backend>>(context_options{4, block}));
        play(std::string("write_") + backend::name, 5, 200 * 1024 + 3,
             [&](std::mt19937_64& rng, file& f, const std::string&, direct_io, round_plan& plan) {
                 const auto order = shuffled(rng, plan.ranges.size());
                 const auto configs = nvmeio_test::every_config();
                 const transfer_config config = configs[rng() % configs.size()];
                 race(order.size(), [&](std::size_t i) {
                     writer_range& r = plan.ranges[order[i]];
                     require_whole(write(*contexts[i], f, r.buffer, r.offset, config).bytes, r);
                 });
             });
    });
}

BOOST_AUTO_TEST_CASE(async_writes_on_one_context) {
    async_context context({2, {4, block}});
    play("async_write", 8, 200 * 1024 + 3,
         [&](std::mt19937_64& rng, file& f, const std::string&, direct_io, round_plan& plan) {
             std::vector<transfer_handle> handles;
             for (std::size_t index : shuffled(rng, plan.ranges.size())) {
                 writer_range& r = plan.ranges[index];
                 handles.push_back(async_write(context, f, r.buffer, r.offset));
             }
             for (transfer_handle& h : handles)
                 (void)h.wait();
         });
}

BOOST_AUTO_TEST_CASE(parallel_pieces_of_concurrent_writes) {
    parallel_options options;
    options.threads = 3;
    options.context = {4, block};
    options.min_piece_size = block;  // split every range over the threads
    parallel_context context(options);
    play("parallel_write", 4, 300 * 1024 + 5,
         [&](std::mt19937_64& rng, file& f, const std::string&, direct_io, round_plan& plan) {
             const auto order = shuffled(rng, plan.ranges.size());
             race(order.size(), [&](std::size_t i) {
                 writer_range& r = plan.ranges[order[i]];
                 require_whole(write(context, f, r.buffer, r.offset).bytes, r);
             });
         });
}

BOOST_AUTO_TEST_CASE(write_batches_racing_on_one_file) {
    std::vector<std::unique_ptr<aio_context>> contexts;
    for (int i = 0; i < 4; ++i)
        contexts.push_back(std::make_unique<aio_context>(context_options{4, block}));
    parallel_options options;
    options.threads = 2;
    options.context = {4, block};
    parallel_context shared(options);
    batch_options small;
    small.max_io_size = 3 * block;  // several I/Os per range
    play("write_batch", 4, 200 * 1024 + 3,
         [&](std::mt19937_64& rng, file& f, const std::string&, direct_io, round_plan& plan) {
             // Each writer cuts its range into up to 3 adjacent requests with their own memory.
             std::vector<std::vector<batch_request>> batches;
             for (writer_range& r : plan.ranges) {
                 std::vector<batch_request> requests;
                 std::size_t at = 0;
                 while (at < r.length) {
                     const std::size_t rest = r.length - at;
                     const std::size_t take =
                         requests.size() == 2
                             ? rest
                             : std::uniform_int_distribution<std::size_t>(1, rest)(rng);
                     requests.push_back({nvmeio::memory(r.buffer).slice(at, take), r.offset + at});
                     at += take;
                 }
                 batches.push_back(std::move(requests));
             }
             const auto order = shuffled(rng, batches.size());
             const bool on_shared = rng() % 2 == 0;
             race(order.size(), [&](std::size_t i) {
                 if (on_shared) {
                     (void)write_batch(shared, f, batches[order[i]], small);
                 } else {
                     (void)write_batch(*contexts[i], f, batches[order[i]], small);
                 }
             });
         });
}

// The two reproductions from the report, each many times over.
BOOST_AUTO_TEST_CASE(ranges_0_5000_and_8192_12288_written_at_once_keep_both) {
    const auto first = nvmeio_test::pattern(5000, 1);
    const auto second = nvmeio_test::pattern(4096, 2);
    std::vector<unsigned char> expected(12288, 0);
    std::copy(first.begin(), first.end(), expected.begin());
    std::copy(second.begin(), second.end(), expected.begin() + 8192);
    aligned_buffer a(5000);
    aligned_buffer b(4096);
    std::memcpy(a.data(), first.data(), first.size());
    std::memcpy(b.data(), second.data(), second.size());
    async_context async({2, {8, 1 << 20}});
    aio_context left;
    aio_context right;
    temp_path path("writers_5000");
    const std::size_t count = std::max<std::size_t>(rounds(), 1);
    for (const char* how : {"async_write", "write", "write_at"}) {
        std::size_t bad = 0;
        for (std::size_t round = 0; round < count; ++round) {
            file f(path.str(), open_mode::write);
            BOOST_REQUIRE(f.is_direct());
            if (std::string(how) == "async_write") {
                transfer_handle x = async_write(async, f, a, 0);
                transfer_handle y = async_write(async, f, b, 8192);
                (void)x.wait();
                (void)y.wait();
            } else if (std::string(how) == "write") {
                race(2, [&](std::size_t i) {
                    if (i == 0) (void)write(left, f, a, 0);
                    if (i == 1) (void)write(right, f, b, 8192);
                });
            } else {
                race(2, [&](std::size_t i) {
                    if (i == 0) f.write_at(first, 0);
                    if (i == 1) f.write_at(second, 8192);
                });
            }
            bad += nvmeio_test::slurp(path.str()) != expected;
        }
        BOOST_TEST(bad == 0u, how << ": " << bad << " of " << count << " rounds lost bytes");
    }
}

BOOST_AUTO_TEST_CASE(sixteen_odd_tensors_through_a_two_worker_async_context_are_all_kept) {
    constexpr std::size_t tensors = 16;
    constexpr std::size_t size = (std::size_t{2} << 20) + 5;
    constexpr std::size_t stride = std::size_t{3} << 20;
    std::vector<aligned_buffer> buffers;
    std::vector<unsigned char> expected((tensors - 1) * stride + size, 0);
    for (std::size_t i = 0; i < tensors; ++i) {
        const auto bytes = nvmeio_test::pattern(size, 100 + i);
        std::copy(bytes.begin(), bytes.end(), expected.begin() + i * stride);
        buffers.emplace_back(size);
        std::memcpy(buffers.back().data(), bytes.data(), size);
    }
    async_context context({2, {32, 1 << 20}});
    temp_path path("writers_tensors");
    const std::size_t count = std::max<std::size_t>(rounds() / 30, 2);
    std::size_t bad = 0;
    for (std::size_t round = 0; round < count; ++round) {
        file f(path.str(), open_mode::write);
        BOOST_REQUIRE(f.is_direct());
        std::vector<transfer_handle> handles;
        for (std::size_t i = 0; i < tensors; ++i)
            handles.push_back(async_write(context, f, buffers[i], i * stride));
        for (transfer_handle& h : handles)
            (void)h.wait();
        const auto actual = nvmeio_test::slurp(path.str());
        if (actual != expected) {
            ++bad;
            std::size_t first = 0;
            while (first < std::min(actual.size(), expected.size()) &&
                   actual[first] == expected[first])
                ++first;
            BOOST_TEST_MESSAGE("round " << round << ": size " << actual.size()
                                        << ", first wrong byte at " << first);
        }
    }
    BOOST_TEST(bad == 0u, bad << " of " << count << " rounds lost tensor bytes");
}

// The contract an engine that writes padded last units asynchronously relies on: reserve up to
// the padded end, write whole units, trim_padding. Racing such writers with write_at writers of
// other ranges keeps every byte and the exact size.
BOOST_AUTO_TEST_CASE(padded_writes_trimmed_with_trim_padding_race_safely_with_write_at) {
    temp_path path("writers_padding");
    std::mt19937_64 rng(seed() ^ 0x5eed);
    std::size_t failures = 0;
    for (std::size_t round = 0; round < rounds() && failures == 0; ++round) {
        nvmeio_test::spew(path.str(), nullptr, 0);
        file f(path.str(), open_mode::read_write);
        BOOST_REQUIRE(f.is_direct());
        const std::size_t unit = f.required_alignment();
        round_plan plan = make_plan(rng, unit, 4, 64 * 1024 + 7);
        nvmeio_test::spew(path.str(), plan.before.data(), plan.before.size());
        std::string error;
        try {
            race(plan.ranges.size(), [&](std::size_t i) {
                writer_range& r = plan.ranges[i];
                if (i % 2 == 0) {
                    f.write_at(r.bytes, r.offset);
                    return;
                }
                // A padded writer: merge the last unit by hand, as an engine would.
                const std::uint64_t end = r.offset + r.length;
                const std::uint64_t padded_end = align_up(end, unit);
                f.reserve_range(r.offset, static_cast<std::size_t>(padded_end - r.offset));
                aligned_buffer whole(static_cast<std::size_t>(padded_end - r.offset));
                const std::uint64_t last = padded_end - unit;
                const std::size_t got = f.read_at(
                    nvmeio::memory(whole).slice(last - r.offset, unit), last);  // file's bytes
                std::memcpy(whole.data(), r.bytes.data(), r.length);
                f.write_at(whole, r.offset);
                (void)got;
                // Where the file ended inside the last unit before, if it did: the test's own
                // plan knows (a real engine reads it while merging).
                const std::uint64_t before_end =
                    plan.before.size() > last && plan.before.size() < padded_end
                        ? plan.before.size()
                        : 0;
                const io_failure failure = detail::trim_write_padding(
                    f, padded_end, std::max<std::uint64_t>(end, before_end));
                if (failure) throw io_error(failure);
            });
        } catch (const std::exception& e) {
            error = e.what();
        }
        const auto expected = plan.expected();
        const auto actual = nvmeio_test::slurp(path.str());
        if (error.empty() && actual == expected) continue;
        ++failures;
        BOOST_ERROR("round " << round << ": " << error << " file is " << actual.size()
                             << " bytes, expected " << expected.size() << " (" << plan.describe()
                             << "); replay with NVMEIO_WRITERS_SEED=" << seed());
    }
}

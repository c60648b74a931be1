#define BOOST_TEST_MODULE policy
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

// The strategy policies (nvmeio::sequential, nvmeio::overlapped) and the run-time
// transfer_config that names them run the same engine loop: the same bytes, the same requests.

using namespace nvmeio;
using nvmeio_test::backend_types;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t block = 64 * 1024;

// What the engine asked of its backend: every request in order, the size of every submit call,
// and the least number of completions every reap waited for.
struct request_log {
    std::vector<std::tuple<operation, std::uint64_t, std::size_t>> requests;
    std::vector<std::size_t> calls;
    std::vector<std::size_t> reap_mins;
};

template <class Inner>
class recording_backend {
  public:
    static constexpr const char* name = "recording";
    explicit recording_backend(unsigned queue_depth) : real_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        const int rc = real_.submit(requests, count);
        log.calls.push_back(count);
        for (int i = 0; i < rc; ++i)
            log.requests.emplace_back(requests[i].op, requests[i].offset, requests[i].length);
        return rc;
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        log.reap_mins.push_back(min);
        return real_.reap(out, min, max, timeout);
    }
    [[nodiscard]] unsigned queue_depth() const noexcept { return real_.queue_depth(); }
    [[nodiscard]] std::size_t in_flight() const noexcept { return real_.in_flight(); }

    request_log log;

  private:
    Inner real_;
};

// Runs `op` over the whole file with `config` (a policy or a transfer_config) and returns what
// the backend was asked; `memory` holds the bytes (read) or gives them (write).
template <class Backend, class Config>
request_log run(basic_aio_context<recording_backend<Backend>>& context, file& f, operation op,
                aligned_buffer& memory, std::size_t size, const Config& config,
                transfer_result& result) {
    context.backend().log = {};
    result = op == operation::read
                 ? read(context, f, nvmeio::memory(memory).first(size), 0, config)
                 : write(context, f, nvmeio::memory(memory).first(size), 0, config);
    return context.backend().log;
}

std::vector<unsigned char> bytes_of(const aligned_buffer& memory, std::size_t size) {
    const auto* data = reinterpret_cast<const unsigned char*>(memory.data());
    return {data, data + size};
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(a_policy_and_the_config_naming_it_move_the_same_bytes_alike, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    const std::size_t size = 40 * block + 1000;  // an unaligned tail: the synchronous path too
    temp_path path("policy");
    nvmeio_test::spew_pattern(path.str(), size, 7);
    file f(path.str(), open_mode::read_write);
    basic_aio_context<recording_backend<TestType>> context({4, block});
    aligned_buffer memory(size);
    for (const operation op : {operation::read, operation::write}) {
        for (const submit_mode submit : {submit_mode::block, submit_mode::single}) {
            for (const strategy_kind kind :
                 {strategy_kind::sequential, strategy_kind::overlapped}) {
                BOOST_TEST_CONTEXT(to_string(op)
                                   << " " << to_string(kind) << " " << to_string(submit)) {
                    const transfer_config config{kind, submit, true};
                    transfer_result by_config, by_policy;
                    const auto start_over = [&] {  // the file holds seed 7, the memory seed 9
                        if (op == operation::write) nvmeio_test::spew_pattern(path.str(), size, 7);
                        nvmeio_test::fill_pattern(memory.data(), size, 9);
                    };
                    start_over();
                    const request_log a = run(context, f, op, memory, size, config, by_config);
                    const std::vector<unsigned char> first = op == operation::read
                                                                 ? bytes_of(memory, size)
                                                                 : nvmeio_test::slurp(path.str());
                    start_over();
                    const request_log b =
                        kind == strategy_kind::sequential
                            ? run(context, f, op, memory, size, sequential{submit, true}, by_policy)
                            : run(context, f, op, memory, size, overlapped{submit, true},
                                  by_policy);
                    const std::vector<unsigned char> second = op == operation::read
                                                                  ? bytes_of(memory, size)
                                                                  : nvmeio_test::slurp(path.str());
                    BOOST_TEST(by_config.bytes == size);
                    BOOST_TEST(by_policy.bytes == size);
                    BOOST_TEST((first == second));
                    const std::vector<unsigned char> expected =
                        nvmeio_test::pattern(size, op == operation::read ? 7 : 9);
                    BOOST_TEST((second == expected));
                    // A request per block, and one for the tail's whole alignment units.
                    BOOST_TEST(a.requests.size() == (f.required_alignment() <= 1000 ? 41u : 40u));
                    BOOST_TEST((a.requests == b.requests));
                    BOOST_TEST(by_config.perf.requests == by_policy.perf.requests);
                    if (submit == submit_mode::single) {
                        BOOST_TEST(std::count(a.calls.begin(), a.calls.end(), 1u) ==
                                   static_cast<std::ptrdiff_t>(a.calls.size()));
                        BOOST_TEST(std::count(b.calls.begin(), b.calls.end(), 1u) ==
                                   static_cast<std::ptrdiff_t>(b.calls.size()));
                    }
                    if (kind == strategy_kind::sequential) {
                        // Rounds of 4 (block: calls of 1, 1, 2), each reaped whole: the same
                        // calls and waits, whatever the kernel's timing.
                        BOOST_TEST(a.calls == b.calls, boost::test_tools::per_element());
                        BOOST_TEST(a.reap_mins == b.reap_mins, boost::test_tools::per_element());
                        BOOST_TEST(std::count(a.reap_mins.begin(), a.reap_mins.end(), 4u) == 10);
                    } else {
                        // Refilled after each completion: every wait is for one.
                        for (const request_log* log : {&a, &b})
                            BOOST_TEST(
                                std::count(log->reap_mins.begin(), log->reap_mins.end(), 1u) ==
                                static_cast<std::ptrdiff_t>(log->reap_mins.size()));
                    }
                }
            }
        }
    }
}

// On a parallel context each piece runs the loop its policy names, as on an aio context: with
// one thread the one piece is the whole range, and its worker's backend shows the loop.
BOOST_AUTO_TEST_CASE_TEMPLATE(a_policy_on_a_one_thread_parallel_context_runs_its_loop, TestType,
                              backend_types) {
    if (!nvmeio_test::backend_usable<TestType>()) return;
    const std::size_t size = 40 * block + 1000;
    temp_path path("policy_parallel");
    nvmeio_test::spew_pattern(path.str(), size, 7);
    file f(path.str(), open_mode::read);
    basic_parallel_context<recording_backend<TestType>> context({1, {4, block}});
    aligned_buffer memory(size);
    // Reads the file with `settings` (the throwing form, or the std::error_code one) and returns
    // what the worker's backend was asked.
    const auto read_with = [&](const auto& settings, bool throwing, transfer_result& result) {
        nvmeio_test::fill_pattern(memory.data(), size, 9);
        std::error_code ec;
        result = throwing ? read(context, f, memory, 0, settings)
                          : read(context, f, memory, 0, settings, ec);
        BOOST_TEST(!ec);
        BOOST_TEST(result.bytes == size);
        BOOST_TEST(nvmeio_test::holds_pattern(memory.data(), size, 7));
        request_log log;
        context.run(1, [&](std::size_t, auto& worker) {
            log = std::exchange(worker.backend().log, request_log{});
        });
        return log;
    };
    transfer_result by_config, by_sequential, by_overlapped;
    const request_log a = read_with(
        transfer_config{strategy_kind::sequential, submit_mode::block, true}, true, by_config);
    const request_log b = read_with(sequential{submit_mode::block, true}, false, by_sequential);
    const request_log c = read_with(overlapped{submit_mode::single, true}, true, by_overlapped);
    // Measured, as each asked.
    BOOST_TEST(by_config.perf.requests > 0u);
    BOOST_TEST(by_sequential.perf.requests == by_config.perf.requests);
    BOOST_TEST(by_overlapped.perf.requests == by_config.perf.requests);
    // Sequential: rounds of 4, each reaped whole. Overlapped, single: one request per call,
    // every wait for one completion.
    BOOST_TEST((a.requests == b.requests));
    BOOST_TEST(a.reap_mins == b.reap_mins, boost::test_tools::per_element());
    BOOST_TEST(std::count(b.reap_mins.begin(), b.reap_mins.end(), 4u) == 10);
    BOOST_TEST(std::count(c.calls.begin(), c.calls.end(), 1u) ==
               static_cast<std::ptrdiff_t>(c.calls.size()));
    BOOST_TEST(std::count(c.reap_mins.begin(), c.reap_mins.end(), 1u) ==
               static_cast<std::ptrdiff_t>(c.reap_mins.size()));
}

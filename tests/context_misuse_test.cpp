// Misuse of contexts that must fail clearly instead of hanging or corrupting: one aio context
// used by two threads at once, and contexts inherited by a child process after fork.
//
// Every child runs with a bounded wait: a child still running after `child_timeout` is killed
// and the test fails ("HUNG"), so a hang cannot stall the suite.
#define BOOST_TEST_MODULE context_misuse
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <nvmeio/async.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "leak_check.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::temp_path;

// AddressSanitizer's allocator (GCC 12's libasan) is not fork-safe: a child that allocates
// while a parent thread was inside malloc at the fork waits for that thread's lock forever.
// glibc's malloc takes its locks around fork. Tests whose parent threads allocate while children
// are forked therefore change shape under ASan (each says how).
#if defined(__SANITIZE_ADDRESS__)
#define NVMEIO_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVMEIO_TEST_ASAN 1
#endif
#endif
#ifndef NVMEIO_TEST_ASAN
#define NVMEIO_TEST_ASAN 0
#endif

namespace {

constexpr std::size_t block = 64 * 1024;
constexpr auto child_timeout = std::chrono::seconds(30);

// A Backend that behaves as `Inner`, except that while `gate::closed` is set, a submission
// announces itself (`gate::waiting`) and waits until the gate opens. It holds a transfer in the
// middle of its work for as long as a test needs.
struct gate {
    static inline std::mutex mutex;
    static inline std::condition_variable changed;
    static inline bool closed = false;
    static inline int waiting = 0;

    static void close() {
        std::lock_guard<std::mutex> lock(mutex);
        closed = true;
        waiting = 0;
    }
    static void open() {
        std::lock_guard<std::mutex> lock(mutex);
        closed = false;
        changed.notify_all();
    }
    static bool wait_for_waiter() {
        std::unique_lock<std::mutex> lock(mutex);
        return changed.wait_for(lock, std::chrono::seconds(30), [] { return waiting > 0; });
    }
    // Waits while the gate is closed, at most 30 s (a test that never opens it fails slowly
    // instead of hanging).
    static void pass() {
        std::unique_lock<std::mutex> lock(mutex);
        if (!closed) return;
        ++waiting;
        changed.notify_all();
        changed.wait_for(lock, std::chrono::seconds(30), [] { return !closed; });
    }
};

template <class Inner>
class gated_backend {
  public:
    static constexpr const char* name = Inner::name;
    explicit gated_backend(unsigned queue_depth) : inner_(queue_depth) {}
    int submit(const io_request* requests, std::size_t count) noexcept {
        gate::pass();
        return inner_.submit(requests, count);
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        return inner_.reap(out, min, max, timeout);
    }
    [[nodiscard]] std::size_t in_flight() const noexcept { return inner_.in_flight(); }

  private:
    Inner inner_;
};

bool is_logic_error_naming(const std::function<void()>& call, const std::string& part) {
    try {
        call();
    } catch (const std::logic_error& e) {
        if (nvmeio_test::contains(e.what(), part)) return true;
        BOOST_ERROR("std::logic_error without '" << part << "': " << e.what());
        return false;
    } catch (const std::exception& e) {
        BOOST_ERROR("expected std::logic_error, got: " << e.what());
        return false;
    }
    BOOST_ERROR("expected std::logic_error naming '" << part << "', nothing was thrown");
    return false;
}

// A file of `size` known bytes, and its content.
struct sample_file {
    temp_path path;
    std::vector<unsigned char> bytes;
    sample_file(const std::string& name, std::size_t size, std::uint64_t seed)
        : path(name), bytes(nvmeio_test::pattern(size, seed)) {
        nvmeio_test::spew(path.str(), bytes.data(), bytes.size());
    }
};

// Runs `body` in a child process and returns its exit status, or -1 when it had to be killed
// after `child_timeout` (the test then fails, naming `what`). The child never returns into the
// test framework: it leaves with _exit.
int in_child(const std::string& what, const std::function<int()>& body) {
    const pid_t child = ::fork();
    if (child == 0) {
        // A crash must kill the child (the parent reports the signal), not land in the test
        // framework's handler, which would go on running tests in the child.
        for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL})
            ::signal(sig, SIG_DFL);
        int status = 99;
        try {
            status = body();
        } catch (...) {
            status = 98;
        }
        ::_exit(status);
    }
    BOOST_REQUIRE(child > 0);
    const auto deadline = std::chrono::steady_clock::now() + child_timeout;
    int status = 0;
    while (::waitpid(child, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(child, SIGKILL);
            ::waitpid(child, &status, 0);
            BOOST_ERROR("HUNG: the child (" << what << ") was still running after "
                                            << child_timeout.count() << " s and was killed");
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (WIFSIGNALED(status)) {
        BOOST_ERROR("the child (" << what << ") died of signal " << WTERMSIG(status));
        return -1;
    }
    return WEXITSTATUS(status);
}

// In a child: 0 when `call` throws std::logic_error naming "process", else 1.
int child_expects_fork_error(const std::function<void()>& call) {
    try {
        call();
    } catch (const std::logic_error& e) {
        return nvmeio_test::contains(e.what(), "process other than the one that created it") ? 0
                                                                                             : 2;
    } catch (...) {
        return 3;
    }
    return 1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(second_thread_on_a_busy_aio_context_gets_a_logic_error_at_once) {
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = gated_backend<typename decltype(tag)::type>;
        if (!nvmeio_test::backend_usable<typename decltype(tag)::type>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            sample_file sample("misuse_busy", 8 * block + 123, 7);
            basic_aio_context<backend> context({4, block});
            file f(sample.path.str(), open_mode::read_write);
            aligned_buffer first(sample.bytes.size());
            aligned_buffer second(sample.bytes.size());
            std::size_t first_bytes = 0;
            std::string first_error;
            gate::close();
            std::thread holder([&] {
                try {
                    first_bytes = read(context, f, first, 0).bytes;
                } catch (const std::exception& e) {
                    first_error = e.what();
                }
            });
            BOOST_TEST_REQUIRE(gate::wait_for_waiter());  // the first transfer is in submit
            const auto started = std::chrono::steady_clock::now();
            BOOST_TEST(is_logic_error_naming([&] { (void)read(context, f, second, 0); },
                                             "used by two threads at once"));
            BOOST_TEST(is_logic_error_naming(
                [&] { (void)write(context, f, nvmeio::memory(second).first(4096), 0); },
                "used by two threads at once"));
            std::vector<batch_request> requests{{nvmeio::memory(second).first(100), 0},
                                                {nvmeio::memory(second).slice(4096, 5), 8192}};
            BOOST_TEST(is_logic_error_naming([&] { (void)read_batch(context, f, requests); },
                                             "used by two threads at once"));
            const bool prompt =
                std::chrono::steady_clock::now() - started < std::chrono::seconds(5);
            BOOST_TEST(prompt, "the refusals took more than 5 s");
            gate::open();
            holder.join();
            BOOST_TEST(first_error == "");
            BOOST_TEST(first_bytes == sample.bytes.size());
            BOOST_TEST(std::memcmp(first.data(), sample.bytes.data(), sample.bytes.size()) == 0);
            // The flag is released: the context serves the next transfer.
            BOOST_TEST(read(context, f, second, 0).bytes == sample.bytes.size());
            BOOST_TEST(std::memcmp(second.data(), sample.bytes.data(), sample.bytes.size()) == 0);
        }
    });
}

BOOST_AUTO_TEST_CASE(two_threads_racing_on_one_context_either_run_exactly_or_get_the_error) {
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            sample_file sample("misuse_race", 3 * block + 77, 8);
            basic_aio_context<backend> context({4, block});
            file f(sample.path.str(), open_mode::read);
            std::atomic<int> refused{0};
            std::atomic<int> exact{0};
            std::atomic<int> wrong{0};
            auto hammer = [&] {
                aligned_buffer target(sample.bytes.size());
                for (int i = 0; i < 300; ++i) {
                    try {
                        std::memset(target.data(), 0, sample.bytes.size());
                        const std::size_t got = read(context, f, target, 0).bytes;
                        const bool same = got == sample.bytes.size() &&
                                          std::memcmp(target.data(), sample.bytes.data(),
                                                      sample.bytes.size()) == 0;
                        (same ? exact : wrong)++;
                    } catch (const std::logic_error&) {
                        ++refused;
                        // Let the other thread finish, so that both take turns running.
                        std::this_thread::sleep_for(std::chrono::microseconds(300));
                    } catch (const std::exception&) {
                        ++wrong;  // an io_error (a spurious EIO) is exactly what must not happen
                    }
                }
            };
            // Misuse that slipped through would leave both threads reaping each other's
            // completions forever: bounded, a hang aborts the program with HANG.
            nvmeio_test::within(std::chrono::seconds(120), "two threads on one context", [&] {
                std::thread a(hammer);
                std::thread b(hammer);
                a.join();
                b.join();
            });
            BOOST_TEST(wrong.load() == 0);
            BOOST_TEST(exact.load() + refused.load() == 600);
            BOOST_TEST_MESSAGE(backend::name << ": " << exact.load() << " exact, " << refused.load()
                                             << " refused");
        }
    });
}

BOOST_AUTO_TEST_CASE(parallel_context_used_from_inside_its_own_job_is_a_logic_error) {
    parallel_context context({2, {4, block}, 0});
    std::string message;
    context.run(1, [&](std::size_t, aio_context&) {
        try {
            context.run(1, [](std::size_t, aio_context&) {});
        } catch (const std::logic_error& e) {
            message = e.what();
        }
    });
    BOOST_TEST(nvmeio_test::contains(message, "from inside one of its own jobs"));
}

BOOST_AUTO_TEST_CASE(child_destroys_inherited_contexts_cleanly_and_the_parent_goes_on) {
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            sample_file sample("fork_destroy", 6 * block + 5, 9);
            auto single = std::make_unique<basic_aio_context<backend>>(context_options{4, block});
            auto parallel = std::make_unique<basic_parallel_context<backend>>(
                parallel_options{3, {4, block}, 0});
            auto async =
                std::make_unique<basic_async_context<backend>>(async_options{2, {4, block}});
            file f(sample.path.str(), open_mode::read);
            const int status = in_child("destroying inherited contexts", [&] {
                single.reset();
                parallel.reset();
                async.reset();
                return 0;
            });
            BOOST_TEST(status == 0);
            // The parent's contexts still work, and exactly.
            aligned_buffer target(sample.bytes.size());
            BOOST_TEST(read(*single, f, target, 0).bytes == sample.bytes.size());
            BOOST_TEST(std::memcmp(target.data(), sample.bytes.data(), sample.bytes.size()) == 0);
            std::memset(target.data(), 0, sample.bytes.size());
            BOOST_TEST(read(*parallel, f, target, 0).bytes == sample.bytes.size());
            BOOST_TEST(std::memcmp(target.data(), sample.bytes.data(), sample.bytes.size()) == 0);
            std::memset(target.data(), 0, sample.bytes.size());
            BOOST_TEST(async_read(*async, f, target, 0).wait().bytes == sample.bytes.size());
            BOOST_TEST(std::memcmp(target.data(), sample.bytes.data(), sample.bytes.size()) == 0);
        }
    });
}

BOOST_AUTO_TEST_CASE(child_using_inherited_contexts_gets_a_logic_error_and_new_ones_work) {
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            sample_file sample("fork_use", 4 * block + 9, 10);
            basic_aio_context<backend> single({4, block});
            basic_parallel_context<backend> parallel({2, {4, block}, 0});
            basic_async_context<backend> async({2, {4, block}});
            file f(sample.path.str(), open_mode::read_write);
            aligned_buffer target(sample.bytes.size());
            // A handle whose transfer is done in the parent, to be waited for in the child.
            transfer_handle done = async_read(async, f, target, 0);
            (void)done.wait();
            const std::size_t n = sample.bytes.size();
            struct use {
                const char* what;
                std::function<void()> call;
            };
            const std::vector<use> uses{
                {"aio_context read", [&] { (void)read(single, f, target, 0); }},
                {"aio_context write_batch",
                 [&] {
                     (void)write_batch(single, f, {{nvmeio::memory(target).first(10), 0}});
                 }},
                {"parallel_context read", [&] { (void)read(parallel, f, target, 0); }},
                {"parallel_context run", [&] { parallel.run(2, [](std::size_t, auto&) {}); }},
                {"async_context submit", [&] { (void)async_read(async, f, target, 0).wait(); }},
                {"async_context cancel_pending", [&] { (void)async.cancel_pending(); }},
                {"transfer_handle wait", [&] { (void)done.wait(); }},
            };
            for (const use& u : uses) {
                BOOST_TEST_CONTEXT(u.what) {
                    BOOST_TEST(in_child(u.what, [&] { return child_expects_fork_error(u.call); }) ==
                               0);
                }
            }
            // A context created in the child is the child's own and works.
            const int fresh = in_child("a new context in the child", [&] {
                basic_aio_context<backend> own({4, block});
                aligned_buffer mine(n);
                if (read(own, f, mine, 0).bytes != n) return 1;
                return std::memcmp(mine.data(), sample.bytes.data(), n) == 0 ? 0 : 2;
            });
            BOOST_TEST(fresh == 0);
            // And the parent's are untouched by all of it.
            std::memset(target.data(), 0, n);
            BOOST_TEST(read(single, f, target, 0).bytes == n);
            BOOST_TEST(std::memcmp(target.data(), sample.bytes.data(), n) == 0);
        }
    });
}

BOOST_AUTO_TEST_CASE(fork_while_the_parent_transfers_leaves_the_parent_exact) {
    if (NVMEIO_TEST_ASAN) {
        nvmeio_test::skip(
            "fork during a transfer not run under AddressSanitizer: its allocator is "
            "not fork-safe (see the top of this file); the other passes run it");
        return;
    }
    nvmeio_test::for_each_backend([](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            constexpr int tensors = 8;
            const std::size_t size = 4 * block + 3;
            temp_path path("fork_busy");
            std::vector<aligned_buffer> sources;
            std::vector<std::vector<unsigned char>> expected;
            for (int i = 0; i < tensors; ++i) {
                expected.push_back(nvmeio_test::pattern(size, 20 + i));
                sources.emplace_back(size);
                std::memcpy(sources.back().data(), expected.back().data(), size);
            }
            auto async =
                std::make_unique<basic_async_context<backend>>(async_options{2, {2, 4096}});
            basic_aio_context<backend> single({2, 4096});
            file f(path.str(), open_mode::write);
            std::atomic<bool> stop{false};
            std::atomic<int> rounds{0};
            std::string busy_error;
            // A parent thread keeps a context busy while children come and go.
            std::thread busy([&] {
                aligned_buffer target(size);
                try {
                    while (!stop.load()) {
                        (void)write(single, f, sources[0], 0);
                        (void)read(single, f, target, 0);
                        if (std::memcmp(target.data(), expected[0].data(), size) != 0)
                            throw std::runtime_error("the busy thread read wrong bytes");
                        ++rounds;
                    }
                } catch (const std::exception& e) {
                    busy_error = e.what();
                }
            });
            for (int child = 0; child < 5; ++child) {
                std::vector<transfer_handle> handles;
                for (int i = 1; i < tensors; ++i) {
                    handles.push_back(async_write(*async, f, sources[i],
                                                  static_cast<std::uint64_t>(i) * 8 * block));
                }
                // Fork with transfers queued and running; the child drops everything it has.
                const int status = in_child("destroying contexts with transfers in flight", [&] {
                    handles.clear();
                    async.reset();
                    return 0;
                });
                BOOST_TEST(status == 0);
                for (transfer_handle& h : handles)
                    BOOST_TEST(h.wait().bytes == size);
            }
            stop = true;
            busy.join();
            BOOST_TEST(busy_error == "");
            BOOST_TEST(rounds.load() > 0);
            const auto bytes = nvmeio_test::slurp(path.str());
            BOOST_TEST_REQUIRE(bytes.size() == (tensors - 1) * 8 * block + size);
            for (int i = 0; i < tensors; ++i) {
                BOOST_TEST(std::memcmp(bytes.data() + i * 8 * block, expected[i].data(), size) == 0,
                           "tensor " << i);
            }
        }
    });
}

BOOST_AUTO_TEST_CASE(child_writes_a_file_the_parent_is_writing_without_hanging) {
    // A parent thread keeps growing a file by an unaligned write and cutting it back, which holds
    // the file's size mutex most of the time, while children are forked; each child then writes
    // the same file. A mutex inherited locked would hang the child.
    temp_path path("fork_size_lock");
    file f(path.str(), open_mode::write);
    BOOST_REQUIRE(f.is_direct());
    const auto bytes = nvmeio_test::pattern(3 * 4096 + 17, 30);
    std::atomic<bool> stop{false};
    std::atomic<int> rounds{0};
    std::thread writer([&] {
        while (!stop.load()) {
            // Under ASan only the size changes that allocate nothing (see the top of the file).
            if (!NVMEIO_TEST_ASAN) f.write_at(bytes, 0);
            f.truncate(rounds.load() % 2 == 0 ? 0 : bytes.size());
            ++rounds;
        }
    });
    while (rounds.load() == 0)
        std::this_thread::yield();
    for (int child = 0; child < 20; ++child) {
        const int status = in_child("writing a file whose size mutex the parent uses", [&] {
            std::error_code ec;
            f.write_at(bytes, 80 * 4096, ec);
            return ec ? 1 : 0;
        });
        BOOST_TEST(status == 0);
    }
    stop = true;
    writer.join();
}

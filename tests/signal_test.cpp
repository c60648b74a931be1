#define BOOST_TEST_MODULE signal
#include <boost/test/unit_test.hpp>

// A program whose threads take signals: a SIGUSR1 handler installed without SA_RESTART, and a
// second thread sending SIGUSR1 to the transferring thread in a tight loop, for many rounds of
// writes and reads over both backends. Every interrupted wait and every request the kernel gave
// up on because of the signal (io_uring cancels work with -ECANCELED when it cannot start an
// io-wq worker while a signal is pending) must be retried: the bytes are exact, no error.
// NVMEIO_SIGNAL_ROUNDS sets the rounds (default 60).

#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend_support.hpp"
#include "leak_check.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::every_config;
using nvmeio_test::temp_path;

namespace {

std::atomic<unsigned long> signals_handled{0};

extern "C" void count_signal(int) {
    signals_handled.fetch_add(1, std::memory_order_relaxed);
}

// SIGUSR1 handled without SA_RESTART for the life of the object.
class signal_handler {
  public:
    signal_handler() {
        struct sigaction action {};
        action.sa_handler = count_signal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = 0;  // no SA_RESTART: interrupted system calls fail with EINTR
        installed_ = ::sigaction(SIGUSR1, &action, &previous_) == 0;
    }
    ~signal_handler() {
        if (installed_) ::sigaction(SIGUSR1, &previous_, nullptr);
    }
    signal_handler(const signal_handler&) = delete;
    signal_handler& operator=(const signal_handler&) = delete;
    bool installed() const { return installed_; }

  private:
    struct sigaction previous_ {};
    bool installed_ = false;
};

unsigned rounds() {
    const char* text = std::getenv("NVMEIO_SIGNAL_ROUNDS");
    const long value = text != nullptr ? std::strtol(text, nullptr, 10) : 0;
    return value > 0 ? static_cast<unsigned>(value) : 60;
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(transfers_under_a_signal_storm_are_byte_exact, Backend,
                              nvmeio_test::backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    signal_handler handler;
    BOOST_TEST_REQUIRE(handler.installed());
    const std::size_t size = (std::size_t{1} << 20) + 4096 + 123;
    const unsigned round_count = rounds();
    std::atomic<bool> done{false};
    // The transferring thread's id (0: none). tgkill, unlike pthread_kill, is harmless when the
    // thread has just exited: ESRCH, or another thread of this process, which handles it too.
    std::atomic<pid_t> target{0};
    const unsigned long before = signals_handled.load();

    std::thread storm([&] {
        while (!done.load()) {  // no pause: as many signals as one core can send
            if (const pid_t thread = target.load())
                (void)::syscall(SYS_tgkill, ::getpid(), thread, SIGUSR1);
        }
    });
    std::string failure;
    unsigned rounds_done = 0;
    // io_uring loses requests to signals when a fresh ring's first requests need its workers
    // (io-wq) started, so each io_uring round has a new context. libaio's io_destroy waits for
    // an RCU grace period (milliseconds), so its rounds share one, used by a thread at a time.
    constexpr bool fresh_contexts = !std::is_same_v<Backend, libaio_backend>;
    // Rounds 4-7, 12-15, ... wait by polling before they sleep (context_options::spin): a signal
    // then lands while the thread polls as often as while it sleeps.
    std::optional<basic_aio_context<Backend>> contexts[2];
    aligned_buffer source(size);
    aligned_buffer back(size);
    const std::vector<transfer_config> configs = every_config();
    for (unsigned round = 0; round < round_count && failure.empty(); ++round) {
        const transfer_config& config = configs[round % configs.size()];
        // Buffered writes are the ones io_uring hands to its worker threads.
        const direct_io direct = round % 4 == 0 ? direct_io::on : direct_io::off;
        const bool polls = (round / 4) % 2 == 1;
        const std::string what = std::string(Backend::name) + " round " + std::to_string(round) +
                                 " " + to_string(config.strategy) + "/" + to_string(config.submit) +
                                 " direct=" + to_string(direct) + (polls ? " spin=20us" : "");
        // Each round on a thread of its own.
        nvmeio_test::within(std::chrono::seconds(120), what, [&] {
            target.store(static_cast<pid_t>(::syscall(SYS_gettid)));
            try {
                auto& context = contexts[polls ? 1 : 0];
                if (fresh_contexts || !context) {
                    context.emplace(
                        context_options{16, 64 * 1024, std::chrono::microseconds{polls ? 20 : 0}});
                }
                temp_path path("storm");
                nvmeio_test::fill_pattern(source.data(), size, round);
                {
                    file out(path.str(), open_mode::write, direct);
                    if (write(*context, out, source, 0, config).bytes != size) {
                        failure = what + ": short write";
                    }
                }
                if (nvmeio_test::file_size(path.str()) != size) failure = what + ": wrong size";
                file in(path.str(), open_mode::read, direct);
                std::memset(back.data(), 0, size);
                if (read(*context, in, back, 0, config).bytes != size) {
                    failure = what + ": short read";
                }
                if (std::memcmp(back.data(), source.data(), size) != 0) {
                    failure = what + ": the bytes read differ";
                }
            } catch (const std::exception& e) {
                failure = what + ": " + e.what();
            }
            target.store(0);
            ++rounds_done;
            return 0;
        });
    }
    done.store(true);
    storm.join();
    BOOST_TEST(failure.empty(), failure);
    BOOST_TEST(rounds_done == round_count);
    const unsigned long delivered = signals_handled.load() - before;
    BOOST_TEST_MESSAGE(Backend::name << ": " << delivered << " signals handled in " << rounds_done
                                     << " rounds");
    BOOST_TEST(delivered > rounds_done, "the storm did not reach the transferring thread");
}

#if NVMEIO_HAS_IO_URING

// The cancellation the signal storm provokes at random, made certain: io_uring cancels a request
// (-ECANCELED) when it cannot start a worker thread for it, which a pending signal causes, and so
// does RLIMIT_NPROC. A child process drops root (root is exempt from the limit), sets its soft
// limit to 0 so that no worker can start, and lifts it 300 ms later from a thread started before.
// The buffered write in between must be retried until it goes through, byte for byte.
BOOST_AUTO_TEST_CASE(io_uring_requests_canceled_for_want_of_a_worker_thread_are_retried) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    if (::geteuid() != 0) {
        nvmeio_test::skip(
            "io_uring requests canceled for want of a worker not tested: needs root, "
            "to drop to uid 65534 (root ignores RLIMIT_NPROC)");
        return;
    }
    temp_path path("canceled", "/tmp");  // reachable by uid 65534
    nvmeio_test::spew(path.str(), "", 0);
    BOOST_TEST_REQUIRE(::chmod(path.str().c_str(), 0666) == 0);
    const std::size_t size = (std::size_t{1} << 20) + 123;
    int channel[2];
    BOOST_TEST_REQUIRE(::pipe(channel) == 0);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(channel[0]);
        ::alarm(60);  // a hang kills the child, and the parent reports it
        std::string report = "could not drop root";
        int status = 3;
        if (::setgroups(0, nullptr) == 0 && ::setresgid(65534, 65534, 65534) == 0 &&
            ::setresuid(65534, 65534, 65534) == 0) {
            rlimit limit{};
            ::getrlimit(RLIMIT_NPROC, &limit);
            std::atomic<bool> lowered{false};
            std::thread lifter([&] {
                while (!lowered.load())
                    std::this_thread::yield();
                std::this_thread::sleep_for(std::chrono::milliseconds(300));
                ::setrlimit(RLIMIT_NPROC, &limit);
            });
            try {
                basic_aio_context<io_uring_backend> context({8, 64 * 1024});
                aligned_buffer source(size);
                nvmeio_test::fill_pattern(source.data(), size, 99);
                file out(path.str(), open_mode::read_write, direct_io::off);
                rlimit none = limit;
                none.rlim_cur = 0;
                ::setrlimit(RLIMIT_NPROC, &none);
                lowered.store(true);
                const transfer_result wrote =
                    write(context, out, source, 0,
                          {strategy_kind::overlapped, submit_mode::block, /*measure=*/true});
                const std::vector<unsigned char> now = nvmeio_test::slurp(path.str());
                const bool exact =
                    now.size() == size && std::memcmp(now.data(), source.data(), size) == 0;
                report = "bytes=" + std::to_string(wrote.bytes) +
                         " resubmissions=" + std::to_string(wrote.perf.resubmissions) +
                         (exact ? " exact" : " WRONG BYTES");
                status = exact && wrote.perf.resubmissions > 0 ? 0 : 1;
            } catch (const std::exception& e) {
                report = e.what();
                status = 2;
            }
            lowered.store(true);
            lifter.join();
        }
        (void)!::write(channel[1], report.data(), report.size());
        ::_exit(status);
    }
    ::close(channel[1]);
    std::string report;
    char chunk[512];
    for (ssize_t got; (got = ::read(channel[0], chunk, sizeof chunk)) > 0;)
        report.append(chunk, static_cast<std::size_t>(got));
    ::close(channel[0]);
    int status = 0;
    BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST_MESSAGE("child: " << report);
    BOOST_TEST(!WIFSIGNALED(status), "HANG or crash: the child died of signal "
                                         << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    BOOST_TEST_REQUIRE(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, report);
}

#endif

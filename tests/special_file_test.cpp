#define BOOST_TEST_MODULE special_file
#include <boost/test/unit_test.hpp>

// What is not a regular file or a block device: each kind is served or refused at open, and
// nothing waits forever. Every open and transfer here runs under nvmeio_test::within, which
// aborts the program with "HANG: ..." if it does not finish in time (a FIFO opened for reading
// used to wait for a writer forever, and one opened read_write hung inside io_submit).

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "backend_support.hpp"
#include "leak_check.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::every_config;
using nvmeio_test::temp_path;
using nvmeio_test::within;

namespace {

constexpr std::chrono::seconds bound{30};

struct open_outcome {
    bool opened = false;
    int code = 0;
    std::string what;
};

// Opens `path` (and, if that succeeds, reads 4 KiB from it through libaio) on a watched thread.
open_outcome try_open(const std::string& path, open_mode mode, direct_io direct) {
    return within(bound, "open of " + path, [&] {
        open_outcome outcome;
        try {
            file f(path, mode, direct);
            outcome.opened = true;
            aio_context context({2, 4096});
            aligned_buffer buffer(4096);
            (void)read(context, f, buffer, 0);
        } catch (const io_error& e) {
            outcome.code = e.code().value();
            outcome.what = e.what();
        }
        return outcome;
    });
}

const open_mode all_modes[] = {open_mode::read, open_mode::write, open_mode::read_write};
const direct_io all_directs[] = {direct_io::on, direct_io::automatic, direct_io::off};

std::string describe(open_mode mode, direct_io direct) {
    const char* m = mode == open_mode::read ? "read" : mode == open_mode::write ? "write" : "rw";
    return std::string(m) + "/direct=" + to_string(direct);
}

}  // namespace

BOOST_AUTO_TEST_CASE(fifo_is_refused_at_open_without_waiting_for_a_peer) {
    temp_path path("fifo", "/tmp");
    BOOST_TEST_REQUIRE(::mkfifo(path.str().c_str(), 0600) == 0, std::strerror(errno));
    for (const open_mode mode : all_modes) {
        for (const direct_io direct : all_directs) {
            BOOST_TEST_CONTEXT(describe(mode, direct)) {
                const open_outcome outcome = try_open(path.str(), mode, direct);
                BOOST_TEST(!outcome.opened);
                BOOST_TEST(outcome.code == ESPIPE, outcome.what);
                BOOST_TEST(contains(outcome.what, "FIFO"), outcome.what);
                BOOST_TEST(contains(outcome.what, "block device"), outcome.what);
                BOOST_TEST(contains(outcome.what, path.str()), outcome.what);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(socket_is_refused_naming_what_it_is) {
    temp_path path("socket", "/tmp");
    const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    BOOST_TEST_REQUIRE(sock >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.str().c_str(), sizeof address.sun_path - 1);
    BOOST_TEST_REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0,
                       std::strerror(errno));
    BOOST_TEST_REQUIRE(::listen(sock, 1) == 0);
    for (const open_mode mode : all_modes) {
        BOOST_TEST_CONTEXT(describe(mode, direct_io::automatic)) {
            const open_outcome outcome = try_open(path.str(), mode, direct_io::automatic);
            BOOST_TEST(!outcome.opened);
            BOOST_TEST(contains(outcome.what, "socket"), outcome.what);
            BOOST_TEST(contains(outcome.what, path.str()), outcome.what);
        }
    }
    ::close(sock);
}

// A pseudo-terminal's master waits for input like any terminal: refused before it can.
BOOST_AUTO_TEST_CASE(other_character_devices_are_refused_with_what_nvmeio_needs) {
    for (const std::string path : {"/dev/ptmx", "/dev/full", "/dev/tty"}) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
            nvmeio_test::skip(path + " not tried: it does not exist here");
            continue;
        }
        for (const open_mode mode : {open_mode::read, open_mode::read_write}) {
            BOOST_TEST_CONTEXT(path << " " << describe(mode, direct_io::automatic)) {
                const open_outcome outcome = try_open(path, mode, direct_io::automatic);
                BOOST_TEST(!outcome.opened);
                // /dev/tty without a controlling terminal fails in the kernel's open (ENXIO).
                if (outcome.code == ENXIO && path == "/dev/tty") continue;
                BOOST_TEST(outcome.code == ENOTSUP, outcome.what);
                BOOST_TEST(contains(outcome.what, "character device"), outcome.what);
                BOOST_TEST(contains(outcome.what, "/dev/nvme0n1"), outcome.what);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(null_and_zero_devices_are_served_with_buffered_io) {
    nvmeio_test::for_each_backend([](auto tag) {
        using Backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<Backend>()) return;
        within(bound, std::string("/dev/null and /dev/zero through ") + Backend::name, [] {
            basic_aio_context<Backend> context({4, 64 * 1024});
            const std::size_t length = (1u << 20) + 5;
            aligned_buffer buffer(length);
            for (const transfer_config& config : every_config()) {
                BOOST_TEST_CONTEXT(Backend::name << " " << to_string(config.strategy) << "/"
                                                 << to_string(config.submit)) {
                    file null("/dev/null", open_mode::read_write, direct_io::automatic);
                    BOOST_TEST((null.kind() == file_kind::character_device));
                    BOOST_TEST(!null.is_direct());
                    nvmeio_test::fill_pattern(buffer.data(), length, 1);
                    BOOST_TEST(write(context, null, buffer, 0, config).bytes == length);
                    BOOST_TEST(read(context, null, buffer, 0, config).bytes == 0u);
                    file zero("/dev/zero", open_mode::read, direct_io::off);
                    BOOST_TEST(read(context, zero, buffer, 4096, config).bytes == length);
                    BOOST_TEST(std::all_of(buffer.data(), buffer.data() + length,
                                           [](std::byte b) { return b == std::byte{0}; }));
                    file random("/dev/urandom", open_mode::read, direct_io::automatic);
                    BOOST_TEST(read(context, random, nvmeio::memory(buffer).first(4096), 0, config)
                                   .bytes == 4096u);
                    BOOST_TEST(std::count(buffer.data(), buffer.data() + 4096, std::byte{0}) <
                               4096);
                }
            }
            return 0;
        });
    });
}

BOOST_AUTO_TEST_CASE(character_devices_asked_for_o_direct_say_they_have_none) {
    for (const std::string path : {"/dev/null", "/dev/zero"}) {
        const open_outcome outcome = try_open(path, open_mode::read, direct_io::on);
        BOOST_TEST(!outcome.opened);
        BOOST_TEST(outcome.code == EINVAL, outcome.what);
        BOOST_TEST(contains(outcome.what, "character device has no direct I/O"), outcome.what);
        BOOST_TEST(contains(outcome.what, "direct_io::automatic"), outcome.what);
    }
}

// procfs files are regular files whose size is 0: read with a length, they give what exists.
BOOST_AUTO_TEST_CASE(procfs_files_are_read_as_far_as_they_go) {
    const std::string path = "/proc/version";
    std::ifstream witness(path);
    const std::string expected{std::istreambuf_iterator<char>(witness), {}};
    BOOST_TEST_REQUIRE(!expected.empty());
    nvmeio_test::for_each_backend([&](auto tag) {
        using Backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<Backend>()) return;
        within(bound, std::string("read of /proc/version through ") + Backend::name, [&] {
            basic_aio_context<Backend> context({4, 4096});
            for (const transfer_config& config : every_config()) {
                file f(path, open_mode::read, direct_io::automatic);
                BOOST_TEST(f.size() == 0u);  // what the kernel says
                aligned_buffer buffer(64 * 1024);
                const transfer_result got = read(context, f, buffer, 0, config);
                BOOST_TEST(got.bytes == expected.size());
                BOOST_TEST(std::memcmp(buffer.data(), expected.data(), expected.size()) == 0);
            }
            return 0;
        });
    });
    const open_outcome direct = try_open(path, open_mode::read, direct_io::on);
    BOOST_TEST(!direct.opened);
    BOOST_TEST(contains(direct.what, "refuses direct I/O"), direct.what);
}

BOOST_AUTO_TEST_CASE(directories_are_refused_with_eisdir_in_every_mode) {
    for (const open_mode mode : all_modes) {
        for (const direct_io direct : all_directs) {
            BOOST_TEST_CONTEXT(describe(mode, direct)) {
                const open_outcome outcome = try_open("/tmp", mode, direct);
                BOOST_TEST(!outcome.opened);
                BOOST_TEST(outcome.code == EISDIR, outcome.what);
            }
        }
    }
}

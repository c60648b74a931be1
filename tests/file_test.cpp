#define BOOST_TEST_MODULE file
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "skip.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::message_of;
using nvmeio_test::temp_path;

namespace {

// A folder on a filesystem that refuses O_DIRECT: /dev/shm where tmpfs still refuses it
// (Linux < 6.6), else a ramfs mounted for the test (needs root). Empty when neither is possible.
class refusing_dir {
  public:
    refusing_dir() {
        if (!nvmeio_test::accepts_o_direct("/dev/shm")) {
            path_ = "/dev/shm";
            return;
        }
        char pattern[] = "/tmp/nvmeio-ramfs-XXXXXX";
        if (::mkdtemp(pattern) == nullptr) return;
        if (::mount("ramfs", pattern, "ramfs", 0, nullptr) == 0) {
            path_ = pattern;
            mounted_ = true;
        } else {
            ::rmdir(pattern);
        }
    }
    ~refusing_dir() {
        if (mounted_) {
            ::umount(path_.c_str());
            ::rmdir(path_.c_str());
        }
    }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    bool mounted_ = false;
};

}  // namespace

BOOST_AUTO_TEST_CASE(direct_open_on_the_test_disk_really_uses_o_direct) {
    temp_path path("direct");
    file f(path.str(), open_mode::write, direct_io::on);
    BOOST_TEST(f.is_direct());
    BOOST_TEST((::fcntl(f.native_handle(), F_GETFL) & O_DIRECT) != 0);
    BOOST_TEST(f.alignment().memory >= 1u);
    BOOST_TEST(f.alignment().offset >= 1u);
}

BOOST_AUTO_TEST_CASE(off_mode_opens_without_o_direct) {
    temp_path path("buffered");
    file f(path.str(), open_mode::write, direct_io::off);
    BOOST_TEST(!f.is_direct());
    BOOST_TEST((::fcntl(f.native_handle(), F_GETFL) & O_DIRECT) == 0);
}

BOOST_AUTO_TEST_CASE(write_mode_creates_and_truncates) {
    temp_path path("truncate");
    nvmeio_test::spew(path.str(), "0123456789", 10);
    file f(path.str(), open_mode::write);
    BOOST_TEST(f.size() == 0u);
    BOOST_TEST(nvmeio_test::file_size(path.str()) == 0u);
}

BOOST_AUTO_TEST_CASE(read_write_mode_keeps_existing_bytes) {
    temp_path path("keep");
    nvmeio_test::spew(path.str(), "0123456789", 10);
    file f(path.str(), open_mode::read_write);
    BOOST_TEST(f.size() == 10u);
}

BOOST_AUTO_TEST_CASE(missing_file_error_names_the_path_and_the_reason) {
    const std::string path = nvmeio_test::scratch_dir() + "/does-not-exist";
    try {
        file f(path, open_mode::read);
        BOOST_FAIL("opened a missing file");
    } catch (const io_error& e) {
        BOOST_TEST((e.code() == std::errc::no_such_file_or_directory));
        BOOST_TEST(e.path() == path);
        BOOST_TEST(contains(e.what(), path));
        BOOST_TEST(contains(e.what(), "open"));
    }
}

BOOST_AUTO_TEST_CASE(directory_is_refused_with_eisdir) {
    const std::string text =
        message_of<io_error>([] { file f(nvmeio_test::scratch_dir(), open_mode::read); });
    BOOST_TEST(contains(text, "Is a directory"), text);
}

BOOST_AUTO_TEST_CASE(error_code_open_reports_instead_of_throwing) {
    std::error_code ec;
    file f =
        file::open(nvmeio_test::scratch_dir() + "/nope/nope", open_mode::read, direct_io::on, ec);
    BOOST_TEST((ec == std::errc::no_such_file_or_directory));
    BOOST_TEST(!f.is_open());
}

BOOST_AUTO_TEST_CASE(reopen_moves_bytes_of_the_descriptors_file_after_another_took_its_name) {
    temp_path path("reopen");
    temp_path other("reopen-other");
    nvmeio_test::spew_pattern(path.str(), 8192, 1);
    nvmeio_test::spew_pattern(other.str(), 8192, 2);
    const int fd = ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::rename(other.str().c_str(), path.str().c_str()) == 0);  // fd's file unlinked
    {
        file f = file::reopen(fd, open_mode::read_write, direct_io::automatic);
        ::close(fd);
        BOOST_TEST(contains(f.path(), path.str()));  // its name, now "... (deleted)"
        std::vector<unsigned char> bytes(8192);
        BOOST_TEST(f.read_at(memory(bytes), 0) == 8192u);
        BOOST_TEST(nvmeio_test::holds_pattern(bytes.data(), bytes.size(), 1));
        const std::vector<unsigned char> zeros(8192, 0);
        f.write_at(memory(zeros), 0);
    }
    BOOST_TEST(nvmeio_test::holds_pattern(nvmeio_test::slurp(path.str()).data(), 8192, 2));
}

BOOST_AUTO_TEST_CASE(reopen_shares_the_descriptor_where_proc_refuses_to_reopen_it) {
    // A descriptor opened before the process dropped its privileges: /proc checks them again
    // and refuses, the descriptor itself still reads and writes.
    if (::geteuid() != 0) {
        nvmeio_test::skip("reopen's fallback not tested: dropping privileges needs root");
        return;
    }
    temp_path path("reopen-private");
    nvmeio_test::spew_pattern(path.str(), 8192, 3);
    BOOST_REQUIRE(::chmod(path.str().c_str(), 0600) == 0);
    const pid_t child = ::fork();
    BOOST_REQUIRE(child >= 0);
    if (child == 0) {
        const int fd = ::open(path.str().c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
        const int failed_step = [&] {  // its handles are closed before the child exits
            const int direct = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR);
            if (direct >= 0) {
                ::close(direct);
                return 3;
            }
            std::error_code ec;
            const file f = file::reopen(fd, open_mode::read_write, direct_io::automatic, ec);
            std::vector<unsigned char> bytes(8192);
            if (ec || f.is_direct()) return 4;
            if (f.read_at(memory(bytes), 0, ec) != 8192 || ec) return 5;
            if (!nvmeio_test::holds_pattern(bytes.data(), bytes.size(), 3)) return 6;
            std::fill(bytes.begin(), bytes.end(), 7);
            f.write_at(memory(bytes).first(100), 50, ec);
            if (ec) return 7;
            if (file::reopen(fd, open_mode::read, direct_io::on, ec).is_open() ||
                ec != std::errc::invalid_argument) {
                return 8;  // O_DIRECT asked of a descriptor without it
            }
            return 0;
        }();
        ::close(fd);
        ::_exit(failed_step);
    }
    int status = 0;
    BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
    BOOST_TEST(WIFEXITED(status));
    BOOST_TEST(WEXITSTATUS(status) == 0, "the child failed at step " << WEXITSTATUS(status));
    const std::vector<unsigned char> after = nvmeio_test::slurp(path.str());
    BOOST_TEST(std::count(after.begin() + 50, after.begin() + 150, 7) == 100);
}

BOOST_AUTO_TEST_CASE(reopen_of_a_descriptor_not_open_is_ebadf_naming_it) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::close(fd);
    for (const int bad : {fd, -1}) {
        std::error_code ec;
        file f = file::reopen(bad, open_mode::read, direct_io::off, ec);
        BOOST_TEST((ec == std::errc::bad_file_descriptor));
        BOOST_TEST(!f.is_open());
        const std::string message = message_of<io_error>(
            [bad] { (void)file::reopen(bad, open_mode::read, direct_io::off); });
        BOOST_TEST(contains(message, "descriptor " + std::to_string(bad)), message);
    }
}

BOOST_AUTO_TEST_CASE(moves_transfer_the_descriptor_and_close_exactly_once) {
    temp_path path("moves");
    const int before = nvmeio_test::open_fd_count();
    {
        file a(path.str(), open_mode::write);
        const int fd = a.native_handle();
        file b(std::move(a));
        BOOST_TEST(!a.is_open());
        BOOST_TEST(b.native_handle() == fd);
        file c;
        c = std::move(b);
        BOOST_TEST(c.native_handle() == fd);
        BOOST_TEST(nvmeio_test::open_fd_count() == before + 1);
        c.close();
        c.close();  // a second close is a no-op, not a close of someone else's descriptor
        BOOST_TEST(nvmeio_test::open_fd_count() == before);
    }
    BOOST_TEST(nvmeio_test::open_fd_count() == before);
    static_assert(std::is_nothrow_move_constructible_v<file>);
    static_assert(std::is_nothrow_move_assignable_v<file>);
    static_assert(!std::is_copy_constructible_v<file>);
}

BOOST_AUTO_TEST_CASE(read_at_and_write_at_handle_any_alignment_on_a_direct_handle) {
    temp_path path("unaligned_sync");
    const std::size_t size = 200'000;
    auto expected = nvmeio_test::pattern(size, 4);
    nvmeio_test::spew(path.str(), expected.data(), size);
    file f(path.str(), open_mode::read_write, direct_io::on);
    BOOST_TEST_REQUIRE(f.is_direct());
    // Unaligned read into an unaligned buffer.
    std::vector<unsigned char> got(100'001);
    BOOST_TEST(f.read_at(nvmeio::memory(got).slice(1, 100'000), 12'345) == 100'000u);
    BOOST_TEST(std::memcmp(got.data() + 1, expected.data() + 12'345, 100'000) == 0);
    // Unaligned write in the middle: the bytes around it stay.
    const auto patch = nvmeio_test::pattern(70'001, 8);
    f.write_at(patch, 3);
    std::memcpy(expected.data() + 3, patch.data(), patch.size());
    BOOST_TEST(f.size() == size);
    BOOST_TEST((nvmeio_test::slurp(path.str()) == expected));
    // Unaligned write past the end grows the file to exactly its end.
    f.write_at(nvmeio::memory(patch).first(10), size + 7);
    BOOST_TEST(f.size() == size + 17);
    // Reading past the end returns what exists.
    BOOST_TEST(f.read_at(nvmeio::memory(got).first(1000), size + 10) == 7u);
}

BOOST_AUTO_TEST_CASE(truncate_sets_the_size) {
    temp_path path("truncate2");
    file f(path.str(), open_mode::write);
    f.truncate(12345);
    BOOST_TEST(f.size() == 12345u);
}

BOOST_AUTO_TEST_CASE(tmpfs_in_automatic_mode_gets_what_tmpfs_offers_and_exact_bytes) {
    // tmpfs refuses O_DIRECT before Linux 6.6 and accepts it since; either way the handle says
    // which it got, and the bytes are exact.
    const bool tmpfs_direct = nvmeio_test::accepts_o_direct("/dev/shm");
    BOOST_TEST_MESSAGE("tmpfs " << (tmpfs_direct ? "accepts" : "refuses") << " O_DIRECT here");
    temp_path path("tmpfs_auto", "/dev/shm");
    const std::size_t size = 3 * 65536 + 11;
    aligned_buffer source(size), target(size);
    nvmeio_test::fill_pattern(source.data(), size, 21);
    aio_context context({8, 65536});
    {
        file out(path.str(), open_mode::write, direct_io::automatic);
        BOOST_TEST(out.is_direct() == tmpfs_direct);
        write(context, out, source, 0);
    }
    file in(path.str(), open_mode::read, direct_io::automatic);
    BOOST_TEST(in.is_direct() == tmpfs_direct);
    BOOST_TEST(read(context, in, target, 0).bytes == size);
    BOOST_TEST(std::memcmp(source.data(), target.data(), size) == 0);
    BOOST_TEST(nvmeio_test::file_size(path.str()) == size);
}

BOOST_AUTO_TEST_CASE(tmpfs_in_on_mode_is_direct_or_a_precise_error) {
    const bool tmpfs_direct = nvmeio_test::accepts_o_direct("/dev/shm");
    temp_path path("tmpfs_on", "/dev/shm");
    if (tmpfs_direct) {
        file f(path.str(), open_mode::write, direct_io::on);
        BOOST_TEST(f.is_direct());
    } else {
        const std::string text =
            message_of<io_error>([&] { file f(path.str(), open_mode::write, direct_io::on); });
        BOOST_TEST(contains(text, "O_DIRECT"), text);
        BOOST_TEST(contains(text, path.str()), text);
    }
}

BOOST_AUTO_TEST_CASE(filesystem_refusing_o_direct_gives_fallback_in_automatic_and_error_in_on) {
    refusing_dir dir;
    if (dir.path().empty()) {
        // Only root can mount a ramfs; CI runs as root, so there this must not happen.
        BOOST_TEST(::geteuid() != 0u, "running as root but could not mount a ramfs");
        nvmeio_test::skip(
            "a filesystem refusing O_DIRECT not tested: none is reachable (tmpfs "
            "accepts it on this kernel and mounting ramfs needs root)");
        return;
    }
    BOOST_TEST_MESSAGE("refusing filesystem at " << dir.path());
    temp_path path("refused", dir.path());
    const std::string text =
        message_of<io_error>([&] { file f(path.str(), open_mode::write, direct_io::on); });
    BOOST_TEST(contains(text, "O_DIRECT"), text);
    BOOST_TEST(contains(text, "refuses direct I/O"), text);
    BOOST_TEST(contains(text, path.str()), text);
    BOOST_TEST(contains(text, "Invalid argument"), text);

    const std::size_t size = 70'000;
    aligned_buffer source(size), target(size);
    nvmeio_test::fill_pattern(source.data(), size, 5);
    aio_context context({4, 65536});
    {
        file out(path.str(), open_mode::write, direct_io::automatic);
        BOOST_TEST(!out.is_direct());
        write(context, out, source, 0);
    }
    file in(path.str(), open_mode::read, direct_io::automatic);
    BOOST_TEST(!in.is_direct());
    BOOST_TEST(read(context, in, target, 0).bytes == size);
    BOOST_TEST(std::memcmp(source.data(), target.data(), size) == 0);
}

BOOST_AUTO_TEST_CASE(path_with_a_nul_byte_is_refused_not_cut_short) {
    temp_path victim("victim");
    nvmeio_test::spew(victim.str(), "precious", 8);
    const std::string path = victim.str() + std::string("\0.tmp", 5);
    for (const open_mode mode : {open_mode::read, open_mode::write, open_mode::read_write}) {
        try {
            file f(path, mode);
            BOOST_ERROR("a path with a NUL byte was opened");
        } catch (const std::invalid_argument& e) {
            const std::string text = e.what();
            BOOST_TEST(contains(text, victim.str() + "\\0.tmp"), text);
            BOOST_TEST(
                contains(text, "NUL byte at position " + std::to_string(victim.str().size())),
                text);
        }
        std::error_code ec;
        BOOST_CHECK_THROW((void)file::open(path, mode, direct_io::on, ec), std::invalid_argument);
    }
    BOOST_TEST(nvmeio_test::file_size(victim.str()) == 8u);  // not truncated
}

BOOST_AUTO_TEST_CASE(closed_and_moved_from_handles_name_their_file) {
    temp_path path("closed");
    nvmeio_test::spew(path.str(), "0123456789", 10);
    file original(path.str(), open_mode::read_write, direct_io::off);
    file taker(std::move(original));
    file closed(path.str(), open_mode::read_write, direct_io::off);
    closed.close();
    file assigned(path.str(), open_mode::read_write, direct_io::off);
    file target;
    target = std::move(assigned);
    for (file* f : {&original, &closed, &assigned}) {
        BOOST_TEST(!f->is_open());
        BOOST_TEST(f->path() == path.str());
        char byte = 0;
        const std::vector<std::function<void()>> operations = {
            [&] { (void)f->size(); },
            [&] { (void)f->read_at(nvmeio::memory(&byte, 1), 0); },
            [&] { f->write_at(nvmeio::memory(&byte, 1), 0); },
            [&] { f->truncate(0); },
            [&] { f->sync(); },
        };
        for (const auto& operation : operations) {
            try {
                operation();
                BOOST_ERROR("an operation on a closed handle succeeded");
            } catch (const io_error& e) {
                BOOST_TEST((e.code() == std::errc::bad_file_descriptor), e.what());
                BOOST_TEST(e.path() == path.str(), e.what());
                BOOST_TEST(contains(e.what(), "closed or was moved from"), e.what());
            }
        }
        std::error_code ec;
        BOOST_TEST(f->size(ec) == 0u);
        BOOST_TEST((ec == std::errc::bad_file_descriptor));
        aio_context context({2, 4096});
        try {
            (void)read(context, *f, nvmeio::memory(&byte, 1), 0);
            BOOST_ERROR("a transfer on a closed handle succeeded");
        } catch (const std::invalid_argument& e) {
            BOOST_TEST(contains(e.what(), path.str()), e.what());
            BOOST_TEST(contains(e.what(), "not open"), e.what());
        }
    }
    BOOST_TEST(taker.size() == 10u);
    BOOST_TEST(target.size() == 10u);
    try {
        (void)file().size();
        BOOST_ERROR("size of an empty handle succeeded");
    } catch (const io_error& e) {
        BOOST_TEST(contains(e.what(), "holds no file"), e.what());
    }
}

// pread of a range ending at 2^63 - 1 is allowed and is the end of the file; O_DIRECT cannot
// ask for that range's whole alignment unit, and must not fail where the buffered path does not.
BOOST_AUTO_TEST_CASE(read_at_of_the_last_bytes_below_int64_max_is_the_end_of_the_file) {
    temp_path path("far_end");
    nvmeio_test::spew(path.str(), "abc", 3);
    constexpr auto max_offset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
    for (const direct_io direct : {direct_io::off, direct_io::on}) {
        BOOST_TEST_CONTEXT("direct=" << to_string(direct)) {
            file f(path.str(), open_mode::read, direct);
            BOOST_TEST(f.is_direct() == (direct == direct_io::on));
            std::vector<unsigned char> buffer(10'000, 7);
            for (const std::size_t length : {std::size_t{1}, std::size_t{10}, std::size_t{100}}) {
                BOOST_TEST(f.read_at(nvmeio::memory(buffer).first(length), max_offset - length) ==
                           0u);
            }
            // Starting a unit earlier: the reachable units are read (nothing there), then the
            // last one is the end of the file too.
            BOOST_TEST(f.read_at(nvmeio::memory(buffer).slice(1, 8291), max_offset - 8291) == 0u);
            BOOST_TEST(std::count(buffer.begin(), buffer.end(), 7) == 10'000);
        }
    }
}

// Where a filesystem lets a file reach 2^63 - 1 (tmpfs), the bytes in the last unit exist, and
// O_DIRECT cannot read them: a precise EOVERFLOW, not a wrong 0 or a bare EINVAL.
BOOST_AUTO_TEST_CASE(read_at_of_existing_bytes_o_direct_cannot_address_is_eoverflow) {
    if (!nvmeio_test::accepts_o_direct("/dev/shm")) {
        nvmeio_test::skip("EOVERFLOW at 2^63 not tested: tmpfs refuses O_DIRECT (Linux < 6.6)");
        return;
    }
    temp_path path("far_end", "/dev/shm");
    constexpr auto max_offset = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
    const int fd = ::open(path.str().c_str(), O_RDWR | O_CREAT, 0644);
    BOOST_TEST_REQUIRE(fd >= 0);
    const bool written = ::pwrite(fd, "xyz", 3, static_cast<off_t>(max_offset - 3)) == 3;
    ::close(fd);
    if (!written) {
        nvmeio_test::skip("EOVERFLOW at 2^63 not tested: this tmpfs takes no byte at 2^63 - 4");
        return;
    }
    file buffered(path.str(), open_mode::read, direct_io::off);
    char got[3] = {};
    BOOST_TEST(buffered.read_at(got, max_offset - 3) == 3u);
    BOOST_TEST(std::string(got, 3) == "xyz");
    file direct(path.str(), open_mode::read, direct_io::on);
    BOOST_TEST_REQUIRE(direct.is_direct());
    try {
        (void)direct.read_at(got, max_offset - 3);
        BOOST_ERROR("O_DIRECT read the last unit below 2^63");
    } catch (const io_error& e) {
        BOOST_TEST((e.code() == std::errc::value_too_large), e.what());
        BOOST_TEST(contains(e.what(), "direct_io::off"), e.what());
        BOOST_TEST(e.offset() == max_offset - 3);
    }
}

// open() adds O_NONBLOCK so that a FIFO cannot block it; what is served must not keep it (io_uring
// would answer EAGAIN instead of waiting for the disk).
BOOST_AUTO_TEST_CASE(served_descriptors_are_left_blocking) {
    temp_path path("blocking");
    for (const direct_io direct : {direct_io::on, direct_io::off}) {
        for (const open_mode mode : {open_mode::write, open_mode::read_write, open_mode::read}) {
            file f(path.str(), mode, direct);
            const int flags = ::fcntl(f.native_handle(), F_GETFL);
            BOOST_TEST(flags >= 0);
            BOOST_TEST((flags & O_NONBLOCK) == 0);
            BOOST_TEST(((flags & O_DIRECT) != 0) == f.is_direct());
        }
    }
    file null("/dev/null", open_mode::read_write, direct_io::automatic);
    BOOST_TEST((::fcntl(null.native_handle(), F_GETFL) & O_NONBLOCK) == 0);
}

// One file however a handle reaches it (two opens, a hard link, buffered or O_DIRECT) has one
// identity; another file, or a rename's new file under the old name, another. A device is its
// own number: /dev/null and a node of it made elsewhere are one. A closed handle has none.
BOOST_AUTO_TEST_CASE(identity_is_one_for_one_file_however_reached_and_differs_between_files) {
    temp_path path("identity");
    temp_path link("identity_link");
    temp_path other("identity_other");
    nvmeio_test::spew(path.str(), "0123456789", 10);
    nvmeio_test::spew(other.str(), "0123456789", 10);
    BOOST_REQUIRE(::link(path.str().c_str(), link.str().c_str()) == 0);
    const file a(path.str(), open_mode::read, direct_io::on);
    const file b(path.str(), open_mode::read_write, direct_io::off);
    const file c(link.str(), open_mode::read, direct_io::on);
    const file d(other.str(), open_mode::read, direct_io::on);
    BOOST_TEST((a.identity() == b.identity()));
    BOOST_TEST((a.identity() == c.identity()));
    BOOST_TEST((a.identity() != d.identity()));
    BOOST_TEST((a.identity().kind == file_kind::regular));
    // The name now reaches another file; the handle still reaches its own.
    BOOST_REQUIRE(::rename(other.str().c_str(), path.str().c_str()) == 0);
    const file e(path.str(), open_mode::read, direct_io::on);
    BOOST_TEST((e.identity() == d.identity()));
    BOOST_TEST((e.identity() != a.identity()));

    const file null(std::string("/dev/null"), open_mode::read, direct_io::off);
    const file zero(std::string("/dev/zero"), open_mode::read, direct_io::off);
    BOOST_TEST((null.identity() != zero.identity()));
    BOOST_TEST((null.identity().kind == file_kind::character_device));
    BOOST_TEST(null.identity().inode == 0u);
    temp_path node("identity_null");
    std::error_code opened;
    const file again = ::mknod(node.str().c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0
                           ? file::open(node.str(), open_mode::read, direct_io::off, opened)
                           : file();
    if (again.is_open()) {
        BOOST_TEST((again.identity() == null.identity()));
    } else {
        BOOST_TEST_MESSAGE("no second node of /dev/null here (not root, or a nodev mount)");
    }

    file closed(path.str(), open_mode::read, direct_io::off);
    closed.close();
    std::error_code ec;
    BOOST_TEST((closed.identity(ec) == file_identity{}));
    BOOST_TEST((ec == std::errc::bad_file_descriptor));
    const std::string what = message_of<io_error>([&] { (void)closed.identity(); });
    BOOST_TEST(contains(what, "fstat (the handle is closed or was moved from)"), what);
    BOOST_TEST(contains(what, path.str()), what);
}

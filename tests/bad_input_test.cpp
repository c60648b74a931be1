#define BOOST_TEST_MODULE bad_input
#include <boost/test/unit_test.hpp>

// The bad inputs not already pinned by file_test, aio_context_test and strategy_test (see
// docs/GUARANTEES.md for the whole matrix): each gives a precise error or a defined result.

#include <grp.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <nvmeio/stripe.hpp>
#include <string>
#include <vector>

#include "leak_check.hpp"
#include "skip.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::every_config;
using nvmeio_test::temp_path;

namespace {

constexpr std::size_t block = 64 * 1024;
constexpr uid_t nobody = 65534;

std::string describe(const transfer_config& c) {
    return std::string(to_string(c.strategy)) + "/" + to_string(c.submit);
}

// What an io_error said, as seen by a test.
struct error_seen {
    bool thrown = false;
    int code = 0;
    std::string what;
};

template <class F>
error_seen io_error_of(F&& f) {
    try {
        f();
    } catch (const io_error& e) {
        return {true, e.code().value(), e.what()};
    }
    return {};
}

// Runs `f` in a child process that has dropped root to uid/gid 65534 (nobody), because root
// bypasses file modes. The child sends back the io_error `f` threw. `ok` is false when the
// privileges could not be dropped.
error_seen io_error_as_nobody(const std::function<void()>& f, bool& ok) {
    int channel[2];
    ok = false;
    if (::pipe(channel) != 0) return {};
    std::cout.flush();  // or the child would print the parent's buffered output again
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(channel[0]);
        error_seen seen;
        int status = 3;
        if (::setgroups(0, nullptr) == 0 && ::setresgid(nobody, nobody, nobody) == 0 &&
            ::setresuid(nobody, nobody, nobody) == 0) {
            seen = io_error_of(f);
            status = seen.thrown ? 0 : 1;
        }
        const std::string message = std::to_string(seen.code) + " " + seen.what;
        (void)!::write(channel[1], message.data(), message.size());
        ::close(channel[1]);
        ::_exit(status);
    }
    ::close(channel[1]);
    std::string message;
    char chunk[512];
    for (ssize_t got; (got = ::read(channel[0], chunk, sizeof chunk)) > 0;)
        message.append(chunk, static_cast<std::size_t>(got));
    ::close(channel[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 3) return {};
    ok = true;
    error_seen seen;
    seen.thrown = WEXITSTATUS(status) == 0;
    const std::size_t space = message.find(' ');
    seen.code = std::atoi(message.substr(0, space).c_str());
    seen.what = space == std::string::npos ? "" : message.substr(space + 1);
    return seen;
}

// A small filesystem of our own to fill up: tmpfs with a size limit (root only).
class small_filesystem {
  public:
    explicit small_filesystem(const char* options) {
        char pattern[] = "/tmp/nvmeio-full-XXXXXX";
        if (::mkdtemp(pattern) == nullptr) return;
        if (::mount("tmpfs", pattern, "tmpfs", 0, options) == 0) {
            path_ = pattern;
        } else {
            ::rmdir(pattern);
        }
    }
    // ext4 of `size` bytes in the image file `image`, loop-mounted (needs mkfs.ext4, mount).
    small_filesystem(const std::string& image, std::size_t size) : image_(image) {
        char pattern[] = "/tmp/nvmeio-full-XXXXXX";
        if (::mkdtemp(pattern) == nullptr) return;
        const std::string make = "truncate -s " + std::to_string(size) + " '" + image +
                                 "' && mkfs.ext4 -q -F -b 4096 '" + image +
                                 "' >/dev/null 2>&1 && mount -o loop '" + image + "' " + pattern;
        if (std::system(make.c_str()) == 0) {
            path_ = pattern;
        } else {
            ::rmdir(pattern);
        }
    }
    ~small_filesystem() {
        if (!path_.empty()) {
            ::umount(path_.c_str());  // also frees an auto-cleared loop device
            ::rmdir(path_.c_str());
        }
        if (!image_.empty()) ::unlink(image_.c_str());
    }
    small_filesystem(const small_filesystem&) = delete;
    small_filesystem& operator=(const small_filesystem&) = delete;
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    std::string image_;
};

// Sets or clears the immutable attribute (chattr +i); false where the filesystem refuses.
bool set_immutable(const std::string& path, bool on) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    int flags = 0;
    bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (ok) {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    ::close(fd);
    return ok;
}

}  // namespace

BOOST_AUTO_TEST_CASE(file_without_read_permission_is_refused_with_eacces_naming_the_path) {
    temp_path path("no_permission");
    nvmeio_test::spew(path.str(), "secret", 6);
    ::chmod(path.str().c_str(), 0600);  // owned by whoever runs the test, private to it
    const auto open_it = [&] { file f(path.str(), open_mode::read); };
    error_seen seen;
    if (::geteuid() == 0) {
        bool ok = false;
        seen = io_error_as_nobody(open_it, ok);
        BOOST_TEST_REQUIRE(ok, "could not drop root to uid 65534 in a child process");
    } else {
        ::chmod(path.str().c_str(), 0000);
        seen = io_error_of(open_it);
    }
    BOOST_TEST(seen.thrown);
    BOOST_TEST(seen.code == EACCES, seen.what);
    BOOST_TEST(contains(seen.what, "open"), seen.what);
    BOOST_TEST(contains(seen.what, path.str()), seen.what);
    BOOST_TEST(contains(seen.what, "Permission denied"), seen.what);
}

BOOST_AUTO_TEST_CASE(read_only_file_opened_for_writing_is_refused_and_keeps_its_bytes) {
    temp_path path("read_only_mode");
    nvmeio_test::spew(path.str(), "keep me", 7);
    ::chmod(path.str().c_str(), 0444);
    if (::geteuid() == 0) {
        // The file belongs to nobody, who may read it but not write it.
        BOOST_TEST_REQUIRE(::chown(path.str().c_str(), nobody, nobody) == 0);
        for (open_mode mode : {open_mode::write, open_mode::read_write}) {
            bool ok = false;
            const error_seen seen =
                io_error_as_nobody([&] { file f(path.str(), mode, direct_io::automatic); }, ok);
            BOOST_TEST_REQUIRE(ok, "could not drop root to uid 65534 in a child process");
            BOOST_TEST(seen.code == EACCES, seen.what);
            BOOST_TEST(contains(seen.what, path.str()), seen.what);
        }
        bool ok = false;
        const error_seen reading = io_error_as_nobody(
            [&] { file f(path.str(), open_mode::read, direct_io::automatic); }, ok);
        BOOST_TEST(ok);
        BOOST_TEST(!reading.thrown, "reading the file should be allowed: " << reading.what);
    } else {
        const error_seen seen = io_error_of([&] { file f(path.str(), open_mode::write); });
        BOOST_TEST(seen.code == EACCES, seen.what);
    }
    BOOST_TEST(nvmeio_test::file_size(path.str()) == 7u);  // open_mode::write did not truncate it
}

BOOST_AUTO_TEST_CASE(immutable_file_opened_for_writing_is_refused_even_for_root) {
    temp_path path("immutable");
    nvmeio_test::spew(path.str(), "frozen", 6);
    if (!set_immutable(path.str(), true)) {
        BOOST_TEST(::geteuid() != 0u, "running as root but chattr +i failed on the test disk");
        nvmeio_test::skip("immutable files not tested: setting the attribute needs root");
        return;
    }
    struct unfreeze {
        const std::string& p;
        ~unfreeze() { set_immutable(p, false); }
    } guard{path.str()};
    for (open_mode mode : {open_mode::write, open_mode::read_write}) {
        const error_seen seen = io_error_of([&] { file f(path.str(), mode); });
        BOOST_TEST(seen.code == EPERM, seen.what);
        BOOST_TEST(contains(seen.what, "open"), seen.what);
        BOOST_TEST(contains(seen.what, path.str()), seen.what);
    }
    file f(path.str(), open_mode::read);  // reading is still fine
    BOOST_TEST(f.size() == 6u);
}

BOOST_AUTO_TEST_CASE(empty_file_reads_zero_bytes_and_leaves_the_buffer_alone) {
    temp_path path("empty");
    nvmeio_test::spew(path.str(), "", 0);
    aio_context context({4, block});
    for (direct_io direct : {direct_io::on, direct_io::off}) {
        file in(path.str(), open_mode::read, direct);
        for (const transfer_config& c : every_config()) {
            BOOST_TEST_CONTEXT(describe(c) << " direct=" << to_string(direct)) {
                aligned_buffer target(3 * block + 5);
                std::memset(target.data(), 0xAB, target.capacity());
                BOOST_TEST(read(context, in, target, 0, c).bytes == 0u);
                BOOST_TEST(read(context, in, nvmeio::memory(target).first(0), 0, c).bytes == 0u);
                std::size_t touched = 0;
                for (std::size_t i = 0; i < target.capacity(); ++i)
                    touched += target.data()[i] != std::byte{0xAB};
                BOOST_TEST(touched == 0u);
            }
        }
    }
    file out(path.str(), open_mode::read_write);
    // Nothing to write, no buffer.
    BOOST_TEST(write(context, out, nvmeio::memory(static_cast<const void*>(nullptr), 0), 0).bytes ==
               0u);
    BOOST_TEST(nvmeio_test::file_size(path.str()) == 0u);
}

BOOST_AUTO_TEST_CASE(block_size_larger_than_the_transfer_moves_exactly_the_requested_bytes) {
    aio_context context({4, 8u << 20});  // one 8 MiB block, far larger than the buffer
    for (const transfer_config& c : every_config()) {
        BOOST_TEST_CONTEXT(describe(c)) {
            temp_path path("big_block");
            const std::size_t size = 100 * 1024 + 3;
            aligned_buffer source(size), target(size + 8192);
            nvmeio_test::fill_pattern(source.data(), size, 12);
            {
                file out(path.str(), open_mode::write);
                BOOST_TEST(write(context, out, source, 0, c).bytes == size);
            }
            BOOST_TEST(nvmeio_test::file_size(path.str()) == size);
            std::memset(target.data(), 0xAB, target.capacity());
            file in(path.str(), open_mode::read);
            BOOST_TEST(read(context, in, nvmeio::memory(target).first(size), 0, c).bytes == size);
            BOOST_TEST(std::memcmp(target.data(), source.data(), size) == 0);
            BOOST_TEST(std::to_integer<int>(target.data()[size]) == 0xAB);
        }
    }
}

BOOST_AUTO_TEST_CASE(buffer_too_small_for_the_requested_bytes_is_rejected_with_both_sizes) {
    temp_path path("small_buffer");
    nvmeio_test::spew(path.str(), std::string(4 * block, 'x').data(), 4 * block);
    aio_context context({4, block});
    aligned_buffer buffer(block);  // its capacity is a whole block too; only size() counts
    for (open_mode mode : {open_mode::read, open_mode::read_write}) {
        file f(path.str(), mode);
        try {
            if (mode == open_mode::read) {
                (void)read(context, f, nvmeio::memory(buffer).first(2 * block), 0);
            } else {
                (void)write(context, f, nvmeio::memory(buffer).first(block + 1), 0);
            }
            BOOST_FAIL("a length larger than the buffer was accepted");
        } catch (const std::invalid_argument& e) {
            const std::string what = e.what();
            BOOST_TEST(
                contains(what, std::to_string(mode == open_mode::read ? 2 * block : block + 1) +
                                   " bytes"),
                what);
            BOOST_TEST(contains(what, "holding " + std::to_string(block) + " bytes"), what);
            BOOST_TEST(contains(what, "passes its end"), what);
        }
    }
    BOOST_TEST((nvmeio_test::slurp(path.str()) ==
                std::vector<unsigned char>(4 * block, static_cast<unsigned char>('x'))));
}

BOOST_AUTO_TEST_CASE(range_past_the_largest_file_offset_is_rejected) {
    temp_path path("far_range");
    nvmeio_test::spew(path.str(), "abcd", 4);
    aio_context context({4, block});
    file f(path.str(), open_mode::read_write);
    aligned_buffer buffer(block);
    const std::uint64_t largest = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
    for (std::uint64_t offset :
         {largest - 4095, std::numeric_limits<std::uint64_t>::max() - 4095}) {
        BOOST_TEST_CONTEXT("offset " << offset) {
            try {
                (void)write(context, f, buffer, offset);
                BOOST_FAIL("a range past the largest file offset was accepted");
            } catch (const std::invalid_argument& e) {
                BOOST_TEST(contains(e.what(), "passes the largest file offset"), e.what());
                BOOST_TEST(contains(e.what(), std::to_string(offset)), e.what());
            }
        }
    }
    BOOST_TEST(nvmeio_test::file_size(path.str()) == 4u);
}

// The same on every context and target: a view near SIZE_MAX (or a range past the largest file
// offset) is refused before anything is planned; a stripe set used to cut it into stripe units
// first, without end.
BOOST_AUTO_TEST_CASE(range_past_the_largest_file_offset_is_rejected_on_every_target) {
    temp_path a("far_stripe_a");
    temp_path b("far_stripe_b");
    parallel_context context({2, {4, block}});
    stripe_set set(std::vector<std::string>{a.str(), b.str()}, open_mode::read_write, block);
    file f(a.str(), open_mode::read_write);
    std::vector<char> memory(block);
    const std::uint64_t largest = static_cast<std::uint64_t>(std::numeric_limits<off_t>::max());
    const auto refused = [&](const char* what, auto call, std::uint64_t offset) {
        BOOST_TEST_CONTEXT(what << ", offset " << offset) {
            nvmeio_test::within(std::chrono::seconds(60), what, [&] {
                try {
                    (void)call();
                    BOOST_FAIL("a range past the largest file offset was accepted");
                } catch (const std::invalid_argument& e) {
                    BOOST_TEST(contains(e.what(), "passes the largest file offset"), e.what());
                    BOOST_TEST(contains(e.what(), std::to_string(offset)), e.what());
                }
                return 0;
            });
        }
    };
    const mutable_memory huge = nvmeio::memory(static_cast<void*>(memory.data()), SIZE_MAX);
    refused(
        "stripe, a SIZE_MAX view", [&] { return read(context, set, huge, 0); }, 0);
    refused(
        "stripe, past the largest offset",
        [&] { return write(context, set, memory, largest - 4095); }, largest - 4095);
    refused(
        "parallel, a SIZE_MAX view", [&] { return read(context, f, huge, 0); }, 0);
    BOOST_TEST(nvmeio_test::file_size(a.str()) == 0u);
    BOOST_TEST(nvmeio_test::file_size(b.str()) == 0u);
}

BOOST_AUTO_TEST_CASE(length_beyond_4_gib_is_counted_in_64_bits) {
    // A 4 GiB + 8 KiB read of a 12 KiB + 5 file: the byte count only comes out right if no
    // length is squeezed through 32 bits (it would be 8 KiB). The buffer is reserved, never
    // touched past the file's end, so no memory is used for it.
    const std::size_t length = (std::size_t{4} << 30) + 8192;
    void* memory = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    BOOST_TEST_REQUIRE(memory != MAP_FAILED);
    temp_path path("huge_length");
    const std::size_t size = 3 * 4096 + 5;
    const auto bytes = nvmeio_test::pattern(size, 44);
    nvmeio_test::spew(path.str(), bytes.data(), size);
    aio_context context({8, 1u << 20});
    for (direct_io direct : {direct_io::on, direct_io::off}) {
        for (const transfer_config& c : every_config()) {
            BOOST_TEST_CONTEXT(describe(c) << " direct=" << to_string(direct)) {
                file in(path.str(), open_mode::read, direct);
                BOOST_TEST(read(context, in, nvmeio::memory(memory, length), 0, c).bytes == size);
                BOOST_TEST(std::memcmp(memory, bytes.data(), size) == 0);
            }
        }
    }
    ::munmap(memory, length);
}

namespace {

// Writes twice what `dir` can hold with every strategy, submit mode and direct mode, and checks
// the error and what is left in the file.
void fill_up(const std::string& dir, std::size_t capacity) {
    const std::size_t length = 2 * capacity + 777;
    aligned_buffer source(length);
    nvmeio_test::fill_pattern(source.data(), length, 3);
    aio_context context({4, block});
    for (direct_io direct : {direct_io::on, direct_io::off}) {
        for (const transfer_config& c : every_config()) {
            BOOST_TEST_CONTEXT(dir << " " << describe(c) << " direct=" << to_string(direct)) {
                temp_path path("full", dir);
                file out(path.str(), open_mode::write, direct);
                try {
                    (void)write(context, out, source, 0, c);
                    BOOST_FAIL("twice the filesystem's size fit in it");
                } catch (const io_error& e) {
                    const std::string what = e.what();
                    BOOST_TEST_MESSAGE(what);
                    BOOST_TEST((e.code() == std::errc::no_space_on_device), what);
                    BOOST_TEST(contains(e.operation(), "write"), what);
                    BOOST_TEST(e.path() == path.str());
                    BOOST_TEST(contains(what, path.str()), what);
                    BOOST_TEST(contains(what, "at offset " + std::to_string(e.offset())), what);
                    // The failed range lies inside the write, where the filesystem ran out.
                    BOOST_TEST(e.length() > 0u);
                    BOOST_TEST(e.offset() + e.length() <= length);
                    BOOST_TEST(e.offset() <= capacity);
                }
                // What reached the file is the caller's bytes or never-written zeros, and the
                // file does not reach past the range.
                const std::vector<unsigned char> now = nvmeio_test::slurp(path.str());
                BOOST_TEST(now.size() <= length);
                std::size_t foreign = 0;
                const auto* expected = reinterpret_cast<const unsigned char*>(source.data());
                for (std::size_t i = 0; i < now.size(); ++i)
                    foreign += now[i] != expected[i] && now[i] != 0;
                BOOST_TEST(foreign == 0u);
            }
        }
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(disk_full_is_an_enospc_io_error_naming_the_write_file_and_offset) {
    if (::geteuid() != 0) {
        nvmeio_test::skip("a full disk not tested: mounting a small filesystem to fill needs root");
        return;
    }
    {
        small_filesystem fs("size=1m");  // 256 pages of 4 KiB
        BOOST_TEST_REQUIRE(!fs.path().empty(), "running as root but could not mount a tmpfs");
        fill_up(fs.path(), 1u << 20);
    }
    // ext4 on a loop device: a block device's O_DIRECT path and ext4's block allocator.
    const std::string image = nvmeio_test::scratch_dir() + "/small-ext4.img";
    small_filesystem fs(image, 16u << 20);
    if (fs.path().empty()) {
        nvmeio_test::skip(
            "a full ext4 not tested: mkfs.ext4 or mount -o loop failed (the tmpfs "
            "case ran)");
        return;
    }
    fill_up(fs.path(), 16u << 20);
}

// A write that grows the file reserves its whole range with fallocate first, so a range that
// does not fit fails there, before any byte moves, even when only its unaligned tail would not
// have fitted.
BOOST_AUTO_TEST_CASE(disk_full_is_reported_for_the_whole_range_before_any_byte_moves) {
    if (::geteuid() != 0) {
        nvmeio_test::skip("a full disk not tested: mounting a small filesystem to fill needs root");
        return;
    }
    small_filesystem fs("size=64k");  // 16 pages
    BOOST_TEST_REQUIRE(!fs.path().empty(), "running as root but could not mount a small tmpfs");
    aio_context context({4, 4096});
    temp_path filler("filler", fs.path());
    const std::vector<unsigned char> fill(15 * 4096, 1);
    nvmeio_test::spew(filler.str(), fill.data(), fill.size());  // 15 of 16 pages used
    BOOST_TEST_REQUIRE(nvmeio_test::file_size(filler.str()) == fill.size());
    for (direct_io direct : {direct_io::on, direct_io::off}) {
        BOOST_TEST_CONTEXT("direct=" << to_string(direct)) {
            temp_path path("tail", fs.path());
            const std::size_t length = 4096 + 100;  // one aligned page fits, the tail does not
            aligned_buffer source(length);
            nvmeio_test::fill_pattern(source.data(), length, 8);
            file out(path.str(), open_mode::write, direct);
            try {
                (void)write(context, out, source, 0);
                BOOST_FAIL("the range fit in a full filesystem");
            } catch (const io_error& e) {
                BOOST_TEST_MESSAGE(e.what());
                BOOST_TEST((e.code() == std::errc::no_space_on_device), e.what());
                BOOST_TEST(contains(e.operation(), "write"), e.what());
                BOOST_TEST(contains(e.operation(), "fallocate"), e.what());
                BOOST_TEST(e.offset() == 0u, e.what());
                BOOST_TEST(e.length() == length, e.what());
            }
            // Nothing past the range, and nothing but zeros or the caller's bytes inside it.
            const std::vector<unsigned char> now = nvmeio_test::slurp(path.str());
            BOOST_TEST(now.size() <= length);
            const auto* expected = reinterpret_cast<const unsigned char*>(source.data());
            std::size_t foreign = 0;
            for (std::size_t i = 0; i < now.size(); ++i)
                foreign += now[i] != expected[i] && now[i] != 0;
            BOOST_TEST(foreign == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(failed_opens_contexts_and_transfers_leak_no_descriptor_context_or_lock) {
    const nvmeio_test::held_resources before;
    for (int round = 0; round < 3; ++round) {
        BOOST_CHECK_THROW(file(nvmeio_test::scratch_dir() + "/missing", open_mode::read), io_error);
        BOOST_CHECK_THROW(file(nvmeio_test::scratch_dir(), open_mode::read), io_error);
        BOOST_CHECK_THROW(aio_context({0, 4096}), std::invalid_argument);
        BOOST_CHECK_THROW(aio_context({static_cast<unsigned>(aio_max_nr() + 1), 4096}),
                          std::invalid_argument);
        temp_path path("leaks");
        nvmeio_test::spew(path.str(), "abcd", 4);
        aio_context context({4, 1000});
        file f(path.str(), open_mode::read);
        aligned_buffer locked(block, 4096, buffer_options{false, false, true});
        BOOST_TEST(locked.locked());
        BOOST_CHECK_THROW((void)read(context, f, locked, 0), std::invalid_argument);
        BOOST_CHECK_THROW((void)read(context, f, nvmeio::memory(locked).first(2 * block), 0),
                          std::invalid_argument);
    }
    BOOST_TEST(nvmeio_test::held_resources{} == before);
}

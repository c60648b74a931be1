#define BOOST_TEST_MODULE block_device
#include <boost/test/unit_test.hpp>

// Raw block devices as targets, as users point fio and tensor swappers at /dev/nvme0n1: loop
// devices with 512- and 4096-byte logical blocks over image files, through both backends, every
// strategy and submit mode. The image file is the independent witness of the device's bytes.

#include <unistd.h>

#include <cstring>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "backend_support.hpp"
#include "loop_device.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::every_config;

namespace {

constexpr std::uint64_t device_size = 8u << 20;
constexpr std::size_t block = 64 * 1024;
constexpr unsigned sector_sizes[] = {512, 4096};

// The loop device for `sector_size`, or a loud reason why this machine cannot make one. As root
// with a loop driver, failing to make one fails the test.
bool make_device(const nvmeio_test::loop_device& device, unsigned sector_size) {
    if (!device.path().empty()) return true;
    const std::string why = "block devices NOT TESTED with " + std::to_string(sector_size) +
                            "-byte sectors: " + device.why_not();
    if (::geteuid() != 0 || contains(device.why_not(), "does not exist")) {
        BOOST_WARN_MESSAGE(false, why + (::geteuid() != 0 ? " (needs root)" : ""));
    } else {
        BOOST_ERROR(why);
    }
    return false;
}

std::string describe(const transfer_config& c) {
    return std::string(to_string(c.strategy)) + "/" + to_string(c.submit);
}

}  // namespace

BOOST_AUTO_TEST_CASE(device_size_is_its_capacity_and_alignment_its_logical_block_size) {
    for (const unsigned sector : sector_sizes) {
        BOOST_TEST_CONTEXT("sector size " << sector) {
            nvmeio_test::loop_device device(device_size, sector, 1);
            if (!make_device(device, sector)) continue;
            for (const direct_io direct : {direct_io::on, direct_io::off}) {
                file f(device.path(), open_mode::read, direct);
                BOOST_TEST((f.kind() == file_kind::block_device));
                BOOST_TEST(f.size() == device_size);
                std::error_code ec;
                BOOST_TEST(f.size(ec) == device_size);
                BOOST_TEST(!ec);
                BOOST_TEST(f.alignment().offset == sector);
                BOOST_TEST(f.alignment().memory <= sector);
                // The fallback where statx does not report it (Linux before 6.11).
                const dio_alignment fallback = detail::block_device_alignment(f.native_handle());
                BOOST_TEST(fallback.offset == sector);
                BOOST_TEST(fallback.memory == sector);
                BOOST_TEST(std::string(fallback.source) == "BLKSSZGET");
            }
        }
    }
}

// The README's minimal program on a device: a buffer of f.size() bytes, one read.
BOOST_AUTO_TEST_CASE_TEMPLATE(whole_device_reads_and_writes_are_byte_exact, Backend,
                              nvmeio_test::backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    for (const unsigned sector : sector_sizes) {
        nvmeio_test::loop_device device(device_size, sector, 2);
        if (!make_device(device, sector)) continue;
        basic_aio_context<Backend> context({8, block});
        std::uint64_t seed = 10;
        for (const transfer_config& config : every_config()) {
            BOOST_TEST_CONTEXT("sector " << sector << " " << Backend::name << " "
                                         << describe(config)) {
                const std::vector<unsigned char> expected = nvmeio_test::pattern(device_size, seed);
                {
                    file out(device.path(), open_mode::read_write);
                    BOOST_TEST_REQUIRE(out.is_direct());
                    aligned_buffer source(static_cast<std::size_t>(out.size()));
                    BOOST_TEST_REQUIRE(source.size() == device_size);
                    std::memcpy(source.data(), expected.data(), expected.size());
                    const transfer_result wrote =
                        write(context, out, source, source.size(), 0, config);
                    BOOST_TEST(wrote.bytes == device_size);
                }
                BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
                file in(device.path(), open_mode::read);
                aligned_buffer buffer(static_cast<std::size_t>(in.size()));
                std::memset(buffer.data(), 0, buffer.size());
                const transfer_result got = read(context, in, buffer, buffer.size(), 0, config);
                BOOST_TEST(got.bytes == device_size);
                BOOST_TEST(std::memcmp(buffer.data(), expected.data(), device_size) == 0);
                ++seed;
            }
        }
    }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(unaligned_tail_on_a_device_keeps_the_bytes_after_it, Backend,
                              nvmeio_test::backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    for (const unsigned sector : sector_sizes) {
        BOOST_TEST_CONTEXT("sector " << sector << " " << Backend::name) {
            nvmeio_test::loop_device device(device_size, sector, 3);
            if (!make_device(device, sector)) continue;
            std::vector<unsigned char> expected = nvmeio_test::pattern(device_size, 3);
            basic_aio_context<Backend> context({4, block});
            file f(device.path(), open_mode::read_write);
            const std::size_t length = 3 * block + 1234;  // ends inside a sector
            const std::uint64_t offset = 2 * block;
            aligned_buffer source(length);
            nvmeio_test::fill_pattern(source.data(), length, 30);
            BOOST_TEST(write(context, f, source, length, offset).bytes == length);
            std::memcpy(expected.data() + offset, source.data(), length);
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
            BOOST_TEST(f.size() == device_size);  // a device never grows or shrinks
            // The synchronous path, any alignment.
            std::vector<unsigned char> got(777);
            BOOST_TEST(f.read_at(got.data(), got.size(), offset + length - 100) == got.size());
            BOOST_TEST(
                std::memcmp(got.data(), expected.data() + offset + length - 100, got.size()) == 0);
            f.write_at(got.data(), 5, 3);
            std::memcpy(expected.data() + 3, got.data(), 5);
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
        }
    }
}

// What pwrite and pread say at the end of a device: a write past it is ENOSPC at the device's
// end (never an fallocate error), a read returns the bytes that exist.
BOOST_AUTO_TEST_CASE_TEMPLATE(past_the_device_end_writes_fail_with_enospc_and_reads_stop, Backend,
                              nvmeio_test::backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    for (const unsigned sector : sector_sizes) {
        nvmeio_test::loop_device device(device_size, sector, 4);
        if (!make_device(device, sector)) continue;
        basic_aio_context<Backend> context({4, block});
        file f(device.path(), open_mode::read_write);
        aligned_buffer buffer(4 * block + 100);
        nvmeio_test::fill_pattern(buffer.data(), buffer.size(), 40);
        for (const transfer_config& config : every_config()) {
            // Starting inside and crossing the end; starting at the end; an unaligned tail only.
            for (const std::uint64_t offset :
                 {device_size - block - sector, device_size, device_size - 2 * block}) {
                const std::size_t length =
                    offset == device_size - 2 * block ? 2 * block + 100 : buffer.size();
                BOOST_TEST_CONTEXT("sector " << sector << " " << Backend::name << " "
                                             << describe(config) << " offset " << offset
                                             << " length " << length) {
                    try {
                        (void)write(context, f, buffer, length, offset, config);
                        BOOST_ERROR("a write past the end of the device succeeded");
                    } catch (const io_error& e) {
                        BOOST_TEST_MESSAGE(e.what());
                        BOOST_TEST((e.code() == std::errc::no_space_on_device), e.what());
                        BOOST_TEST(!contains(e.operation(), "fallocate"), e.what());
                        BOOST_TEST(contains(e.operation(), "write"), e.what());
                        // Requests in flight may fail in any order: the first failure seen is
                        // reported, and every request past the end fails.
                        BOOST_TEST(e.offset() >= device_size, e.what());
                        BOOST_TEST(e.offset() < offset + length, e.what());
                        BOOST_TEST(e.path() == device.path());
                    }
                    BOOST_TEST(f.size() == device_size);
                    // Every byte up to the end was written, as pwrite would have.
                    const std::vector<unsigned char> now = nvmeio_test::slurp(device.image());
                    BOOST_TEST_REQUIRE(now.size() == device_size);
                    BOOST_TEST(std::memcmp(now.data() + offset, buffer.data(),
                                           static_cast<std::size_t>(device_size - offset)) == 0);
                    aligned_buffer back(length);
                    const transfer_result got = read(context, f, back, length, offset, config);
                    BOOST_TEST(got.bytes == device_size - offset);
                    BOOST_TEST(std::memcmp(back.data(), buffer.data(), got.bytes) == 0);
                }
            }
        }
        // The synchronous path says the same.
        try {
            f.write_at(buffer.data() + 1, 10, device_size - 5);
            BOOST_ERROR("write_at past the end of the device succeeded");
        } catch (const io_error& e) {
            BOOST_TEST((e.code() == std::errc::no_space_on_device), e.what());
        }
        BOOST_TEST(f.read_at(buffer.data() + 1, 10, device_size - 5) == 5u);
        BOOST_TEST(f.read_at(buffer.data() + 1, 10, device_size + 5) == 0u);
    }
}

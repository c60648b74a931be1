#define BOOST_TEST_MODULE block_device
#include <boost/test/unit_test.hpp>

// Raw block devices as targets, as users point fio and tensor swappers at /dev/nvme0n1: loop
// devices with 512- and 4096-byte logical blocks over image files, through both backends, every
// strategy and submit mode. The image file is the independent witness of the device's bytes.

#include <unistd.h>

#include <dirent.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nvmeio/aio_context.hpp>
#include <nvmeio/backend/io_uring.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/detail/engine.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "fault_backend.hpp"
#include "loop_device.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::every_config;

namespace {

constexpr std::uint64_t device_size = 8u << 20;
constexpr std::size_t block = 64 * 1024;
constexpr unsigned sector_sizes[] = {512, 4096};

// The loop device for `sector_size`; else, without root or a loop driver, a skip (skip.hpp), and
// as root with a loop driver, a failure.
bool make_device(const nvmeio_test::loop_device& device, unsigned sector_size) {
    if (!device.path().empty()) return true;
    const std::string why = "block devices not tested with " + std::to_string(sector_size) +
                            "-byte sectors: " + device.why_not();
    if (::geteuid() != 0 || contains(device.why_not(), "does not exist")) {
        nvmeio_test::skip(why + (::geteuid() != 0 ? " (needs root)" : ""));
    } else {
        BOOST_ERROR(why);
    }
    return false;
}

// The io-wq worker threads the thread `tid` has (io_uring names them "iou-wrk-<tid>").
int io_workers_of(long tid) {
    const std::string name = "iou-wrk-" + std::to_string(tid);
    int count = 0;
    DIR* tasks = ::opendir("/proc/self/task");
    BOOST_TEST_REQUIRE(tasks != nullptr);
    while (const dirent* entry = ::readdir(tasks)) {
        std::ifstream comm(std::string("/proc/self/task/") + entry->d_name + "/comm");
        std::string line;
        if (std::getline(comm, line) && line == name) ++count;
    }
    ::closedir(tasks);
    return count;
}

// AnonHugePages (KiB) of the mapping holding `address`, from /proc/self/smaps.
std::size_t anon_huge_kib(const void* address) {
    const auto at = reinterpret_cast<std::uintptr_t>(address);
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long begin = 0, end = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
            line.find(':') > line.find(' ')) {
            inside = at >= begin && at < end;
        } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
            return std::stoul(line.substr(14));
        }
    }
    return 0;
}

std::size_t sysfs_queue_limit(const std::string& device, const char* name) {
    std::ifstream in("/sys/block/" + device.substr(device.rfind('/') + 1) + "/queue/" + name);
    std::size_t value = 0;
    in >> value;
    return value;
}

// io_uring_backend, counting the most requests it had in flight at once.
class counting_io_uring : public io_uring_backend {
  public:
    using io_uring_backend::io_uring_backend;
    int submit(const io_request* requests, std::size_t count) noexcept {
        const int rc = io_uring_backend::submit(requests, count);
        if (rc > 0) most = std::max(most, tally += static_cast<std::size_t>(rc));
        return rc;
    }
    int reap(io_completion* out, std::size_t min, std::size_t max,
             const timespec* timeout) noexcept {
        const int rc = io_uring_backend::reap(out, min, max, timeout);
        if (rc > 0) tally -= static_cast<std::size_t>(rc);
        return rc;
    }
    std::size_t tally = 0;  // its own count, independent of the in_flight() the engine asks
    std::size_t most = 0;
};

// nvmeio's memory of 4 KiB pages whatever the system's transparent huge pages setting: memory
// of huge pages would stay whole on a device (io_uring_backend::segment_stays_whole).
aligned_buffer small_pages(std::size_t size) {
    aligned_buffer buffer(size);
    (void)::madvise(buffer.data(), buffer.capacity(), MADV_NOHUGEPAGE);
    return buffer;
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
                    const transfer_result wrote = write(context, out, source, 0, config);
                    BOOST_TEST(wrote.bytes == device_size);
                }
                BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
                file in(device.path(), open_mode::read);
                aligned_buffer buffer(static_cast<std::size_t>(in.size()));
                std::memset(buffer.data(), 0, buffer.size());
                const transfer_result got = read(context, in, buffer, 0, config);
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
            BOOST_TEST(write(context, f, source, offset).bytes == length);
            std::memcpy(expected.data() + offset, source.data(), length);
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
            BOOST_TEST(f.size() == device_size);  // a device never grows or shrinks
            // The synchronous path, any alignment.
            std::vector<unsigned char> got(777);
            BOOST_TEST(f.read_at(got, offset + length - 100) == got.size());
            BOOST_TEST(
                std::memcmp(got.data(), expected.data() + offset + length - 100, got.size()) == 0);
            f.write_at(nvmeio::memory(got).first(5), 3);
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
                        (void)write(context, f, nvmeio::memory(buffer).first(length), offset,
                                    config);
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
                    const transfer_result got = read(context, f, back, offset, config);
                    BOOST_TEST(got.bytes == device_size - offset);
                    BOOST_TEST(std::memcmp(back.data(), buffer.data(), got.bytes) == 0);
                }
            }
        }
        // The synchronous path says the same.
        try {
            f.write_at(nvmeio::memory(buffer).slice(1, 10), device_size - 5);
            BOOST_ERROR("write_at past the end of the device succeeded");
        } catch (const io_error& e) {
            BOOST_TEST((e.code() == std::errc::no_space_on_device), e.what());
        }
        BOOST_TEST(f.read_at(nvmeio::memory(buffer).slice(1, 10), device_size - 5) == 5u);
        BOOST_TEST(f.read_at(nvmeio::memory(buffer).slice(1, 10), device_size + 5) == 0u);
    }
}

// Every front end reaches the device through the same engine: a parallel transfer and scattered
// batches of odd sizes (many tensors or KV-cache blocks swapped to a raw device).
BOOST_AUTO_TEST_CASE(parallel_and_batched_transfers_on_a_device_are_byte_exact) {
    for (const unsigned sector : sector_sizes) {
        BOOST_TEST_CONTEXT("sector " << sector) {
            nvmeio_test::loop_device device(device_size, sector, 5);
            if (!make_device(device, sector)) continue;
            file f(device.path(), open_mode::read_write);
            parallel_context parallel({2, {8, block}});
            aligned_buffer whole(static_cast<std::size_t>(f.size()));
            nvmeio_test::fill_pattern(whole.data(), whole.size(), 50);
            BOOST_TEST(transfer(parallel, f, operation::write, whole, 0).bytes == device_size);
            std::vector<unsigned char> expected(whole.size());
            std::memcpy(expected.data(), whole.data(), whole.size());
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
            std::memset(whole.data(), 0, whole.size());
            BOOST_TEST(transfer(parallel, f, operation::read, whole, 0).bytes == device_size);
            BOOST_TEST(std::memcmp(whole.data(), expected.data(), whole.size()) == 0);

            // Scattered requests of odd sizes (batches take aligned starts on O_DIRECT), the last
            // one ending at the device's end.
            aio_context context({8, block});
            std::vector<std::vector<unsigned char>> pieces;
            std::vector<batch_request> requests;
            std::uint64_t at = 4096;
            for (std::size_t i = 0; at < device_size; ++i) {
                const std::size_t length =
                    std::min<std::uint64_t>(device_size - at, 4096 * (i % 7) + 1 + 333 * i);
                pieces.push_back(nvmeio_test::pattern(length, 60 + i));
                requests.push_back({pieces.back(), at});
                std::memcpy(expected.data() + at, pieces.back().data(), length);
                at = align_up(at + length + 65'536 * (i % 3), 4096);
            }
            (void)write_batch(context, f, requests);
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
            for (auto& piece : pieces)
                std::fill(piece.begin(), piece.end(), 0);
            const batch_outcome got = read_batch(context, f, requests);
            for (std::size_t i = 0; i < requests.size(); ++i) {
                BOOST_TEST(got.results[i].bytes == requests[i].memory.size());
                BOOST_TEST(std::memcmp(pieces[i].data(), expected.data() + requests[i].offset,
                                       requests[i].memory.size()) == 0);
            }
        }
    }
}

// The arithmetic of the cut, without a device: request size and most requests in flight.
BOOST_AUTO_TEST_CASE(a_cut_block_keeps_its_bytes_in_flight_within_the_ring_and_the_queue) {
    using detail::plan_requests;
    const std::size_t k = 1024, m = 1024 * 1024;
    const queue_limits loop{512 * k, 128};  // the loop device's
    auto check = [](detail::request_plan got, std::size_t size, unsigned slots) {
        BOOST_TEST(got.request_size == size);
        BOOST_TEST(got.slots == slots);
    };
    check(plan_requests({}, true, 4096, 8 * m, 4, 64), 8 * m, 4);        // a regular file
    check(plan_requests(loop, false, 1, 8 * m, 4, 64), 8 * m, 4);        // buffered
    check(plan_requests(loop, true, 4096, 512 * k, 4, 64), 512 * k, 4);  // whole
    check(plan_requests(loop, true, 4096, 256 * k, 4, 64), 256 * k, 4);
    check(plan_requests({2048, 128}, true, 4096, 8 * m, 4, 64), 8 * m, 4);
    check(plan_requests(loop, true, 4096, 8 * m, 4, 64), 512 * k, 64);  // 16 pieces
    check(plan_requests(loop, true, 4096, 1 * m + 4096, 4, 64), 512 * k, 12);
    check(plan_requests(loop, true, 4096, 8 * m, 4, 32), 512 * k, 32);  // the ring
    check(plan_requests(loop, true, 4096, 64 * m, 4, 64), 512 * k, 64);
    check(plan_requests({512 * k, 16}, true, 4096, 8 * m, 4, 64), 512 * k, 16);  // its queue
    check(plan_requests(loop, true, 4096, 1 * m, 256, 4096), 512 * k, 256);
    check(plan_requests({512 * k, 0}, true, 4096, 8 * m, 4, 64), 512 * k, 64);
    // Registered memory stays whole from whole_registered_pieces pieces at depth 1, deeper from
    // two.
    BOOST_TEST(detail::registered_whole_from(512 * k, 1) ==
               detail::whole_registered_pieces * 512 * k);
    BOOST_TEST(detail::registered_whole_from(512 * k, 2) == 512 * k + 1);
    // A block size near SIZE_MAX: as many pieces as the completion ring holds, no overflow.
    const std::size_t largest = std::numeric_limits<std::size_t>::max() / 4096 * 4096;
    check(plan_requests(loop, true, 4096, largest, 4, 64), 512 * k, 64);
}

// A cursor over one 4 MiB segment of 2 MiB blocks, cut to 512 KiB unless the backend keeps a
// block whole, whose backend keeps every block whole and counts how often it is asked: about
// the segment (segment_asks) and about a block (asks).
struct counting_cursor {
    static constexpr std::size_t k = 1024, m = 1024 * 1024;
    struct counting_backend {
        int asks = 0;
        int segment_asks = 0;
        request_limits limits_for(const file&, std::size_t) const { return {512 * k, 16}; }
        bool segment_stays_whole(const std::byte*, std::size_t, const request_limits&) {
            ++segment_asks;
            return false;
        }
        std::size_t request_length(const request_limits& limits, bool, const std::byte*,
                                   std::size_t length) {
            BOOST_TEST(limits.request_size == 512 * k);  // what limits_for said, passed back
            ++asks;
            return length;
        }
    };

    counting_backend backend;
    nvmeio_test::temp_path path{"cursor-asks"};
    file f{path.str(), open_mode::write};
    std::vector<std::byte> memory = std::vector<std::byte>(4 * m);
    detail::segment s = [this] {
        detail::segment one;
        one.memory = memory.data();
        one.length = memory.size();
        return one;
    }();
    const std::vector<detail::segment_state> state{{4 * m, 4 * m}};
    detail::request_cursor<counting_backend> cursor{backend, f, &s, 1, state, 2 * m};

    counting_cursor() { cursor.cut_to({512 * k, 16}); }
};

// Whether a block stays whole is asked once per block, however often the engine comes back to
// it while whole blocks fill its queue: the question takes the backend's lock, and at a
// segment's first block a PAGEMAP_SCAN.
BOOST_AUTO_TEST_CASE(the_cursor_asks_once_per_block_whether_it_stays_whole) {
    counting_cursor c;
    const std::size_t m = counting_cursor::m;
    for (const int nth : {1, 2}) {
        for (int again = 0; again < 3; ++again) {  // whole blocks hold the queue: not handed out
            BOOST_TEST_REQUIRE(c.cursor.seek_unfinished());
            const auto next = c.cursor.next();
            BOOST_TEST(next.length == 2 * m);  // registered: whole
            BOOST_TEST(next.position == (nth - 1) * 2 * m);
        }
        BOOST_TEST(c.backend.asks == nth);
        c.cursor.advance(2 * m);
    }
    BOOST_TEST(!c.cursor.seek_unfinished());
    BOOST_TEST(c.backend.segment_asks == 1);  // about the segment, once
}

// A new plan makes the block at the next position a new question: its answer was the old plan's.
BOOST_AUTO_TEST_CASE(a_new_plan_asks_the_waiting_block_again) {
    counting_cursor c;
    BOOST_TEST_REQUIRE(c.cursor.seek_unfinished());
    BOOST_TEST(c.cursor.next().length == 2 * counting_cursor::m);
    c.cursor.cut_to({512 * counting_cursor::k, 16});
    BOOST_TEST(c.cursor.next().length == 2 * counting_cursor::m);  // not the plan's 512 KiB
    BOOST_TEST(c.backend.asks == 2);
    BOOST_TEST(c.backend.segment_asks == 2);  // the segment too: its answer was the old plan's
}

// Huge pages are asked of the kernel (PAGEMAP_SCAN, Linux 6.7): a buffer of transparent huge
// pages touched whole is, one of 4 KiB pages is not, nor is one not touched yet.
BOOST_AUTO_TEST_CASE(huge_pages_are_told_from_small_ones) {
    const std::size_t size = std::size_t{16} << 20;
    detail::pagemap pages;
    aligned_buffer small(size, 4096, buffer_options{true, false, false});
    (void)::madvise(small.data(), small.capacity(), MADV_NOHUGEPAGE);
    std::memset(small.data(), 1, size);
    BOOST_TEST(!pages.huge_pages_back(small.data(), size));
    aligned_buffer fresh(size, 4096, buffer_options{false, true, false});
    BOOST_TEST(!pages.huge_pages_back(fresh.data(), size));
    aligned_buffer huge(size, 4096, buffer_options{true, true, false});
    std::memset(huge.data(), 2, size);
    // The witness: /proc/self/smaps's AnonHugePages of the mapping holding the buffer.
    const std::size_t huge_kib = anon_huge_kib(huge.data());
    utsname system{};
    ::uname(&system);
    int major = 0, minor = 0;
    std::sscanf(system.release, "%d.%d", &major, &minor);
    if (huge_kib >= size / 1024 && (major > 6 || (major == 6 && minor >= 7))) {
        BOOST_TEST(pages.huge_pages_back(huge.data(), size));
        const auto* before = reinterpret_cast<const void*>(  // from a page before it
            reinterpret_cast<std::uintptr_t>(huge.data()) - 4096);
        BOOST_TEST(!pages.huge_pages_back(before, size));
    } else {
        nvmeio_test::skip("huge pages not tested: Linux " + std::string(system.release) + ", " +
                          std::to_string(huge_kib) + " KiB of the buffer huge");
    }
    BOOST_TEST(!pages.huge_pages_back(huge.data(), 0));
}

// io_uring first tries every request without blocking (REQ_NOWAIT). On a block device, a request
// the block layer would have to split (longer than queue/max_sectors_kb, or over more pages than
// queue/max_segments or than one bio holds, 256) fails that try with EAGAIN and is issued again
// by one of the thread's io-wq workers ("iou-wrk-<tid>"), its pages pinned a second time. nvmeio
// cuts requests on a block device to the largest power of two it takes whole and keeps as many
// bytes in flight, so no request needs a worker. Memory registered with the ring stays whole
// (nothing is pinned per request), as does memory of huge pages. libaio blocks in io_submit
// while the kernel splits, so its requests stay whole.
BOOST_AUTO_TEST_CASE(io_uring_requests_on_a_device_are_cut_to_what_it_takes_whole) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    const std::uint64_t size = 16u << 20;
    nvmeio_test::loop_device device(size, 4096, 7);
    if (!make_device(device, 4096)) return;
    file f(device.path(), open_mode::read_write);
    BOOST_TEST_REQUIRE(f.is_direct());
    const std::size_t whole = f.queue_limits().unsplit_request_bytes;
    BOOST_TEST_MESSAGE(device.path() << " takes requests of up to " << whole << " bytes whole");
    BOOST_TEST(f.queue_limits().requests == sysfs_queue_limit(device.path(), "nr_requests"));
    BOOST_TEST((whole & (whole - 1)) == 0u);
    BOOST_TEST(whole >= f.required_alignment());
    BOOST_TEST(whole <= 256 * page_size());
    BOOST_TEST(whole <= sysfs_queue_limit(device.path(), "max_sectors_kb") * 1024);
    BOOST_TEST(whole <= sysfs_queue_limit(device.path(), "max_segments") * page_size());
    BOOST_TEST(whole * 2 >
               std::min<std::size_t>(
                   {256 * page_size(), sysfs_queue_limit(device.path(), "max_sectors_kb") * 1024,
                    sysfs_queue_limit(device.path(), "max_segments") * page_size()}));
    const nvmeio_test::temp_path regular_path("not_a_device");
    BOOST_TEST(file(regular_path.str(), open_mode::write).queue_limits().unsplit_request_bytes ==
               0u);

    // Memory nvmeio did not allocate: not pinned once, so cut.
    std::vector<std::byte, aligned_allocator<std::byte>> data(size);
    std::uint64_t seed = 70;
    for (const std::size_t block_size :
         {std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{8} << 20}) {
        for (const operation op : {operation::write, operation::read}) {
            BOOST_TEST_CONTEXT(to_string(op) << " in " << block_size << "-byte blocks") {
                const std::vector<unsigned char> expected = nvmeio_test::pattern(size, seed);
                if (op == operation::write) {
                    std::memcpy(data.data(), expected.data(), size);
                } else {
                    nvmeio_test::spew(device.image(), expected.data(), size);
                    std::memset(data.data(), 0, size);
                }
                transfer_result result;
                int workers = -1;
                // A thread of its own: io-wq workers belong to the thread that submits.
                std::thread([&] {
                    basic_aio_context<io_uring_backend> context({4, block_size});
                    result = transfer(context, f, op, data, 0, {{}, {}, true});
                    workers = io_workers_of(::syscall(SYS_gettid));
                }).join();
                BOOST_TEST(result.bytes == size);
                BOOST_TEST(workers == 0);
                BOOST_TEST(result.perf.requests == size / std::min(block_size, whole));
                if (op == operation::write) {
                    BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
                } else {
                    BOOST_TEST(std::memcmp(data.data(), expected.data(), size) == 0);
                }
                ++seed;
            }
        }
    }
    // Memory of huge pages stays whole (io_uring_backend::segment_stays_whole says why): 1 MiB
    // requests of it need no split here, and no worker.
    aligned_buffer huge(size, 4096, buffer_options{true, true, false});
    const bool is_huge = detail::pagemap().huge_pages_back(huge.data(), size);
    BOOST_TEST_MESSAGE("huge pages: " << (is_huge ? "yes" : "no, cut as 4 KiB pages"));
    transfer_result from_huge;
    int huge_workers = -1;
    std::thread([&] {
        basic_aio_context<io_uring_backend> context({4, std::size_t{1} << 20});
        from_huge = transfer(context, f, operation::read, huge, 0, {{}, {}, true});
        huge_workers = io_workers_of(::syscall(SYS_gettid));
    }).join();
    BOOST_TEST(from_huge.bytes == size);
    BOOST_TEST(huge_workers == 0);
    BOOST_TEST(from_huge.perf.requests == size / (is_huge ? std::size_t{1} << 20 : whole));
    BOOST_TEST(std::memcmp(huge.data(), data.data(), size) == 0);

    // The pieces of a cut block keep its bytes in flight: depth 2 x 8 MiB.
    basic_aio_context<counting_io_uring> counting({2, std::size_t{8} << 20});
    BOOST_TEST(transfer(counting, f, operation::read, data, 0, {}).bytes == size);
    BOOST_TEST(counting.backend().most * whole == std::size_t{2} * (8u << 20));
    // libaio: whole requests.
    aio_context context({4, std::size_t{8} << 20});
    const transfer_result read_whole =
        transfer(context, f, operation::read, data, 0, {{}, {}, true});
    BOOST_TEST(read_whole.perf.requests == 2u);

    // nvmeio's memory: pin once pins it as it moves a second time; from then on every request
    // goes out with a registered buffer, so blocks stay whole, in both directions.
    aligned_buffer pinned(size);
    basic_aio_context<io_uring_backend> registering({4, std::size_t{8} << 20});
    for (int pass = 0; pass < 2; ++pass)
        BOOST_TEST(transfer(registering, f, operation::read, pinned, 0).bytes == size);
    const std::uint64_t fixed = registering.backend().registered_use().fixed_buffer_requests;
    BOOST_TEST(fixed > 0u);
    const std::vector<unsigned char> expected = nvmeio_test::pattern(size, 90);
    std::memcpy(pinned.data(), expected.data(), size);
    const transfer_result wrote =
        transfer(registering, f, operation::write, pinned, 0, {{}, {}, true});
    BOOST_TEST(wrote.bytes == size);
    BOOST_TEST(wrote.perf.requests == 2u);
    BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
    std::memset(pinned.data(), 0, size);
    const transfer_result got =
        transfer(registering, f, operation::read, pinned, 0, {{}, {}, true});
    BOOST_TEST(got.bytes == size);
    BOOST_TEST(got.perf.requests == 2u);
    BOOST_TEST(std::memcmp(pinned.data(), expected.data(), size) == 0);
    BOOST_TEST(registering.backend().registered_use().fixed_buffer_requests == fixed + 4);
}

// Memory pinned once during a transfer stays whole from its next block on. fio's footprint
// (nvmeio-bench --ring): 64 MiB read in one batch through a ring of two 8 MiB blocks at depth 1.
// The ring's first pass is cut, and so is the block whose first piece pins it; the five blocks
// after it go out whole, with the registered buffer.
BOOST_AUTO_TEST_CASE(memory_pinned_during_a_transfer_stays_whole_from_its_next_block) {
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    const std::size_t ring_block = std::size_t{8} << 20;
    nvmeio_test::loop_device device(8 * ring_block, 4096, 11);
    if (!make_device(device, 4096)) return;
    file f(device.path(), open_mode::read);
    BOOST_TEST_REQUIRE(f.is_direct());
    const std::size_t whole = f.queue_limits().unsplit_request_bytes;
    BOOST_TEST_REQUIRE((whole > 0 && ring_block % whole == 0 &&
                        ring_block / whole >= detail::whole_registered_pieces));
    const std::size_t pieces = ring_block / whole;
    const std::vector<unsigned char> expected = nvmeio_test::pattern(8 * ring_block, 92);
    nvmeio_test::spew(device.image(), expected.data(), expected.size());
    aligned_buffer ring = small_pages(2 * ring_block);
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < 8; ++i)
        requests.push_back(
            {nvmeio::memory(ring).slice(i % 2 * ring_block, ring_block), i * ring_block});
    batch_options options;
    options.max_io_size = ring_block;
    options.config.measure = true;
    basic_aio_context<io_uring_backend> context({1, ring_block});
    const batch_outcome read = read_batch(context, f, requests, options);
    BOOST_TEST(read.perf.bytes == 8 * ring_block);
    BOOST_TEST(read.bounced_bytes == 0u);
    BOOST_TEST(read.perf.resubmissions == 0u);
    BOOST_TEST(read.perf.requests == 3 * pieces + 5);
    BOOST_TEST(context.backend().registered_use().fixed_buffer_requests == pieces + 5);
    BOOST_TEST(std::memcmp(ring.data(), expected.data() + 6 * ring_block, 2 * ring_block) == 0);

    // The same read of 8 blocks of `size` bytes through a ring of two registered by hand with
    // the ring of context `on`, with exact bytes.
    const auto through_registered_ring = [&](auto& on, std::size_t size) {
        std::vector<aligned_buffer> mine;
        mine.push_back(small_pages(2 * size));
        on.backend().register_buffers(std::move(mine));
        std::byte* const registered = on.backend().registered_buffer_at(0).data;
        for (std::size_t i = 0; i < requests.size(); ++i)
            requests[i] = {nvmeio::memory(registered + i % 2 * size, size), i * size};
        options.max_io_size = size;
        const batch_outcome o = read_batch(on, f, requests, options);
        BOOST_TEST(o.perf.bytes == 8 * size);
        BOOST_TEST(std::memcmp(registered, expected.data() + 6 * size, 2 * size) == 0);
        return o;
    };
    // Whole blocks hold no more requests than the queue depth, though the cut plan has slots for
    // their pieces: at depth 2 the ring goes whole, two blocks at a time.
    basic_aio_context<counting_io_uring> counting({2, ring_block});
    BOOST_TEST(through_registered_ring(counting, ring_block).perf.requests == 8u);
    BOOST_TEST(counting.backend().most == 2u);

    // At depth 1, a registered block of fewer pieces than whole_registered_pieces is cut: there
    // the hand-off to the kernel's worker costs more than the pieces. At depth 2 it stays whole.
    const std::size_t few = (detail::whole_registered_pieces - 1) * whole;
    basic_aio_context<io_uring_backend> cutting({1, few});
    const batch_outcome cut = through_registered_ring(cutting, few);
    BOOST_TEST(cut.perf.requests == 8 * (detail::whole_registered_pieces - 1));
    BOOST_TEST(cutting.backend().registered_use().fixed_buffer_requests == cut.perf.requests);
    basic_aio_context<io_uring_backend> deeper({2, few});
    BOOST_TEST(through_registered_ring(deeper, few).perf.requests == 8u);
}

// The pieces of cut requests under every recoverable fault at once (partial submits, EAGAIN,
// EINTR, short results, transient completions): the device's bytes stay exact, whatever the
// strategy, and nothing is left in flight.
BOOST_AUTO_TEST_CASE(faults_on_the_pieces_of_cut_requests_keep_the_device_exact) {
    using faulty = nvmeio_test::fault_backend<io_uring_backend>;
    if (!nvmeio_test::backend_usable<io_uring_backend>()) return;
    const std::uint64_t size = 16u << 20;
    nvmeio_test::loop_device device(size, 512, 8);
    if (!make_device(device, 512)) return;
    file f(device.path(), open_mode::read_write);
    BOOST_TEST_REQUIRE(f.queue_limits().unsplit_request_bytes < (std::size_t{8} << 20));
    basic_aio_context<faulty> context({2, std::size_t{8} << 20}, nvmeio_test::fault_plan{});
    aligned_buffer data(size);
    std::uint64_t injected = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        const transfer_config config{
            seed % 2 ? strategy_kind::overlapped : strategy_kind::sequential,
            seed % 4 < 2 ? submit_mode::block : submit_mode::single, true};
        BOOST_TEST_CONTEXT("seed " << seed << " " << describe(config)) {
            nvmeio_test::fault_plan plan;
            plan.kinds = nvmeio_test::recoverable_faults();
            plan.probability = 0.25;
            plan.seed = seed;
            context.backend().rearm(plan);
            const std::vector<unsigned char> expected = nvmeio_test::pattern(size, 80 + seed);
            std::memcpy(data.data(), expected.data(), size);
            const transfer_result wrote = transfer(context, f, operation::write, data, 0, config);
            BOOST_TEST(wrote.bytes == size);
            BOOST_TEST(wrote.perf.requests >= size / f.queue_limits().unsplit_request_bytes);
            BOOST_TEST((nvmeio_test::slurp(device.image()) == expected));
            injected += context.backend().injected();
            context.backend().rearm(plan);
            std::memset(data.data(), 0, size);
            BOOST_TEST(transfer(context, f, operation::read, data, 0, config).bytes == size);
            BOOST_TEST(std::memcmp(data.data(), expected.data(), size) == 0);
            BOOST_TEST(context.backend().unreaped() == 0u);
            injected += context.backend().injected();
        }
    }
    BOOST_TEST_MESSAGE(injected << " faults struck the pieces");
    BOOST_TEST(injected > 0u);
}

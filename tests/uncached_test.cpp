// Uncached buffered I/O (direct_io::uncached, RWF_DONTCACHE): any buffer, offset and length,
// exact bytes through every front end and backend, and nothing left in the page cache, told by
// mincore() on a mapping of the file. Where the kernel has no such mode (before Linux 6.14) the
// open is a precise error, and that is what is checked instead.
#define BOOST_TEST_MODULE uncached
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nvmeio/async.hpp>
#include <nvmeio/batch.hpp>
#include <nvmeio/file.hpp>
#include <nvmeio/parallel.hpp>
#include <nvmeio/strategy.hpp>
#include <string>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio_test::contains;
using nvmeio_test::temp_path;

namespace {

// Pages of the file's first `length` bytes that are in the page cache.
std::size_t cached_pages(const std::string& path, std::size_t length) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BOOST_TEST_REQUIRE(fd >= 0);
    void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    BOOST_TEST_REQUIRE(map != MAP_FAILED);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> resident((length + page - 1) / page);
    BOOST_TEST_REQUIRE(::mincore(map, length, resident.data()) == 0);
    ::munmap(map, length);
    std::size_t count = 0;
    for (unsigned char r : resident)
        count += r & 1u;
    return count;
}

// Writes the file's dirty pages out and drops its clean ones, so that a read starts cold.
void evict(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BOOST_TEST_REQUIRE(fd >= 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// The open the kernel refuses where it has no uncached mode, or an open file.
bool kernel_has_uncached(const std::string& path) {
    std::error_code ec;
    file probe = file::open(path, open_mode::read_write, direct_io::uncached, ec);
    if (!ec) return true;
    BOOST_TEST(ec == std::error_code(EOPNOTSUPP, std::generic_category()), ec.message());
    try {
        file f(path, open_mode::read_write, direct_io::uncached);
    } catch (const io_error& e) {
        BOOST_TEST(contains(e.what(), "RWF_DONTCACHE"), e.what());
        BOOST_TEST(contains(e.what(), path), e.what());
    }
    nvmeio_test::skip(
        "uncached transfers not tested: this kernel has no uncached buffered I/O "
        "(the open was checked to be refused precisely)");
    return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(uncached_moves_any_range_exactly_and_leaves_no_page_cached) {
    temp_path path("uncached");
    if (!kernel_has_uncached(path.str())) return;
    const std::size_t size = 5 * (std::size_t{1} << 20) + 4099;  // odd length, odd offset
    const std::uint64_t offset = 1001;
    std::vector<unsigned char> source(size + 1), target(size + 1);  // +1: unaligned start
    nvmeio_test::fill_pattern(source.data() + 1, size, 17);
    nvmeio_test::for_each_backend([&](auto tag) {
        using backend = typename decltype(tag)::type;
        if (!nvmeio_test::backend_usable<backend>()) return;
        BOOST_TEST_CONTEXT(backend::name) {
            basic_aio_context<backend> context({8, 65536});
            {
                file out(path.str(), open_mode::write, direct_io::uncached);
                BOOST_TEST(out.is_uncached());
                BOOST_TEST(!out.is_direct());
                BOOST_TEST(out.required_alignment() == 1u);
                write(context, out, nvmeio::memory(source).slice(1, size), offset);
                out.sync();
            }
            const std::size_t pages = cached_pages(path.str(), offset + size);
            BOOST_TEST(pages <= 2u, pages << " pages left in the page cache after the write");
            evict(path.str());
            file in(path.str(), open_mode::read, direct_io::uncached);
            std::memset(target.data(), 0, target.size());
            BOOST_TEST(read(context, in, nvmeio::memory(target).slice(1, size), offset).bytes ==
                       size);
            BOOST_TEST(std::memcmp(target.data() + 1, source.data() + 1, size) == 0);
            // One request at a time leaves nothing cached. Several in flight through one
            // descriptor (here 8, which io_uring may run in its workers) share its readahead
            // and can leave read-ahead pages behind (docs/perf/uncached.md).
            evict(path.str());
            basic_aio_context<backend> one_at_a_time({1, 65536});
            BOOST_TEST(
                read(one_at_a_time, in, nvmeio::memory(target).slice(1, size), offset).bytes ==
                size);
            BOOST_TEST(cached_pages(path.str(), offset + size) <= 2u);
            BOOST_TEST(nvmeio_test::file_size(path.str()) == offset + size);
            // file::read_at and write_at take the same path.
            std::vector<unsigned char> tail(5000);
            BOOST_TEST(in.read_at(tail, offset + size - 5000) == 5000u);
            BOOST_TEST(std::memcmp(tail.data(), source.data() + 1 + size - 5000, 5000) == 0);
        }
    });
}

BOOST_AUTO_TEST_CASE(the_same_run_buffered_leaves_the_file_cached) {
    // The measurement above can see a cached file: buffered I/O leaves every page behind.
    temp_path path("buffered_cached");
    const std::size_t size = std::size_t{4} << 20;
    std::vector<unsigned char> source(size);
    nvmeio_test::fill_pattern(source.data(), size, 18);
    aio_context context({8, 65536});
    {
        file out(path.str(), open_mode::write, direct_io::off);
        BOOST_TEST(!out.is_uncached());
        write(context, out, source, 0);
        out.sync();
    }
    evict(path.str());
    file in(path.str(), open_mode::read, direct_io::off);
    BOOST_TEST(read(context, in, source, 0).bytes == size);
    BOOST_TEST(cached_pages(path.str(), size) == size / 4096);
}

BOOST_AUTO_TEST_CASE(uncached_through_parallel_async_and_batch_front_ends) {
    temp_path path("uncached_fronts");
    if (!kernel_has_uncached(path.str())) return;
    const std::size_t size = 3 * (std::size_t{1} << 20) + 7;
    std::vector<unsigned char> source(size), target(size);
    nvmeio_test::fill_pattern(source.data(), size, 19);
    {
        parallel_context parallel({3, {4, 65536}});
        file out(path.str(), open_mode::write, direct_io::uncached);
        write(parallel, out, source, 0);
        out.sync();
    }
    BOOST_TEST(cached_pages(path.str(), size) <= 2u);
    evict(path.str());
    file in(path.str(), open_mode::read, direct_io::uncached);
    async_context async({2, {4, 65536}});
    transfer_handle h = async_read(async, in, nvmeio::memory(target).first(size / 2), 0);
    const std::vector<batch_request> rest = {
        {nvmeio::memory(target).slice(size / 2, size - size / 2 - 3), size / 2},
        {nvmeio::memory(target).slice(size - 3, 3), size - 3}};
    // One after the other: concurrent readers of neighbouring ranges meet in each other's
    // readahead, and the kernel keeps the pages they share.
    BOOST_TEST(h.wait().bytes == size / 2);
    aio_context context({4, 65536});
    const batch_outcome got = read_batch(context, in, rest);
    BOOST_TEST(got.first_failure() == rest.size());
    BOOST_TEST(std::memcmp(target.data(), source.data(), size) == 0);
    BOOST_TEST(cached_pages(path.str(), size) <= 2u);
}

BOOST_AUTO_TEST_CASE(uncached_where_the_filesystem_has_none_is_a_precise_error) {
    // tmpfs has no RWF_DONTCACHE: uncached is refused naming the file and the mode, and
    // automatic takes what tmpfs has (O_DIRECT since Linux 6.6, else buffered), never uncached.
    temp_path path("tmpfs_uncached", "/dev/shm");
    try {
        file f(path.str(), open_mode::write, direct_io::uncached);
        BOOST_ERROR("tmpfs accepted uncached I/O");
    } catch (const io_error& e) {
        BOOST_TEST(e.code() == std::error_code(EOPNOTSUPP, std::generic_category()), e.what());
        BOOST_TEST(e.path() == path.str());
        BOOST_TEST(contains(e.what(), "uncached"), e.what());
    }
    file f(path.str(), open_mode::write, direct_io::automatic);
    BOOST_TEST(!f.is_uncached());
    BOOST_TEST(f.is_direct() == nvmeio_test::accepts_o_direct("/dev/shm"));
}

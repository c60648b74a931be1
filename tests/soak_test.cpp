#define BOOST_TEST_MODULE soak
#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

// Randomized differential soak: many transfers with random size (0 to 8 MiB, odd sizes
// included), offset (past 4 GiB too), strategy, submit mode, queue depth, block size, direct or
// buffered, some through a backend that injects recoverable faults; each is checked byte for
// byte against plain pread on a second, buffered descriptor of the same file.
//
// NVMEIO_SOAK_TRANSFERS  how many transfers (default 300)
// NVMEIO_SOAK_SEED       the seed (default: random); printed at the start and on failure

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nvmeio/strategy.hpp>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "fault_backend.hpp"
#include "leak_check.hpp"
#include "test_support.hpp"

using namespace nvmeio;

namespace {

using faulty_context = basic_aio_context<nvmeio_test::fault_backend<libaio_backend>>;

constexpr std::size_t max_size = std::size_t{8} << 20;
constexpr std::uint64_t near_region = 32u << 20;                       // most offsets fall here
constexpr std::uint64_t far_region = (std::uint64_t{4} << 30) + 8192;  // past 32-bit offsets

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') return fallback;
    return std::strtoull(text, nullptr, 0);
}

// One transfer's parameters, drawn from its own generator so a seed replays them exactly.
struct plan {
    std::size_t index = 0;
    operation op = operation::read;
    bool direct = true;
    bool faulty = false;
    transfer_config config;
    unsigned queue_depth = 1;
    std::size_t block_size = 4096;
    std::size_t size = 0;
    std::uint64_t offset = 0;
    std::size_t misalign = 0;  // buffer address offset from the allocation (buffered only)
    bool refresh = false;      // a read first overwrites its range with fresh bytes via pwrite
    // When set, the offset is this far before the file's current end (reads cross the end,
    // writes grow the file); resolved when the transfer runs, so replays still agree.
    bool near_end = false;
    std::uint64_t before_end = 0;
    std::uint64_t data_seed = 0;

    std::string str() const {
        std::ostringstream out;
        out << "transfer " << index << ": " << to_string(op) << " size=" << size
            << " offset=" << offset << (direct ? " direct" : " buffered") << " "
            << to_string(config.strategy) << "/" << to_string(config.submit)
            << " queue_depth=" << queue_depth << " block_size=" << block_size
            << " misalign=" << misalign << (faulty ? " with faults" : "")
            << (refresh ? " refreshed" : "") << (near_end ? " near the end" : "");
        return out.str();
    }
};

plan draw(std::mt19937_64& random, std::size_t index) {
    auto below = [&](std::uint64_t n) { return n == 0 ? 0 : random() % n; };
    plan p;
    p.index = index;
    p.op = below(2) ? operation::write : operation::read;
    p.direct = below(4) != 0;
    p.faulty = below(5) == 0;
    p.config.strategy = below(2) ? strategy_kind::overlapped : strategy_kind::sequential;
    p.config.submit = below(2) ? submit_mode::block : submit_mode::single;
    static const unsigned depths[] = {1, 2, 3, 4, 8, 16, 32, 64};
    p.queue_depth = depths[below(8)];
    static const std::size_t direct_blocks[] = {4096,       8192,       12288,   65536,
                                                128u << 10, 256u << 10, 1u << 20};
    static const std::size_t buffered_blocks[] = {1000, 4097, 12345, 65536, 1u << 20};
    p.block_size = p.direct ? direct_blocks[below(7)] : buffered_blocks[below(5)];
    switch (below(10)) {
        case 0:
        case 1:  // tiny
            p.size = below(8192);
            break;
        case 2:
        case 3:
        case 4:  // next to an alignment or block boundary
            p.size = (1 + below(16)) * (below(2) ? 4096 : p.block_size);
            p.size = std::min<std::size_t>(p.size + below(3) - 1, max_size);
            break;
        case 5:
        case 6:  // up to 1 MiB
            p.size = below((1u << 20) + 1);
            break;
        default:  // anything up to 8 MiB
            p.size = below(max_size + 1);
    }
    const std::uint64_t base = below(10) == 0 ? far_region : 0;
    p.offset = base + below(near_region);
    if (p.direct) {
        p.offset -= p.offset % 4096;
    } else {
        p.misalign = below(64);
    }
    p.refresh = p.op == operation::read && below(2) == 0;
    p.near_end = below(4) == 0;
    p.before_end = below(2u << 20);
    p.data_seed = random();
    return p;
}

// Plain POSIX reads and writes on a buffered descriptor: the reference nvmeio is compared with.
class reference {
  public:
    explicit reference(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {}
    ~reference() {
        if (fd_ >= 0) ::close(fd_);
    }
    reference(const reference&) = delete;
    reference& operator=(const reference&) = delete;

    bool ok() const { return fd_ >= 0; }

    // Up to `n` bytes at `offset`, fewer at end of file.
    std::vector<unsigned char> pread_all(std::uint64_t offset, std::size_t n) const {
        std::vector<unsigned char> out(n);
        std::size_t done = 0;
        while (done < n) {
            const ssize_t got =
                ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
            if (got <= 0) break;
            done += static_cast<std::size_t>(got);
        }
        out.resize(done);
        return out;
    }

    bool pwrite_all(const void* data, std::size_t n, std::uint64_t offset) const {
        const auto* p = static_cast<const unsigned char*>(data);
        std::size_t done = 0;
        while (done < n) {
            const ssize_t put =
                ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
            if (put <= 0) return false;
            done += static_cast<std::size_t>(put);
        }
        return true;
    }

    std::uint64_t size() const {
        struct stat st {};
        return ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    }

  private:
    int fd_;
};

// Contexts are reused: creating and destroying one costs an RCU grace period in io_destroy.
class context_pool {
  public:
    template <class Context, class... Args>
    static Context& get(std::map<std::pair<unsigned, std::size_t>, std::unique_ptr<Context>>& pool,
                        unsigned depth, std::size_t block_size, Args&&... args) {
        auto& slot = pool[{depth, block_size}];
        if (!slot) {
            slot = std::make_unique<Context>(context_options{depth, block_size},
                                             std::forward<Args>(args)...);
        }
        return *slot;
    }

    aio_context& plain(const plan& p) { return get(plain_, p.queue_depth, p.block_size); }

    faulty_context& faulty(const plan& p) {
        faulty_context& context =
            get(faulty_, p.queue_depth, p.block_size, nvmeio_test::fault_plan{});
        nvmeio_test::fault_plan faults;
        faults.kinds = nvmeio_test::recoverable_faults();
        faults.probability = 0.15;
        faults.seed = p.data_seed;
        context.backend().rearm(faults);
        return context;
    }

  private:
    std::map<std::pair<unsigned, std::size_t>, std::unique_ptr<aio_context>> plain_;
    std::map<std::pair<unsigned, std::size_t>, std::unique_ptr<faulty_context>> faulty_;
};

// Runs one transfer and checks it; returns false (after reporting) on any difference.
bool run_one(const plan& p, file& f, const reference& ref, context_pool& contexts) {
    const std::size_t slack = 8192;
    aligned_buffer storage(p.misalign + p.size + slack);
    std::byte* const buffer = storage.data() + p.misalign;
    auto transfer_it = [&] {
        return nvmeio_test::within(std::chrono::seconds(120), p.str(), [&] {
            if (p.faulty) {
                return transfer(contexts.faulty(p), f, p.op,
                                nvmeio::memory(storage).slice(p.misalign, p.size), p.offset,
                                p.config);
            }
            return transfer(contexts.plain(p), f, p.op,
                            nvmeio::memory(storage).slice(p.misalign, p.size), p.offset, p.config);
        });
    };

    if (p.op == operation::read) {
        if (p.refresh) {
            const std::vector<unsigned char> fresh = nvmeio_test::pattern(p.size, p.data_seed);
            if (!ref.pwrite_all(fresh.data(), fresh.size(), p.offset)) {
                BOOST_ERROR("the reference pwrite failed");
                return false;
            }
        }
        const std::vector<unsigned char> expected = ref.pread_all(p.offset, p.size);
        std::memset(storage.data(), 0xAB, storage.capacity());
        const transfer_result result = transfer_it();
        bool ok = true;
        if (result.bytes != expected.size()) {
            BOOST_ERROR("read " << result.bytes << " bytes, pread " << expected.size());
            ok = false;
        } else if (!expected.empty() && std::memcmp(buffer, expected.data(), expected.size())) {
            BOOST_ERROR("the bytes read differ from pread's");
            ok = false;
        }
        for (std::size_t i = p.size; i < p.size + slack && ok; ++i) {
            if (buffer[i] != std::byte{0xAB}) {
                BOOST_ERROR("byte " << i << " past the requested length was overwritten");
                ok = false;
            }
        }
        for (std::size_t i = 0; i < p.misalign && ok; ++i) {
            if (storage.data()[i] != std::byte{0xAB}) {
                BOOST_ERROR("a byte before the buffer was overwritten");
                ok = false;
            }
        }
        return ok;
    }

    nvmeio_test::fill_pattern(buffer, p.size, p.data_seed);
    const std::uint64_t old_size = ref.size();
    const std::uint64_t before_start = p.offset >= 4096 ? p.offset - 4096 : 0;
    const std::vector<unsigned char> before =
        ref.pread_all(before_start, static_cast<std::size_t>(p.offset - before_start));
    const std::vector<unsigned char> after = ref.pread_all(p.offset + p.size, 4096);
    const transfer_result result = transfer_it();
    bool ok = true;
    if (result.bytes != p.size) {
        BOOST_ERROR("wrote " << result.bytes << " bytes of " << p.size);
        ok = false;
    }
    const std::vector<unsigned char> now = ref.pread_all(p.offset, p.size);
    if (now.size() != p.size || (p.size != 0 && std::memcmp(now.data(), buffer, p.size) != 0)) {
        BOOST_ERROR("pread does not see the bytes written");
        ok = false;
    }
    const std::uint64_t expected_size =
        p.size == 0 ? old_size : std::max(old_size, p.offset + p.size);
    if (ref.size() != expected_size) {
        BOOST_ERROR("the file is " << ref.size() << " bytes long, not " << expected_size);
        ok = false;
    }
    if (ref.pread_all(before_start, before.size()) != before ||
        ref.pread_all(p.offset + p.size, 4096) != after) {
        BOOST_ERROR("bytes next to the written range changed");
        ok = false;
    }
    return ok;
}

}  // namespace

BOOST_AUTO_TEST_CASE(random_transfers_match_pread_and_pwrite_byte_for_byte) {
    const std::uint64_t seed = env_number("NVMEIO_SOAK_SEED", std::random_device{}());
    const std::size_t transfers =
        static_cast<std::size_t>(env_number("NVMEIO_SOAK_TRANSFERS", 300));
    const std::string replay = "NVMEIO_SOAK_SEED=" + std::to_string(seed) +
                               " NVMEIO_SOAK_TRANSFERS=" + std::to_string(transfers);
    std::cout << "soak: " << transfers << " transfers, seed " << seed << " (replay with " << replay
              << ")" << std::endl;

    nvmeio_test::temp_path path("soak");
    {
        // Start from 16 MiB of known bytes so reads in the near region mostly find data.
        const std::vector<unsigned char> initial = nvmeio_test::pattern(16u << 20, seed);
        nvmeio_test::spew(path.str(), initial.data(), initial.size());
    }
    const reference ref(path.str());
    BOOST_TEST_REQUIRE(ref.ok());
    const nvmeio_test::held_resources held;
    file direct(path.str(), open_mode::read_write, direct_io::on);
    BOOST_TEST_REQUIRE(direct.is_direct());
    file buffered(path.str(), open_mode::read_write, direct_io::off);
    std::uint64_t bytes = 0;
    std::size_t failed_at = transfers;
    {
        context_pool contexts;
        std::mt19937_64 random(seed);
        for (std::size_t i = 0; i < transfers; ++i) {
            plan p = draw(random, i);
            if (p.near_end) {
                const std::uint64_t end = ref.size();
                p.offset = end > p.before_end ? end - p.before_end : 0;
                if (p.direct) p.offset -= p.offset % 4096;
            }
            bool ok = false;
            BOOST_TEST_CONTEXT(p.str() << " (seed " << seed << ")") {
                try {
                    ok = run_one(p, p.direct ? direct : buffered, ref, contexts);
                } catch (const std::exception& e) {
                    BOOST_ERROR("threw: " << e.what());
                }
            }
            bytes += p.size;
            if (!ok) {
                failed_at = i;
                break;  // later transfers would only repeat the noise
            }
        }
    }
    if (failed_at < transfers) {
        std::cout << "soak: FAILED at transfer " << failed_at
                  << "; replay with NVMEIO_SOAK_SEED=" << seed
                  << " NVMEIO_SOAK_TRANSFERS=" << failed_at + 1 << std::endl;
    } else {
        std::cout << "soak: " << transfers << " transfers, " << (bytes >> 20)
                  << " MiB, all byte-exact" << std::endl;
    }
    direct.close();
    buffered.close();
    BOOST_TEST(nvmeio_test::held_resources{} == held);
}

#define BOOST_TEST_MODULE populate
#include <sys/mman.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <nvmeio/batch.hpp>
#include <nvmeio/detail/populate.hpp>
#include <thread>
#include <vector>

#include "backend_support.hpp"
#include "test_support.hpp"

using namespace nvmeio;
using nvmeio::detail::page_runs;
using nvmeio::detail::populate_count;
using nvmeio_test::backend_types;
using nvmeio_test::temp_path;

namespace {

const std::size_t page = page_size();

// Anonymous memory mapped for a test and never touched by it before (as torch.empty's is).
class fresh_mapping {
  public:
    explicit fresh_mapping(std::size_t bytes) : bytes_(bytes) {
        void* p =
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        BOOST_TEST_REQUIRE((p != MAP_FAILED));
        data_ = static_cast<unsigned char*>(p);
    }
    fresh_mapping(const fresh_mapping&) = delete;
    fresh_mapping& operator=(const fresh_mapping&) = delete;
    ~fresh_mapping() { ::munmap(data_, bytes_); }
    [[nodiscard]] unsigned char* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

    // Pages of [from, from + length) the kernel has mapped.
    [[nodiscard]] std::size_t resident(std::size_t from, std::size_t length) const {
        std::vector<unsigned char> in(length / page);
        BOOST_TEST_REQUIRE(::mincore(data_ + from, length, in.data()) == 0);
        std::size_t n = 0;
        for (unsigned char c : in)
            n += c & 1;
        return n;
    }

  private:
    std::size_t bytes_;
    unsigned char* data_;
};

// Stand-ins for the kernel's answer to MADV_POPULATE_WRITE, counting the calls.
std::atomic<unsigned> refusals{0};
int refuse_unknown_advice(void*, std::size_t, int) {
    ++refusals;
    errno = EINVAL;  // a kernel before 5.14, or a mapping it does not populate
    return -1;
}
int refuse_for_memory(void*, std::size_t, int) {
    ++refusals;
    errno = ENOMEM;
    return -1;
}
// A kernel that knows the advice but will not populate one mapping (device memory, say).
std::atomic<std::byte*> unpopulated_begin{nullptr};
std::atomic<std::byte*> unpopulated_end{nullptr};
int refuse_one_mapping(void* address, std::size_t length, int advice) {
    auto* at = static_cast<std::byte*>(address);
    if (at >= unpopulated_begin.load() && at < unpopulated_end.load()) {
        ++refusals;
        errno = EINVAL;
        return -1;
    }
    return ::madvise(address, length, advice);
}

// While alive, the populate step gets `advise`'s answer instead of the kernel's.
struct advice_stand_in {
    explicit advice_stand_in(detail::advise_function advise) {
        refusals = 0;
        detail::populate_advise.store(advise);
    }
    advice_stand_in(const advice_stand_in&) = delete;
    advice_stand_in& operator=(const advice_stand_in&) = delete;
    ~advice_stand_in() { detail::populate_advise.store(&::madvise); }
};

std::vector<page_runs::run> runs_of(page_runs& r) {
    return r.runs();
}

populate_count populate(const std::vector<page_runs::run>& runs, detail::advise_function advise) {
    const std::atomic<bool> stop{false};
    return detail::populate_pages(runs, page, 2 * page, stop, advise);
}

}  // namespace

BOOST_AUTO_TEST_CASE(page_runs_hold_only_whole_pages_inside_and_join_adjacent_ranges) {
    alignas(4096) static std::byte memory[16 * 4096];
    if (page != 4096) return;  // the layout below is in 4 KiB pages
    page_runs r(page);
    r.add(memory + 64, page);                  // inside two pages: no whole one
    r.add(memory + 2 * page + 64, page - 64);  // continues the range before (never adjacent): none
    r.add(memory + 4 * page + 64, 2 * page);   // one whole page, [5, 6)
    r.add(memory + 6 * page + 64, 2 * page);   // continues it: [5, 8) whole
    r.add(memory + 10 * page, 0);              // empty: nothing
    r.add(memory + 10 * page, page);           // exactly one page
    const std::vector<page_runs::run> runs = runs_of(r);
    BOOST_TEST_REQUIRE(runs.size() == 2u);
    BOOST_TEST((runs[0].first == memory + 5 * page));
    BOOST_TEST(runs[0].pages == 3u);
    BOOST_TEST((runs[1].first == memory + 10 * page));
    BOOST_TEST(runs[1].pages == 1u);
}

BOOST_AUTO_TEST_CASE(advice_populates_fresh_pages_without_changing_a_byte) {
    const std::size_t pages = 64;
    fresh_mapping m(pages * page);
    BOOST_TEST(m.resident(0, m.size()) == 0u);
    page_runs r(page);
    r.add(reinterpret_cast<std::byte*>(m.data()), m.size());
    const populate_count count = populate(runs_of(r), &::madvise);
    if (count.advised == 0) return;  // a kernel before 5.14: the fallback's test covers it
    BOOST_TEST(count.advised == pages);
    BOOST_TEST(m.resident(0, m.size()) == pages);
    BOOST_TEST(std::count(m.data(), m.data() + m.size(), 0) ==
               static_cast<std::ptrdiff_t>(m.size()));
    // Mapped now: a second step finds every page so and asks nothing of the kernel.
    const populate_count again = populate(runs_of(r), &refuse_for_memory);
    BOOST_TEST(again.resident == pages);
    BOOST_TEST(again.advised + again.touched == 0u);
}

// The kernel refuses the advice: every page is touched instead, fresh ones become resident, and
// every byte keeps its value, even where a copy writes the same pages at the same time.
BOOST_AUTO_TEST_CASE(refused_advice_touches_every_page_keeping_every_byte) {
    const std::size_t pages = 256;
    fresh_mapping m(pages * page);
    page_runs r(page);
    r.add(reinterpret_cast<std::byte*>(m.data()), m.size());
    const std::vector<page_runs::run> runs = runs_of(r);
    refusals = 0;
    populate_count count = populate(runs, &refuse_unknown_advice);
    // Refused for the memory, then for a fresh page (asking whether the kernel knows the
    // advice at all); then the rest is touched without asking again.
    BOOST_TEST(refusals == 2u);
    BOOST_TEST(count.advised == 0u);
    BOOST_TEST(count.touched == pages);
    BOOST_TEST(m.resident(0, m.size()) == pages);
    BOOST_TEST(std::count(m.data(), m.data() + m.size(), 0) ==
               static_cast<std::ptrdiff_t>(m.size()));

    // A page a copy has filled keeps its bytes when touched; so does one a copy races with
    // (each round hands the pages back to the kernel first, so that the step touches them).
    const std::vector<unsigned char> bytes = nvmeio_test::pattern(m.size(), 57);
    std::memcpy(m.data(), bytes.data(), bytes.size());
    for (std::size_t k = 0; k < pages; ++k)
        detail::touch_page(reinterpret_cast<std::byte*>(m.data() + k * page));
    BOOST_TEST(std::memcmp(m.data(), bytes.data(), bytes.size()) == 0);
    for (int round = 0; round < 8; ++round) {
        BOOST_TEST_REQUIRE(::madvise(m.data(), m.size(), MADV_DONTNEED) == 0);
        std::thread copy([&] { std::memcpy(m.data(), bytes.data(), bytes.size()); });
        count = populate(runs, &refuse_unknown_advice);
        copy.join();
        BOOST_TEST(count.touched + count.resident == pages);
        BOOST_TEST(std::memcmp(m.data(), bytes.data(), bytes.size()) == 0, "round " << round);
    }
}

BOOST_AUTO_TEST_CASE(a_mapping_the_kernel_will_not_populate_is_not_touched) {
    // EINVAL for this memory alone, from a kernel that populates a fresh page: the memory is
    // left to the copies (a device's or a read-only mapping would fault on a touch).
    fresh_mapping m(32 * page);
    page_runs r(page);
    r.add(reinterpret_cast<std::byte*>(m.data()), m.size());
    unpopulated_begin = reinterpret_cast<std::byte*>(m.data());
    unpopulated_end = reinterpret_cast<std::byte*>(m.data() + m.size());
    refusals = 0;
    const populate_count count = populate(runs_of(r), &refuse_one_mapping);
    BOOST_TEST(refusals == 1u);
    BOOST_TEST(count.advised + count.touched == 0u);
    BOOST_TEST(m.resident(0, m.size()) == 0u);
}

BOOST_AUTO_TEST_CASE(other_refusals_end_the_step_without_touching) {
    fresh_mapping m(32 * page);
    page_runs r(page);
    r.add(reinterpret_cast<std::byte*>(m.data()), m.size());
    refusals = 0;
    const populate_count count = populate(runs_of(r), &refuse_for_memory);
    BOOST_TEST(refusals == 1u);
    BOOST_TEST(count.advised + count.touched == 0u);
    BOOST_TEST(m.resident(0, m.size()) == 0u);
}

namespace {

// Destinations at odd addresses (no O_DIRECT takes them, as none takes a torch tensor's) in fresh
// memory, each with guard bytes on both sides that share its first and last pages; read as one
// batch of scattered blocks (every other block of the file). Every destination gets the file's
// bytes, every guard byte keeps its value, and the read really went through the staging slots.
template <class Backend>
void bounced_read_lands_exactly_and_keeps_the_guards() {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    const std::size_t count = 96;
    const std::size_t guard = 64;
    temp_path path("populate");
    // Ragged lengths, so that the guards fall at every place in a page, page starts among them;
    // each request at the next 4 KiB slot but one (every other block of a KV file).
    std::vector<std::size_t> lengths;
    std::vector<std::uint64_t> offsets;
    std::size_t file_size = 0;
    std::size_t wanted = 0;
    for (std::size_t i = 0; i < count; ++i) {
        lengths.push_back((1 + i % 5) * 4096 * (i % 3 == 0 ? 4 : 1) + (i * 1237) % 4096);
        offsets.push_back(file_size);
        file_size += 2 * ((lengths.back() + 4095) / 4096 * 4096);
        wanted += lengths.back();
    }
    nvmeio_test::spew_pattern(path.str(), file_size, 5);
    const std::vector<unsigned char> file_bytes = nvmeio_test::slurp(path.str());

    // Destination i at `at[i]`: `guard` bytes after the one before it ends, so that guards and
    // destinations share pages.
    fresh_mapping m(wanted + 2 * count * guard + 4 * page);
    std::vector<std::size_t> at;
    std::size_t cursor = 1;
    for (std::size_t i = 0; i < count; ++i) {
        at.push_back(cursor + guard);
        cursor = at.back() + lengths[i];
    }
    const unsigned char guard_byte = 0xA5;
    std::memset(m.data(), guard_byte, m.size());  // touched; then the destinations made fresh
    for (std::size_t i = 0; i < count; ++i) {
        // Whole pages inside a destination go back to the kernel: fresh again (zeros).
        const std::size_t first = (at[i] + page - 1) / page * page;
        const std::size_t last = (at[i] + lengths[i]) / page * page;
        if (last > first)
            BOOST_TEST_REQUIRE(::madvise(m.data() + first, last - first, MADV_DONTNEED) == 0);
    }
    std::vector<batch_request> requests;
    for (std::size_t i = 0; i < count; ++i)
        requests.push_back({nvmeio::memory(m.data() + at[i], lengths[i]), offsets[i]});
    basic_aio_context<Backend> context({8, 64 * 1024});
    file in(path.str(), open_mode::read);
    const batch_outcome got = read_batch(context, in, requests);
    BOOST_TEST(got.bounced_bytes == wanted);
    std::size_t last_end = 0;
    for (std::size_t i = 0; i < count; ++i) {
        BOOST_TEST(got.results[i].bytes == lengths[i]);
        BOOST_TEST(std::memcmp(m.data() + at[i], file_bytes.data() + offsets[i], lengths[i]) == 0,
                   "destination " << i);
        BOOST_TEST(std::count(m.data() + last_end, m.data() + at[i], guard_byte) ==
                       static_cast<std::ptrdiff_t>(at[i] - last_end),
                   "guard before destination " << i);
        last_end = at[i] + lengths[i];
    }
    BOOST_TEST(std::count(m.data() + last_end, m.data() + m.size(), guard_byte) ==
                   static_cast<std::ptrdiff_t>(m.size() - last_end),
               "guard after the last destination");
}

}  // namespace

BOOST_AUTO_TEST_CASE_TEMPLATE(bounced_read_into_fresh_memory_keeps_guard_bytes, Backend,
                              backend_types) {
    bounced_read_lands_exactly_and_keeps_the_guards<Backend>();
}

// The step races with the copies: where they fault a page in first, it finds the page mapped and
// asks nothing. Each try checks every byte; the refusal must be seen within a few.
BOOST_AUTO_TEST_CASE_TEMPLATE(bounced_read_with_advice_refused_touches_and_keeps_guard_bytes,
                              Backend, backend_types) {
    if (!nvmeio_test::backend_usable<Backend>()) return;
    const advice_stand_in refused(&refuse_unknown_advice);
    for (int attempt = 0; attempt < 10 && refusals == 0; ++attempt)
        bounced_read_lands_exactly_and_keeps_the_guards<Backend>();
    BOOST_TEST(refusals >= 1u);
}

#define BOOST_TEST_MODULE wave_plan
#include <boost/test/unit_test.hpp>

// The batch's wave planner on its own (detail/batch_engine.hpp): which bytes of which groups go
// straight or staged, which staged segments are padded to whole units, in which wave, and which
// part of which request each segment carries. No file is opened and no byte moves: the planner
// only reads addresses and sizes.

#include <cstddef>
#include <nvmeio/batch.hpp>
#include <vector>

using namespace nvmeio;
using nvmeio::detail::batch_group;
using nvmeio::detail::batch_wave;
using nvmeio::detail::wave_planner;
using nvmeio::detail::wave_rules;

namespace {

constexpr std::size_t unit = 512;
constexpr std::size_t block = 64 * 1024;

// An O_DIRECT regular file's rules: 512-byte units, padded segments unbounded (a read's).
wave_rules direct_rules() {
    wave_rules r;
    r.unit = unit;
    r.memory_unit = unit;
    r.padding_unit = unit;
    r.block_size = block;
    return r;
}

// Requests at every other `length`-sized slot of the file, each its own group (as plan_batch
// makes them), their memory `skew` bytes past the 4 KiB-aligned slots of a slab.
struct scattered {
    scattered(std::size_t count, std::size_t length, std::size_t skew)
        : slab(count * stride(length, skew)) {
        for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t offset = 2 * i * length;
            requests.push_back(
                {memory(slab).slice(i * stride(length, skew) + skew, length), offset});
            groups.push_back({{i}, offset, length, true});
            which.push_back(i);
        }
    }
    static std::size_t stride(std::size_t length, std::size_t skew) {
        return (length + skew + 4095) / 4096 * 4096;
    }
    aligned_buffer slab;
    std::vector<batch_request> requests;
    std::vector<batch_group> groups;
    std::vector<std::size_t> which;
};

// Every wave the planner makes.
std::vector<batch_wave> plan(const scattered& s, const wave_rules& rules = direct_rules()) {
    wave_planner planner(rules, s.requests, s.groups, s.which, {});
    std::vector<batch_wave> waves;
    for (batch_wave w; planner.next(w);)
        waves.push_back(w);
    return waves;
}

// The pieces of each segment tile it in order, and together they cover every request once.
void check_tiling(const scattered& s, const std::vector<batch_wave>& waves) {
    std::vector<std::size_t> covered(s.requests.size(), 0);
    for (const batch_wave& w : waves) {
        BOOST_TEST_REQUIRE(w.first_piece.size() == w.segments.size() + 1);
        BOOST_TEST_REQUIRE(w.wanted.size() == w.segments.size());
        for (std::size_t i = 0; i < w.segments.size(); ++i) {
            std::size_t at = 0;
            for (std::size_t p = w.first_piece[i]; p < w.first_piece[i + 1]; ++p) {
                const batch_wave::piece& piece = w.pieces[p];
                BOOST_TEST(piece.position == at);
                BOOST_TEST(piece.from == covered[piece.request]);
                at += piece.length;
                covered[piece.request] += piece.length;
            }
            BOOST_TEST(at == w.wanted[i]);
        }
    }
    for (std::size_t i = 0; i < s.requests.size(); ++i)
        BOOST_TEST(covered[i] == s.requests[i].memory.size());
}

}  // namespace

BOOST_AUTO_TEST_CASE(aligned_blocks_go_straight_in_one_wave_unpadded) {
    const scattered s(16, block, 0);
    const std::vector<batch_wave> waves = plan(s);
    BOOST_TEST_REQUIRE(waves.size() == 1u);
    BOOST_TEST(waves[0].segments.size() == 16u);
    BOOST_TEST(waves[0].padded == 0u);
    for (std::size_t i = 0; i < 16; ++i) {
        BOOST_TEST(waves[0].segments[i].memory == s.requests[i].memory.bytes());
        BOOST_TEST(!waves[0].is_padded(i));
    }
    check_tiling(s, waves);
}

// Torch's 64-byte-aligned blocks: each is staged (no memory, copied by the engine), and whole
// units need no padding.
BOOST_AUTO_TEST_CASE(misaligned_blocks_are_staged_whole_units_unpadded) {
    const scattered s(8, block + 0, 64);
    const std::vector<batch_wave> waves = plan(s);
    BOOST_TEST_REQUIRE(waves.size() == 1u);
    BOOST_TEST(waves[0].segments.size() == 8u);
    for (std::size_t i = 0; i < 8; ++i) {
        BOOST_TEST(waves[0].segments[i].memory == nullptr);
        BOOST_TEST(waves[0].segments[i].length == block);
        BOOST_TEST(!waves[0].is_padded(i));
    }
    check_tiling(s, waves);
}

// A ragged request: its whole units go straight from the caller's memory, its last partial unit
// as a staged segment padded to a whole unit; a staged one no longer than a block goes whole,
// padded, as one segment; a longer staged one keeps its padded tail apart (a failure there fails
// only the requests the tail carries).
BOOST_AUTO_TEST_CASE(a_ragged_tail_is_staged_padded_to_a_whole_unit) {
    const scattered aligned(1, 3 * block + 100, 0);
    std::vector<batch_wave> waves = plan(aligned);
    BOOST_TEST_REQUIRE(waves.size() == 1u);
    BOOST_TEST_REQUIRE(waves[0].segments.size() == 2u);
    BOOST_TEST(waves[0].segments[0].length == 3 * block);
    BOOST_TEST(waves[0].segments[0].memory == aligned.requests[0].memory.bytes());
    BOOST_TEST(!waves[0].is_padded(0));
    BOOST_TEST(waves[0].segments[1].memory == nullptr);
    BOOST_TEST(waves[0].segments[1].offset == 3 * block);
    BOOST_TEST(waves[0].segments[1].length == unit);
    BOOST_TEST(waves[0].wanted[1] == 100u);
    BOOST_TEST(waves[0].padded == 1u);
    check_tiling(aligned, waves);

    const scattered small(1, 1000, 64);
    waves = plan(small);
    BOOST_TEST_REQUIRE(waves[0].segments.size() == 1u);
    BOOST_TEST(waves[0].segments[0].memory == nullptr);
    BOOST_TEST(waves[0].segments[0].length == 1024u);
    BOOST_TEST(waves[0].wanted[0] == 1000u);
    check_tiling(small, waves);

    const scattered staged(1, 3 * block + 1000, 64);
    waves = plan(staged);
    BOOST_TEST_REQUIRE(waves[0].segments.size() == 2u);
    BOOST_TEST(waves[0].segments[0].memory == nullptr);
    BOOST_TEST(waves[0].segments[0].length == 3 * block + 512u);
    BOOST_TEST(!waves[0].is_padded(0));
    BOOST_TEST(waves[0].segments[1].memory == nullptr);
    BOOST_TEST(waves[0].segments[1].offset == 3 * block + 512u);
    BOOST_TEST(waves[0].segments[1].length == unit);
    BOOST_TEST(waves[0].wanted[1] == 488u);
    check_tiling(staged, waves);
}

// A written wave holds at most `padded_per_wave` padded segments (each takes a unit of merged
// file bytes): 10 ragged requests, 3 a wave: waves of 3, 3, 3 and 1; a read's batch is one wave.
BOOST_AUTO_TEST_CASE(waves_hold_at_most_padded_per_wave_padded_segments) {
    const scattered s(10, 4096 + 100, 0);
    wave_rules rules = direct_rules();
    rules.padded_per_wave = 3;
    const std::vector<batch_wave> waves = plan(s, rules);
    BOOST_TEST_REQUIRE(waves.size() == 4u);
    const std::size_t groups_in[] = {3, 3, 3, 1};
    for (std::size_t k = 0; k < 4; ++k) {
        BOOST_TEST(waves[k].segments.size() == 2 * groups_in[k]);  // body and tail each
        BOOST_TEST(waves[k].padded == groups_in[k]);
    }
    check_tiling(s, waves);
    BOOST_TEST(plan(s).size() == 1u);
}

// A file without units (buffered, or one O_DIRECT does not pad) gets no padding.
BOOST_AUTO_TEST_CASE(nothing_is_padded_where_the_file_has_no_units) {
    const scattered s(4, 1000, 64);
    wave_rules rules = direct_rules();
    rules.padding_unit = 1;
    const std::vector<batch_wave> waves = plan(s, rules);
    BOOST_TEST_REQUIRE(waves.size() == 1u);
    BOOST_TEST(waves[0].padded == 0u);
    for (const detail::segment& g : waves[0].segments)
        BOOST_TEST(g.length == 1000u);
    check_tiling(s, waves);
}

// Groups of several members, adjacent in memory or not: a member that crosses from the body
// into the tail is cut into two pieces, and each piece names its place in the request.
BOOST_AUTO_TEST_CASE(members_are_cut_where_their_group_is) {
    aligned_buffer slab(4 * block);
    std::vector<batch_request> requests{{memory(slab).slice(0, 1000), 0},
                                        {memory(slab).slice(1000, 1000), 1000},
                                        {memory(slab).slice(2000, 600), 2000}};
    const std::vector<batch_group> groups{{{0, 1, 2}, 0, 2600, true}};
    const std::vector<std::size_t> which{0};
    wave_planner planner(direct_rules(), requests, groups, which, {});
    batch_wave w;
    BOOST_TEST_REQUIRE(planner.next(w));
    BOOST_TEST_REQUIRE(w.segments.size() == 2u);  // 2560 bytes straight, 40 padded
    BOOST_TEST(w.segments[0].length == 2560u);
    BOOST_TEST(w.segments[1].length == unit);
    BOOST_TEST(w.wanted[1] == 40u);
    BOOST_TEST_REQUIRE(w.pieces.size() == 4u);
    BOOST_TEST(w.pieces[2].request == 2u);
    BOOST_TEST(w.pieces[2].length == 560u);
    BOOST_TEST(w.pieces[3].request == 2u);
    BOOST_TEST(w.pieces[3].from == 560u);
    BOOST_TEST(w.pieces[3].position == 0u);
    BOOST_TEST(planner.ios() == 1u);
    BOOST_TEST(planner.bounced_bytes() == 40u);
    BOOST_TEST(!planner.next(w));
}

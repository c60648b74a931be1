#pragma once
// Skips that show as skips: a part of a test that cannot run here calls skip(why), and a run in
// which something was skipped and nothing failed exits 77, which ctest (SKIP_RETURN_CODE 77)
// reports as skipped, as liburing's T_EXIT_SKIP does. test_main.cpp is every program's main.

#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace nvmeio_test {

inline constexpr int skip_exit_code = 77;

struct skipped_parts {
    std::mutex mutex;
    std::map<std::string, unsigned> reasons;  // why -> how many times
};

inline skipped_parts& skipped() {
    static skipped_parts parts;
    return parts;
}

// Records that the calling test left something untested, and why.
inline void skip(const std::string& why) {
    BOOST_TEST_MESSAGE("SKIPPED: " << why);
    std::lock_guard<std::mutex> lock(skipped().mutex);
    ++skipped().reasons[why];
}

// The exit status of a run whose Boost.Test result is `rc`: 77 when it passed but skipped
// something. Lists what was skipped on stderr either way.
inline int exit_code(int rc) {
    std::lock_guard<std::mutex> lock(skipped().mutex);
    for (const auto& [why, times] : skipped().reasons)
        std::fprintf(stderr, "SKIPPED (%u x): %s\n", times, why.c_str());
    return rc == 0 && !skipped().reasons.empty() ? skip_exit_code : rc;
}

}  // namespace nvmeio_test

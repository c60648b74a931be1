#define BOOST_TEST_MODULE perf
#include <boost/test/tools/floating_point_comparison.hpp>
#include <boost/test/unit_test.hpp>

#include <nvmeio/perf.hpp>
#include <sstream>

using namespace nvmeio;

BOOST_AUTO_TEST_CASE(latency_stats_summarise_samples) {
    std::vector<double> samples;
    for (int i = 100; i >= 1; --i)
        samples.push_back(i);  // 1..100, unsorted
    const latency_stats s = latency_stats::from_samples(samples);
    BOOST_TEST(s.count == 100u);
    BOOST_TEST(s.min_us == 1.0);
    BOOST_TEST(s.max_us == 100.0);
    BOOST_TEST(s.avg_us == 50.5, boost::test_tools::tolerance(1e-9));
    BOOST_TEST(s.p50_us == 50.0);
    BOOST_TEST(s.p99_us == 99.0);
}

BOOST_AUTO_TEST_CASE(latency_stats_of_no_samples_are_zero) {
    std::vector<double> none;
    const latency_stats s = latency_stats::from_samples(none);
    BOOST_TEST(s.count == 0u);
    BOOST_TEST(s.max_us == 0.0);
}

BOOST_AUTO_TEST_CASE(throughput_units_are_decimal_and_binary) {
    transfer_perf p;
    p.bytes = 2'000'000'000;
    p.elapsed_us = 1'000'000;  // one second
    BOOST_TEST(p.gb_per_s() == 2.0, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(p.gib_per_s() == 2e9 / 1073741824.0, boost::test_tools::tolerance(1e-12));
    transfer_perf none;
    BOOST_TEST(none.gb_per_s() == 0.0);
}

BOOST_AUTO_TEST_CASE(json_has_every_field) {
    transfer_perf p;
    p.bytes = 1000;
    p.elapsed_us = 1;
    p.submit.count = 3;
    const std::string json = to_json(p);
    for (const char* key :
         {"\"bytes\": 1000", "\"elapsed_us\"", "\"gb_per_s\": 1.0000", "\"gib_per_s\"",
          "\"requests\"", "\"resubmissions\"", "\"submit\": {\"count\": 3", "\"completion\"",
          "\"p50_us\"", "\"p99_us\""}) {
        BOOST_TEST(json.find(key) != std::string::npos, key << " in " << json);
    }
}

BOOST_AUTO_TEST_CASE(table_prints_one_line_per_row_with_its_label) {
    transfer_perf p;
    p.bytes = 1 << 20;
    p.elapsed_us = 1000;
    std::ostringstream out;
    print_table(out, {{"overlapped/block", p}, {"sequential/single", p}});
    const std::string text = out.str();
    BOOST_TEST(text.find("overlapped/block") != std::string::npos);
    BOOST_TEST(text.find("sequential/single") != std::string::npos);
    BOOST_TEST(text.find("1.049") != std::string::npos, text);  // 2^20 bytes in 1 ms = 1.049 GB/s
    BOOST_TEST(text.find("10^9") != std::string::npos);
}

// The main of every test program: Boost.Test's, but a run that skipped something (skip.hpp) and
// had no failure exits 77, which ctest reports as skipped.
#include <boost/test/unit_test.hpp>

#include "skip.hpp"

bool init_unit_test();  // defined by the test program's BOOST_TEST_MODULE

int main(int argc, char* argv[]) {
    return nvmeio_test::exit_code(boost::unit_test::unit_test_main(&init_unit_test, argc, argv));
}

#!/usr/bin/env bash
# Quick start, part 2: build and run nvmeio's whole test suite.
#  - g++ C++17 (Release, -O3) and clang++ C++20 (-O1): everything built (tests, examples, tools),
#    warnings as errors, every test run (the packaging tests, which build consumer programs, in
#    the first only), two test programs at a time;
#  - clang++ C++17: every public header on its own and the two test programs that instantiate
#    every engine path (strategies, batches), built with warnings as errors (a compile check);
#  - then scripts/sanitize.sh: the suite under ASan+UBSan (g++ C++17) and under TSan built as
#    g++ C++20, which is that pair's full build and run, and a valgrind subset.
# Optimisation levels keep the suite near ten minutes on two cores: compiling the tests at -O3
# costs about three times -O0, and -O3 code is what the g++ build runs.
# Test files go to each build tree, which must be on a filesystem that accepts O_DIRECT.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
nvmeio_install_deps
jobs=$(nproc)

build() {  # dir compiler standard build-type "targets" [cmake args...]
  local dir=$1 cxx=$2 std=$3 type=$4 target=$5
  shift 5
  echo "== $cxx, C++$std ($type, target $target) =="
  CXX=$cxx cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DCMAKE_CXX_STANDARD="$std" "$@" >/dev/null
  if ! cmake --build "$dir" -j"$jobs" --target $target >"$dir/build.log" 2>&1; then
    grep -E -B2 -A12 "error|Error" "$dir/build.log" | head -80
    exit 1
  fi
}

build build-test-g++-17 g++ 17 Release all
(cd build-test-g++-17 && ctest --output-on-failure -j"$jobs")
build build-test-clang++-20 clang++ 20 None all -DCMAKE_CXX_FLAGS=-O1
(cd build-test-clang++-20 && ctest --output-on-failure -j"$jobs" -LE packaging)
build build-test-clang++-17 clang++ 17 None "header_check strategy_test batch_test" -DNVMEIO_BUILD_EXAMPLES=OFF -DNVMEIO_BUILD_BENCH=OFF
scripts/sanitize.sh
echo "nvmeio: all test runs passed"

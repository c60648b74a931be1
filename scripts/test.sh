#!/usr/bin/env bash
# Quick start, part 2: build and run the whole test suite with g++ and clang, C++17 and C++20,
# warnings as errors; then the sanitizer and valgrind runs when scripts/sanitize.sh exists.
# Test files go to each build tree (it must be on a filesystem that accepts O_DIRECT).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
nvmeio_install_deps
jobs=$(nproc)
# The packaging tests (consumer builds) depend on the build system, not the compiler flags: run
# them in the first configuration only.
ctest_filter=()
for config in "g++ 17" "clang++ 20" "g++ 20" "clang++ 17"; do
  set -- $config
  dir="build-test-$1-$2"
  echo "== $1, C++$2 =="
  CXX=$1 cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD="$2" >/dev/null
  if ! cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
    grep -E -B2 -A12 "error|Error" "$dir/build.log" | head -80
    exit 1
  fi
  (cd "$dir" && ctest --output-on-failure -j1 "${ctest_filter[@]}")
  ctest_filter=(-LE packaging)
done
if [ -x scripts/sanitize.sh ]; then
  scripts/sanitize.sh
fi
echo "nvmeio: all test runs passed"

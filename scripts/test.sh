#!/usr/bin/env bash
# Quick start, part 2: build and run nvmeio's whole test suite.
#  - g++ C++17 (Release, -O3): everything built (tests, examples, tools), warnings as errors,
#    every test run, among them tools_test and the example tests (which run every tool and
#    example) and the packaging tests (which build consumer programs);
#    the g++ build also builds nvmeio_torch (python/) for the newest torch from PyPI, in a
#    virtual environment made once and reused (scripts/torch_venv.sh), and its pytest suite runs
#    as the ctest test python_tests; without PyPI, this says so and builds it for Debian's torch
#    where that is installed;
#  - nvmeio_torch again for Debian's torch 1.13 (python3-torch), its pytest suite run there;
#  - clang++ C++17: every public header on its own and the two test programs that instantiate
#    every engine path (strategies, batches), built with warnings as errors (a compile check);
#  - then scripts/sanitize.sh, where the other two pairs get their full build and run: the suite
#    under ASan+UBSan built as clang++ C++20 and under TSan built as g++ C++20, each with every
#    public header on its own and warnings as errors, and a valgrind subset. (The examples and
#    tools are thin clients of the same headers; building them is half of a tree's compile
#    time, and they are built and run once above.)
# ctest runs two tests at a time (NVMEIO_TEST_JOBS): most of them wait on the disk. Each stage
# prints its wall time and the CPU time (user+sys) of its build and test run.
# Optimisation levels keep the suite near 13 minutes on two cores: compiling the tests at -O3
# costs about three times -O0, and -O3 code is what the g++ build runs.
# Test files go to each build tree, which must be on a filesystem that accepts O_DIRECT.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
nvmeio_install_deps
jobs=$(nproc)
test_jobs="${NVMEIO_TEST_JOBS:-2}"

cpu_seconds() {  # user+sys of the finished children of this shell (fields 16, 17 of its stat)
  awk -v tick="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f", ($14 + $15) / tick }' "/proc/$$/stat"
}
timed() {  # label command...: runs the command, then prints its wall and CPU seconds
  local label=$1 start=$SECONDS cpu
  shift
  cpu=$(cpu_seconds)
  "$@"
  echo "time: $label: wall $((SECONDS - start)) s, cpu $(($(cpu_seconds) - cpu)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
}

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
run_tests() {  # dir [ctest args...]
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure -j"$test_jobs" "$@")
}

torch_args=()
if torch_python=$(scripts/torch_venv.sh); then
  torch_args=(-DPython3_EXECUTABLE="$torch_python")
fi
timed "g++ C++17 build" build build-test-g++-17 g++ 17 Release all "${torch_args[@]}"
torch_built() { grep -q '^NVMEIO_BUILD_PYTHON:BOOL=ON' "$1/CMakeCache.txt"; }
if torch_built build-test-g++-17; then
  echo "nvmeio: nvmeio_torch built for torch" \
    "$(sed -n 's/^NVMEIO_TORCH_VERSION:INTERNAL=//p' build-test-g++-17/CMakeCache.txt);" \
    "its pytest suite runs as python_tests"
else
  echo "nvmeio: Python part SKIPPED: no interpreter imports torch (neither PyPI's, above, nor" \
    "Debian's python3-torch); the C++ suite runs without nvmeio_torch"
fi
# nvmeio_torch for Debian's torch 1.13 too, where it is installed and the build above was for
# another torch: built before the tests, whose DCP test loads checkpoints saved with it.
debian_torch=""
if [ ${#torch_args[@]} -gt 0 ] && /usr/bin/python3 -c "import torch, pytest" 2>/dev/null; then
  debian_torch=build-test-torch-debian
  timed "nvmeio_torch for Debian's torch build" build "$debian_torch" g++ 17 Release \
    nvmeio_torch_C -DPython3_EXECUTABLE=/usr/bin/python3 -DNVMEIO_BUILD_EXAMPLES=OFF \
    -DNVMEIO_BUILD_BENCH=OFF
  export NVMEIO_TORCH_1_13_PYTHONPATH="$PWD/$debian_torch/python"
fi
timed "g++ C++17 tests" run_tests build-test-g++-17
if [ -n "$debian_torch" ]; then
  timed "nvmeio_torch for Debian's torch tests" run_tests "$debian_torch" -L python
fi
timed "clang++ C++17 compile check" build build-test-clang++-17 clang++ 17 None "header_check strategy_test batch_test" \
  -DNVMEIO_BUILD_EXAMPLES=OFF -DNVMEIO_BUILD_BENCH=OFF -DNVMEIO_BUILD_PYTHON=OFF
scripts/sanitize.sh
echo "nvmeio: all test runs passed"

#!/usr/bin/env bash
# Quick start, part 1: build nvmeio-demo and run the main job (a generated ~1 GiB file written with
# O_DIRECT, read back cold with both strategies and a buffered read, validated, perf table).
# Extra arguments go to nvmeio-demo (see --help), e.g. --size 4G --queue-depth 64.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
nvmeio_install_deps
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DNVMEIO_BUILD_TESTS=OFF >/dev/null
cmake --build build-demo --target nvmeio-demo -j"$(nproc)" >/dev/null
exec ./build-demo/examples/nvmeio-demo "$@"

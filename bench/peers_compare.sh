#!/usr/bin/env bash
# nvmeio_torch beside the packages users pick (bench/peers_compare.py), in a venv of its own.
#
#   bench/peers_compare.sh --folder DIR [--rounds 3] [--jobs safetensors torch ds_handle ...]
#
# Makes the bench venv (BENCH_VENV, default ~/.cache/nvmeio/bench-venv) from /usr/bin/python3
# when it is missing, with bench/requirements-peers.txt and torch pinned to the test venv's
# version (TEST_VENV, default ~/.cache/nvmeio/torch-venv; nothing is installed there), builds
# nvmeio_torch for that torch in build-bench, then runs the comparison as root (it drops the
# page cache). The test suite needs none of these packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
venv=${BENCH_VENV:-$HOME/.cache/nvmeio/bench-venv}
test_venv=${TEST_VENV:-$HOME/.cache/nvmeio/torch-venv}
build=${BENCH_BUILD:-$root/build-bench}

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
if [ -x "$test_venv/bin/python" ]; then
  echo "torch==$("$test_venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')" \
    > "$constraints"
fi
# torch first: DeepSpeed's setup imports it
"$venv/bin/pip" install -q -c "$constraints" torch
"$venv/bin/pip" install -q -c "$constraints" -r "$here/requirements-peers.txt"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$venv/bin/python" \
  -DNVMEIO_BUILD_EXAMPLES=OFF -DNVMEIO_BUILD_TESTS=OFF > /dev/null
cmake --build "$build" -j2 --target nvmeio_torch_C > /dev/null

exec "$venv/bin/python" "$here/peers_compare.py" --build "$build" "$@"

#!/usr/bin/env bash
# DeepSpeed's own aio and FastPersist tests, unmodified, against the installed DeepSpeed in the
# bench venv (bench/peers_compare.sh makes it): once on DeepSpeed's own handle (its
# AsyncIOBuilder().load(), JIT-built against the venv's torch), once through nvmeio's drop-in
# (a sitecustomize.py making the user's one line, nvmeio_torch.use_in_deepspeed(), in every
# process). Prints pytest's counts for each.
#
#   bench/deepspeed_tests.sh DEEPSPEED_SOURCE [NVMEIO_BUILD_DIR]
#
# DEEPSPEED_SOURCE is a checkout of DeepSpeed's public source at (or near) the installed
# version; only its tests are copied, into a scratch folder that is removed afterwards. The
# pytest.ini's marker filter is cleared so that the sequential tests run too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ds=$(cd "${1:?usage: deepspeed_tests.sh DEEPSPEED_SOURCE [NVMEIO_BUILD_DIR]}" && pwd)
build=$(cd "${2:-$here/../build-bench}" && pwd)
venv=${BENCH_VENV:-$HOME/.cache/nvmeio/bench-venv}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

mkdir -p "$scratch/tests/unit" "$scratch/switch"
cp "$ds/tests/conftest.py" "$ds/tests/pytest.ini" "$scratch/tests/"
for f in common.py util.py simple_model.py; do
  [ -f "$ds/tests/unit/$f" ] && cp "$ds/tests/unit/$f" "$scratch/tests/unit/"
done
found=
for folder in tests/unit/v1/nvme tests/unit/ops/aio; do  # newest layout first
  if [ -f "$ds/$folder/test_aio.py" ]; then
    mkdir -p "$scratch/$folder"
    cp "$ds/$folder"/*.py "$scratch/$folder/"
    found=$folder
    break
  fi
done
[ -n "$found" ] || { echo "deepspeed_tests: no test_aio.py under $ds/tests/unit" >&2; exit 1; }
cp "$here/../python/deepspeed_compat/standins/sitecustomize.py" "$scratch/switch/"

echo "deepspeed_tests: $("$venv/bin/python" -c 'import deepspeed, torch; print("DeepSpeed", deepspeed.__version__, "torch", torch.__version__)'), tests of $found: $(cd "$scratch/$found" && echo test_*.py)"
status=0
for handle in deepspeed nvmeio; do
  path="$build/python"
  [ "$handle" = nvmeio ] && path="$scratch/switch:$path"
  echo "== on $handle's handle"
  (cd "$scratch/tests" && PYTHONPATH="$path" "$venv/bin/python" -m pytest -p no:cacheprovider \
     -o addopts= -q -rs --tb=line "${found#tests/}" 2>&1 | tail -n 40) || status=1
done
exit $status

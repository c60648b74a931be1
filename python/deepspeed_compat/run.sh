#!/usr/bin/env bash
# Runs DeepSpeed's own aio unit tests and its ds_io tool, unmodified, against nvmeio_torch.
#
#   python/deepspeed_compat/run.sh DEEPSPEED_SOURCE [NVMEIO_BUILD_DIR] [IO_FOLDER]
#
# DEEPSPEED_SOURCE is a checkout of DeepSpeed's public source (nothing of it is built or kept).
# Only the DeepSpeed modules the tests import are stood in for (standins/: deepspeed.ops,
# deepspeed.accelerator, deepspeed.comm, tests' unit.common); DeepSpeed's deepspeed/nvme and
# deepspeed/io packages and test file are copied as they are into a scratch folder. The switch
# is the user's one line, nvmeio_torch.use_in_deepspeed(), made by standins/sitecustomize.py in
# every process (ds_io spawns its workers). With DS_AIO_EXTENSION set to a built extension of
# DeepSpeed's own handle, the same runs use that instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ds=$(cd "${1:?usage: run.sh DEEPSPEED_SOURCE [NVMEIO_BUILD_DIR] [IO_FOLDER]}" && pwd)
build=$(cd "${2:-$here/../../build-test-g++-17}" && pwd)
python=/usr/bin/python3
scratch=$(mktemp -d)
folder="${3:-$scratch/io}"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$folder"

tests=$("$python" "$here/tree.py" "$ds" "$scratch")
export PYTHONPATH="$scratch:$build/python"

echo "== DeepSpeed's $tests: $(cd "$scratch/tests" && echo test_*.py)"
(cd "$scratch/tests" && "$python" -m pytest -q -p no:cacheprovider -rs test_*.py)

echo "== DeepSpeed's FastFileWriter (FastPersist): torch.save through the handle, torch.load back"
(cd "$scratch" && "$python" "$here/fast_persist_check.py" "$folder")

echo "== DeepSpeed's ds_io: 64 MiB, 1 MiB x 32, io_parallel 1 and 2, write then read, validated"
for parallel in 1 2; do
  for op in "" --read; do
    (cd "$scratch" && "$python" "$ds/bin/ds_io" --folder "$folder" --io_size 64M --block_size 1M \
      --queue_depth 32 --io_parallel "$parallel" --loops 2 --validate $op) | grep -E 'Speed|Error|rror'
  done
done
echo "deepspeed_compat: DeepSpeed's tests, FastFileWriter and ds_io passed"

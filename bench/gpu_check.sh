#!/usr/bin/env bash
# gpu_check.sh: everything nvmeio checks and measures on a machine with a GPU, in one run, for a
# machine lent for minutes (docs/PYTHON.md, "On a GPU"). It builds nvmeio_torch against that
# machine's torch with one g++ call (no CMake there), runs the GPU tests and the gpu_load
# example, then bench/gpu_load_compare.py from the machine's disk and from a RAM-backed device.
#
#   bench/gpu_check.sh --pack            here: put what that machine lacks (libaio, liburing,
#                                        CLI11 and nlohmann-json headers, a static fio) in
#                                        .devcarry/ (git-ignored) to be carried along
#   bench/gpu_check.sh OUT PART [SIZE] [ROUNDS]   there: write the logs of PART into folder OUT
#       PART: tests (machine, build, the GPU tests, gpu_load; about 2 minutes), ram (the benchmark
#       from a RAM-backed ext4 device; about 110 s a round of 2 GiB), disk (from the machine's disk;
#       about 100 s a round), or all. One call of the device tool runs at most 10 minutes: run
#       tests, then ram, then disk, each in a call of its own on the same warm machine (the build
#       in build-gpu/ stays between calls).
set -uo pipefail
cd "$(dirname "$0")/.."
carry=.devcarry

if [[ ${1:-} == --pack ]]; then
    fio=${FIO:-$(command -v fio)}
    if ldd "$fio" >/dev/null 2>&1; then
        echo "gpu_check.sh: $fio is dynamically linked; give FIO=<a static fio> (./configure --build-static)" >&2
        exit 2
    fi
    rm -rf "$carry" && mkdir -p "$carry/include" "$carry/lib" "$carry/bin"
    cp -r /usr/include/libaio.h /usr/include/liburing.h /usr/include/liburing /usr/include/CLI \
        /usr/include/nlohmann "$carry/include/"
    for l in libaio.so.1 liburing.so.2; do
        cp -L "/usr/lib/x86_64-linux-gnu/$l" "$carry/lib/$l"
        ln -sf "$l" "$carry/lib/${l%.*}"
    done
    cp "$fio" "$carry/bin/fio"
    grep -qx "/$carry/" .git/info/exclude 2>/dev/null || echo "/$carry/" >>.git/info/exclude
    du -sh "$carry"
    exit 0
fi

out=${1:?usage: gpu_check.sh OUT tests|ram|disk|all [SIZE] [ROUNDS]}
part=${2:-all}
size=${3:-2G}
rounds=${4:-3}
case $part in tests | ram | disk | all) ;; *) echo "gpu_check.sh: PART is tests, ram, disk or all" >&2; exit 2 ;; esac
wants() { [[ $part == all || $part == "$1" ]]; }
mkdir -p "$out"
here=$PWD
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

build=$here/build-gpu
if wants tests; then
{
    step machine
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
    python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    python3 -c 'import safetensors; print("safetensors", safetensors.__version__)'
    nproc; free -g | head -2; uname -r; df -hT "$here" /dev/shm | cat; lsblk -d -o NAME,SIZE,ROTA,MODEL | head
} >"$out/machine.txt" 2>&1

step build
rm -rf "$build" && mkdir -p "$build/nvmeio_torch"
cp python/nvmeio_torch/*.py "$build/nvmeio_torch/"
flags=$(python3 - <<'EOF'
import sysconfig, torch
from torch.utils import cpp_extension as c
parts = ["-I" + p for p in c.include_paths()] + ["-I" + sysconfig.get_paths()["include"]]
parts += ["-L" + p for p in c.library_paths()]
parts += ["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI)]
print(" ".join(parts))
EOF
)
suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
libs="-L$here/$carry/lib -laio -luring -ldl -pthread -Wl,-rpath,$here/$carry/lib"
{
    time g++ -std=c++17 -O2 -shared -fPIC $flags -Iinclude -Ipython/src -I$carry/include \
        -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H -DNVMEIO_HAS_IO_URING=1 \
        -DNVMEIO_NO_XSIMD python/src/module.cpp -o "$build/nvmeio_torch/_C$suffix" \
        -lc10 -ltorch -ltorch_cpu -ltorch_python $libs &
    time g++ -std=c++17 -O2 -Iinclude -I. -Iexamples -I$carry/include -DNVMEIO_HAS_IO_URING=1 \
        -DNVMEIO_NO_XSIMD examples/gpu_load.cpp -o "$build/gpu_load" $libs &
    wait
} >"$out/build.txt" 2>&1
ls -la "$build" "$build/nvmeio_torch" >>"$out/build.txt"
export PYTHONPATH=$build PATH=$here/$carry/bin:$PATH

step tests
NVMEIO_TORCH_TEST_DIR=$here/build-gpu/test-files timeout 100 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_gpu.py python/tests/test_staged.py >"$out/tests.txt" 2>&1
echo "exit $?" >>"$out/tests.txt"

step gpu_load
timeout 40 "$build/gpu_load" "$build/gpu_load.gguf" --generate gguf --size 1G --rounds 3 \
    --threads 8 >"$out/gpu_load.txt" 2>&1
echo "exit $?" >>"$out/gpu_load.txt"
rm -f "$build/gpu_load.gguf"

fi
export PYTHONPATH=$build PATH=$here/$carry/bin:$PATH

if wants ram; then
step bench RAM device
ram=$(scripts/ram_device.sh --size 12G 2>>"$out/bench_ram.txt")
if [[ -n $ram ]] && mkfs.ext4 -q -F "$ram" >>"$out/bench_ram.txt" 2>&1 &&
    mkdir -p /mnt/nvmeio-ext4 && mount "$ram" /mnt/nvmeio-ext4; then
    timeout 560 python3 bench/gpu_load_compare.py --folder /mnt/nvmeio-ext4/bench --size "$size" \
        --rounds "$rounds" --fio "$here/$carry/bin/fio" --json "$out/bench_ram.json" \
        >>"$out/bench_ram.txt" 2>&1
    echo "exit $?" >>"$out/bench_ram.txt"
    umount /mnt/nvmeio-ext4
    scripts/ram_device.sh --remove >>"$out/bench_ram.txt" 2>&1
else
    echo "no RAM-backed ext4 device here" >>"$out/bench_ram.txt"
fi
fi

if wants disk; then
step bench disk
timeout 560 python3 bench/gpu_load_compare.py --folder "$here/build-gpu/bench" --size "$size" \
    --rounds "$rounds" --fio "$here/$carry/bin/fio" --json "$out/bench_disk.json" >"$out/bench_disk.txt" 2>&1
echo "exit $?" >>"$out/bench_disk.txt"
rm -rf "$here/build-gpu/bench"
fi
step done

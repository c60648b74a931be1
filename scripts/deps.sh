# Sourced by the other scripts: installs the Debian/Ubuntu packages nvmeio's build needs when one is
# missing (as root, or through sudo), else says what to install.
# python3-venv and python3-dev make the virtual environment in which nvmeio_torch, the PyTorch
# module (python/), is built and tested against the newest torch from PyPI (scripts/torch_venv.sh);
# python3-torch, libtorch-dev, pybind11-dev and python3-pytest build and test it against Debian's
# torch 1.13; util-linux-extra has fincore (what a file leaves in the page cache).
NVMEIO_PACKAGES="g++ clang cmake make libaio-dev libboost-test-dev libxsimd-dev liburing-dev libcli11-dev nlohmann-json3-dev pkg-config fio valgrind python3-venv python3-dev python3-torch libtorch-dev pybind11-dev python3-pytest util-linux-extra"

nvmeio_install_deps() {
  local missing=""
  for p in $NVMEIO_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "nvmeio: installing missing packages:$missing"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "nvmeio: not root and no sudo; please install:$missing" >&2
    return 1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
}

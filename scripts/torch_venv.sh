#!/usr/bin/env bash
# Makes, or reuses, the virtual environment in which nvmeio_torch is built and tested against the
# newest torch from PyPI (python/requirements-test.txt), and prints its interpreter's path.
#  - NVMEIO_TORCH_VENV: where it lives; by default outside the clone, in ~/.cache/nvmeio, so
#    that every clone reuses it (torch's wheel and its CUDA libraries take about 5.5 GB).
#  - A reused one is left as it is, unless the requirements changed or NVMEIO_TORCH_UPGRADE=1.
#  - Without PyPI (or without python3-venv) it says so in one line on stderr and exits 1.
# Runs that share one environment take turns (a lock beside it, which no child holds). Every
# child has a time limit: an interpreter that hangs is reported, not waited for.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${NVMEIO_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/nvmeio/torch-venv}
requirements=$here/python/requirements-test.txt
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3)

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -e "$venv" ] && [ ! -d "$venv" ]; then
  echo "nvmeio: $venv is not a folder: give NVMEIO_TORCH_VENV another place" >&2
  exit 1
fi
ready() {  # prints torch's version where the environment has all it needs
  timeout 300 "$venv/bin/python" -c "import pytest, numpy, torch; print(torch.__version__)" \
    2>/dev/null 9>&-
}
runs() {  # whether the environment's interpreter starts at all
  timeout 30 "$venv/bin/python" -c "import sys" >/dev/null 2>&1 9>&-
}
if { [ -e "$venv/bin/python" ] || [ -L "$venv/bin/python" ]; } && ! runs; then
  echo "nvmeio: $venv/bin/python does not run: remove $venv to have it made anew" >&2
  exit 1
fi
if ! version=$(ready) || ! cmp -s "$requirements" "$venv/.nvmeio-requirements" ||
  [ "${NVMEIO_TORCH_UPGRADE:-0}" = 1 ]; then
  if [ ! -e "$venv/bin/python" ] && ! "$base" -m venv "$venv" >"$venv.log" 2>&1 9>&-; then
    echo "nvmeio: no virtual environment for the newest torch: '$base -m venv' failed" \
      "(Debian: apt install python3-venv; log: $venv.log)" >&2
    exit 1
  fi
  if ! timeout 3600 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --timeout 30 --retries 2 --upgrade -r "$requirements" >"$venv.log" 2>&1 9>&-; then
    why="$(tail -n 1 "$venv.log") (log: $venv.log)"
    if ! version=$(ready); then
      echo "nvmeio: PyPI not reached or torch not installable: $why" >&2
      exit 1
    fi
    echo "nvmeio: not upgraded, the environment as it was serves: $why" >&2
  else
    cp "$requirements" "$venv/.nvmeio-requirements"
    if ! version=$(ready); then
      echo "nvmeio: torch, pytest or numpy does not import in $venv after installing" >&2
      exit 1
    fi
  fi
fi
echo "nvmeio: torch $version from PyPI in $venv" >&2
echo "$venv/bin/python"

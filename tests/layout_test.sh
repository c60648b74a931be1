#!/usr/bin/env bash
# The floors of include/nvmeio/, which a reviewer would otherwise check by eye:
#  - a front end (strategy, batch, parallel, async, stripe, verify, staged) includes the
#    vocabulary, the contexts, the lower public headers and detail/, never another front end,
#    except that parallel and stripe include strategy, whose transfer/read/write they serve on a
#    parallel context, and staged, whose slots each move as one transfer;
#  - detail/ lies below the public headers it serves: it includes detail/ and the lower public
#    headers only (never a context, a front end or the umbrella);
#  - those lower headers (file, the backends, the vocabulary) include only the floor of detail/:
#    the headers that include nothing of nvmeio's but version.hpp and the floor itself (file's
#    member definitions, the per-file size mutex, the cached process id, a buffer's pin record,
#    which stands on the process id), so that everything may stand on them.
# Prints every include that breaks a rule and fails if there is one.
set -euo pipefail
root=${1:-$(dirname "$0")/../include}
cd "$root/nvmeio"
front_ends="strategy batch parallel async stripe verify staged"
lower="error perf alignment memory transfer file file_modes aligned_allocator compare version backend/request cuda staging_ring"
is_in() { local x=$1; shift; for y in "$@"; do [[ $x == "$y" ]] && return 0; done; return 1; }
includes() { sed -n 's|^#include "nvmeio/\(.*\)\.[hi]pp"|\1|p' "$1"; }  # FILE
bad=0
report() { echo "layout: $1.hpp includes nvmeio/$2.hpp: $3"; bad=1; }
for f in $front_ends; do
  for i in $(includes "$f.hpp"); do
    if is_in "$i" $front_ends && ! { [[ $i == strategy ]] && is_in "$f" parallel stripe staged; }; then
      report "$f" "$i" "a front end includes another front end"
    fi
    if [[ $i == nvmeio ]]; then report "$f" "$i" "a front end includes the umbrella"; fi
  done
done
for path in detail/*.hpp; do
  f=${path%.hpp}
  for i in $(includes "$path"); do
    [[ $i == detail/* ]] && continue
    is_in "$i" $lower && continue
    report "$f" "$i" "detail/ includes a public header above it"
  done
done
# The headers detail/ stands on stand only on the floor of detail/, which includes nothing but
# version.hpp (macros: the namespace's, the version's; it includes nothing) and the floor.
floor_file() {  # FILE: whether it includes only version.hpp and floor headers of detail/
  local i
  for i in $(includes "$1"); do
    [[ $i == version ]] && continue
    [[ $i == detail/* ]] && is_floor "$i" && continue
    return 1
  done
}
is_floor() { { [[ -e $1.hpp ]] && floor_file "$1.hpp"; } || { [[ -e $1.ipp ]] && floor_file "$1.ipp"; }; }
for f in $lower backend/*; do
  f=${f%.hpp}
  [[ -e $f.hpp ]] || continue
  for i in $(includes "$f.hpp"); do
    if [[ $i == detail/* ]] && ! is_floor "$i"; then
      report "$f" "$i" "a header under detail/ includes detail/ above its floor"
    fi
  done
done
if [[ $bad == 0 ]]; then echo "layout: every include of include/nvmeio/ keeps to the floors"; fi
exit $bad

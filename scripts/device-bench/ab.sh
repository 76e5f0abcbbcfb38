#!/usr/bin/env bash
# A/B on the device: C baseline, this build ("head", bin/) and an earlier one ("base", bin-base/),
# alternated, all cores. Argument: rounds per window.
set -u
cd "$(dirname "$0")"
tar xJf pkg.tar.xz || exit 1
[ -e bin-base/busctl ] || cp bin/busctl bin-base/
export LD_LIBRARY_PATH="$PWD/lib"
rounds="${1:-2}"; log="${OUT:-/tmp}/ab.log"
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" | tee -a "$log"
bench() { local dir="$1"; shift; echo "-- $dir $*" >>"$log"; BOARDBUS_BIN_DIR="$PWD/$dir" timeout 90 "$PWD/$dir/boardbus-bench" "$@" 2>&1 | grep -vE '^\s*$| (info|debug|notice) ' >>"$log"; }
"$PWD/bin/boardbus-bench" --help >/dev/null 2>&1 || { ldd bin/boardbus-bench | grep 'not found'; exit 1; }
for r in $(seq "$rounds"); do
  for w in "4 100" "1 1000" "4 16"; do
    set -- $w
    if [ $((r % 2)) = 1 ]; then order="bin bin-base"; else order="bin-base bin"; fi
    bench bin --load-baseline 3 --load-clients "$1" --load-window "$2"
    for d in $order; do bench "$d" --load 3 --command echo.raw --load-clients "$1" --load-window "$2"; done
    for d in $order; do bench "$d" --load 3 --command echo --format cbor --load-clients "$1" --load-window "$2"; done
  done
done
for d in bin bin-base; do bench "$d" --latency-only 5000 --command echo.raw; done
# Summary: throughput and the broker's two threads per run.
awk '/^-- /{run=$0} /throughput|p50/{print run " => " $0} /^  (motherboard|zmq-baseline-proxy|bench-echo-board) /{print "     " $0}' "$log"
echo "== end"

#!/usr/bin/env bash
# On the device: the broker with one libzmq I/O thread against two, alternated, with the C
# baseline in each round. Argument: rounds per window.
set -u
cd "$(dirname "$0")"
tar xJf pkg.tar.xz || exit 1
export LD_LIBRARY_PATH="$PWD/lib" BOARDBUS_BIN_DIR="$PWD/bin"
rounds="${1:-3}"; log="${OUT:-/tmp}/io2.log"
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" | tee -a "$log"
bench() { echo "-- $*" >>"$log"; timeout 90 "$PWD/bin/boardbus-bench" "$@" 2>&1 | grep -vE '^\s*$| (info|debug|notice) ' >>"$log"; }
for r in $(seq "$rounds"); do
  for w in "4 100" "1 1000" "4 16"; do
    set -- $w
    if [ $((r % 2)) = 1 ]; then order="1 2"; else order="2 1"; fi
    bench --load-baseline 3 --load-clients "$1" --load-window "$2"
    for t in $order; do bench --load 3 --command echo.raw --broker-io-threads "$t" --load-clients "$1" --load-window "$2"; done
  done
done
awk '/^-- /{run=$0} /throughput/{print run " => " $0} /^  (motherboard|zmq-baseline-proxy|bench-echo-board) /{print "     " $0}' "$log"
echo "== end"

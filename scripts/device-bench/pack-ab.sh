#!/usr/bin/env bash
# Packs this checkout's release bench binaries (bin/) and those of an earlier commit (bin-base/),
# with the shared libraries they need but glibc's (lib/), into .device-bench/pkg.tar.xz, with
# ab.sh and io2.sh beside it, for a lent 16-core machine (the `device` tool):
#   scripts/device-bench/pack-ab.sh 75f2aff
#   device run: command "bash .device-bench/ab.sh 2" (or io2.sh), carry [".device-bench"]
# ab.sh alternates the C baseline, bin/ and bin-base/ at 4×100, 1×1000 and 4×16; io2.sh the
# broker with one libzmq I/O thread and with two. Both write $OUT/*.log and print a summary.
set -euo pipefail
base_rev="${1:?usage: pack-ab.sh BASE_COMMIT}"
root="$(git rev-parse --show-toplevel)"
cd "$root"
out="$root/.device-bench"
grep -qx '/.device-bench/' .git/info/exclude 2>/dev/null || echo '/.device-bench/' >>.git/info/exclude
products="boardbus-bench motherboard bench-echo-board busctl zmq-baseline-proxy zmq-baseline-echo"
base="$(mktemp -d)"; stage="$(mktemp -d)"
trap 'git worktree remove --force "$base/tree" >/dev/null 2>&1 || true; rm -rf "$base" "$stage"' EXIT
git worktree add -q "$base/tree" "$base_rev"
for p in $products; do
    swift build -c release --product "$p" >&2
    (cd "$base/tree" && swift build -c release --product "$p" >&2)
done
mkdir -p "$stage/bin" "$stage/bin-base" "$stage/lib" "$out"
for p in $products; do
    cp "$(swift build -c release --show-bin-path)/$p" "$stage/bin/"
    cp "$(cd "$base/tree" && swift build -c release --show-bin-path)/$p" "$stage/bin-base/"
done
strip "$stage"/bin/* "$stage"/bin-base/* 2>/dev/null || true
for f in "$stage"/bin/* "$stage"/bin-base/*; do ldd "$f"; done | awk '/=>/ {print $3}' | sort -u \
    | grep -vE '/(libc|libm|libpthread|libdl|librt)\.so|/ld-linux' | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar cJf "$out/pkg.tar.xz" -C "$stage" bin bin-base lib
cp scripts/device-bench/ab.sh scripts/device-bench/io2.sh "$out/"
echo "packed: $(du -h "$out/pkg.tar.xz" | cut -f1) in .device-bench/ (the device tool carries at most 64 MiB)"

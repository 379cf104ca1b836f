#!/usr/bin/env bash
# The GPU check's luggage. The lent GPU machine has the CUDA toolkit and driver but none
# of the Debian libraries tandem links (gRPC, protobuf, absl, prometheus-cpp, PCRE2, …)
# and no network, so the GPU test and benchmark binaries are built here and packed,
# with every shared library they need beyond glibc, libstdc++/libgcc and the CUDA
# runtime and driver, into one ignored folder that travels with the checkout
# (device run: carry ["gpu-bundle"]); tests/gpu/run.sh runs them from there.
#
#   tests/gpu/bundle.sh                    build (build/), pack into gpu-bundle/
#   tests/gpu/bundle.sh --no-build         pack what build/ already holds
#   tests/gpu/bundle.sh --check            pack, then check: every library outside the
#                                          allowed system set resolves inside the
#                                          bundle; each binary starts with the
#                                          bundle's library path (the GPU tests skip
#                                          cleanly without a device)
# Always: everything that travels to the device (the checkout's tracked and untracked,
# not ignored, files, plus the bundle) must fit 60 MiB (the device run takes 64), and
# expects.txt records the CUDA libraries the binaries take from the machine, with the
# versions they were built against here (run.sh's preflight finds each there).
# BUILD_DIR and BUNDLE_DIR override the folders.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${BUNDLE_DIR:-gpu-bundle}
LIMIT=$((60 * 1024 * 1024))  # all that travels: checkout + bundle
# shellcheck source=tests/gpu/libraries.sh
. tests/gpu/libraries.sh
build=1
check=0
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --check) check=1 ;;
    *) echo "bundle.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
# GPU tests (label gpu: kernels, backend, engine, the NCCL and CUDA IPC communicators),
# the CPU emulation of the GPU tile math, the backend seam, and the CLI (engine runs and
# `tandem bench engine`), with the router and workers cluster_gpu_test starts.
TESTS=(cuda_device_test cuda_backend_test attention_gpu_test engine_gpu_test attention_tile_test
       backend_test gpu_transports_test cluster_gpu_test)
BINS=(tandem tandem-router tandem-prefill-worker tandem-decode-worker)
SYSTEM=$SYSTEM_LIBRARIES  # provided by the GPU machine itself (libraries.sh)

if [ ! -f "$BUILD_DIR/build.ninja" ] || ! grep -q "cuda_device_test" "$BUILD_DIR/build.ninja"; then
  [ "$build" = 1 ] || { echo "bundle.sh: $BUILD_DIR has no CUDA build" >&2; exit 1; }
fi
if [ "$build" = 1 ]; then
  BUILD_DIR="$BUILD_DIR" scripts/build.sh "${TESTS[@]}" "${BINS[@]}"
fi

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
paths=()
for t in "${TESTS[@]}"; do paths+=("$BUILD_DIR/tests/$t"); done
for b in "${BINS[@]}"; do paths+=("$BUILD_DIR/bin/$b"); done
for p in "${paths[@]}"; do
  [ -x "$p" ] || { echo "bundle.sh: $p is missing (build it first)" >&2; exit 1; }
  strip --strip-unneeded -o "$OUT/bin/$(basename "$p")" "$p"
  ldd "$p" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if ! [[ "$name" =~ $SYSTEM ]] && [ ! -e "$OUT/lib/$name" ]; then
      cp -L "$path" "$OUT/lib/$name"
    fi
  done
done
printf '%s\n' "${TESTS[@]}" >"$OUT/tests.txt"
git rev-parse --short HEAD >"$OUT/commit.txt" 2>/dev/null || true
# The CUDA libraries the binaries leave to the machine: soname, the version built
# against here, and where it was found here.
for p in "${paths[@]}"; do ldd "$p"; done | awk '$2 == "=>" {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ "$name" =~ $CUDA_LIBRARIES ]] || continue
    if [ "$path" = "not" ]; then
      echo "$name ? not-found-here"
    else
      echo "$name $(library_version "$path") $path"
    fi
  done >"$OUT/expects.txt"
# libcuda.so.1 (the driver) is loaded by cudart at run time, never linked.
grep -q '^libcuda\.so\.1 ' "$OUT/expects.txt" || echo "libcuda.so.1 driver loaded-by-cudart" >>"$OUT/expects.txt"
# What travels is bin/ and lib/ packed with xz (a third of their size); tests/gpu/run.sh
# unpacks them on the GPU machine.
tar -C "$OUT" -cf - bin lib | xz -T0 -6 >"$OUT/packed.tar.xz"
size=$(du -sb --exclude=bin --exclude=lib "$OUT" | cut -f1)
# The checkout travels with it (tracked and untracked files git does not ignore).
checkout=$(git ls-files -z --cached --others --exclude-standard |
  xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total=$((size + checkout))
echo "bundle.sh: $OUT: $(ls "$OUT/bin" | wc -l) binaries, $(ls "$OUT/lib" | wc -l) libraries," \
  "$((size / 1024 / 1024)) MiB packed; with the checkout ($((checkout / 1024 / 1024)) MiB)" \
  "$((total / 1024 / 1024)) MiB travel (limit 60)"
echo "bundle.sh: expects from the machine: $(cut -d' ' -f1,2 "$OUT/expects.txt" | paste -sd, -)"
if [ "$total" -gt "$LIMIT" ]; then
  echo "bundle.sh: FAIL: $total bytes would travel, over 60 MiB (the device run takes 64)" >&2
  rm -rf "$OUT/bin" "$OUT/lib"
  exit 1
fi

if [ "$check" != 1 ]; then
  rm -rf "$OUT/bin" "$OUT/lib"
  exit 0
fi
fail=0
lib=$(cd "$OUT/lib" && pwd)
for b in "$OUT"/bin/*; do
  # With the bundle first on the path, every library that is not the machine's own
  # must come from the bundle (anything else would be missing there).
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      echo "FAIL: $(basename "$b") needs $name: not found"
      fail=1
    elif ! [[ "$name" =~ $SYSTEM ]] && [[ "$path" != "$lib"/* ]]; then
      echo "FAIL: $(basename "$b") takes $name from $path, not from the bundle"
      fail=1
    fi
  done < <(LD_LIBRARY_PATH="$lib" ldd "$b")
done
for t in "${TESTS[@]}"; do
  if ! LD_LIBRARY_PATH="$lib" timeout 300 "$OUT/bin/$t" --gtest_brief=1 >"$OUT/$t.log" 2>&1; then
    echo "FAIL: $t did not pass with the bundle's libraries (log: $OUT/$t.log)"
    fail=1
  fi
done
if ! LD_LIBRARY_PATH="$lib" "$OUT/bin/tandem" --help >/dev/null; then
  echo "FAIL: tandem --help with the bundle's libraries"
  fail=1
fi
if [ "$fail" = 0 ]; then
  echo "bundle.sh: check passed (every binary starts on the bundle's libraries)"
fi
rm -rf "$OUT/bin" "$OUT/lib"
exit "$fail"

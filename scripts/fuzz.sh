#!/usr/bin/env bash
# Builds the GGUF reader's libFuzzer target with clang (build-fuzz/) and runs it
# for FUZZ_SECONDS (default 60) from a seed corpus of the committed GGUF files.
# Fails on any crash, sanitizer report, leak, or single allocation over 256 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${FUZZ_SECONDS:-60}
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 1
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTANDEM_FUZZ=ON -DTANDEM_CUDA=OFF -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF
fi
ninja -C build-fuzz gguf_fuzzer
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp tests/data/*.gguf "$corpus"/
build-fuzz/bin/gguf_fuzzer "$corpus" -max_total_time="$SECONDS_TO_RUN" -malloc_limit_mb=256 \
  -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 2>&1 | tail -n 25
echo "fuzz: ${SECONDS_TO_RUN}s without a crash"

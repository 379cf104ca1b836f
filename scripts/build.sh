#!/usr/bin/env bash
# Configures (once) and builds tandem into build/. Extra arguments go to ninja
# (e.g. a target name). CUDA is used automatically when nvcc is on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$BUILD_DIR" "$@"

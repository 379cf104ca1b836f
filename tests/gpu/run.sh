#!/usr/bin/env bash
# The device check, in one go (for a machine with an NVIDIA GPU and nvcc): builds with
# CUDA into build-gpu/, prints the device, runs every CTest test labelled `gpu`
# (kernels against their CPU references) and prints a short table last.
# Sized to take a few minutes; stops at the first failure with the log above.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON \
    -DTANDEM_BUILD_BENCH=OFF
fi
ninja -C "$BUILD_DIR" cuda_device_test attention_gpu_test attention_tile_test
cd "$BUILD_DIR"
status=0
ctest -L gpu --output-on-failure --timeout 600 | tee gpu-tests.log || status=$?
echo
echo "== tandem GPU check =="
printf "%-60s %s\n" "test" "result"
grep -E "Test +#[0-9]+: " gpu-tests.log | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+ *([A-Za-z*]+).*/\1 \2/' |
  while read -r name result; do printf "%-60s %s\n" "$name" "$result"; done
exit $status

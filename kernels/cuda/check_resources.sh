#!/usr/bin/env bash
# Resource budgets of the CUDA kernels, checked at build time (no GPU needed): every
# kernel compiled for sm_80 and sm_90 must use no local memory — 0 bytes stack frame,
# 0 bytes spill stores and loads, as ptxas reports them. A kernel over budget fails
# the build, naming the kernel and the architecture.
#
#   kernels/cuda/check_resources.sh NVCC SOURCE_DIR STAMP FILE.cu...
set -euo pipefail
nvcc=$1 src=$2 stamp=$3
shift 3
fail=0
for f in "$@"; do
  for arch in 80 90; do
    report=$("$nvcc" -std=c++17 -I"$src" -Xptxas -v -gencode "arch=compute_$arch,code=sm_$arch" \
      -c "$f" -o /dev/null 2>&1) || { echo "$report"; exit 1; }
    kernel=""
    while IFS= read -r line; do
      if [[ "$line" =~ Function\ properties\ for\ ([^ ]+) ]]; then
        kernel=${BASH_REMATCH[1]}
      elif [[ "$line" =~ ([0-9]+)\ bytes\ stack\ frame,\ ([0-9]+)\ bytes\ spill\ stores,\ ([0-9]+)\ bytes\ spill\ loads ]]; then
        if [ "${BASH_REMATCH[1]}" != 0 ] || [ "${BASH_REMATCH[2]}" != 0 ] || [ "${BASH_REMATCH[3]}" != 0 ]; then
          echo "check_resources: $(basename "$f") sm_$arch: $(c++filt "$kernel" 2>/dev/null || echo "$kernel"): $line" >&2
          fail=1
        fi
      fi
    done <<<"$report"
  done
done
[ "$fail" = 0 ] || exit 1
touch "$stamp"

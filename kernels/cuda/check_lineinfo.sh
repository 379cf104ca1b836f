#!/usr/bin/env bash
# Every CUDA object given (*.cu.o) carries line tables for its device code — built with
# -lineinfo, so compute-sanitizer and the profilers name source lines on the GPU
# machine (tests/gpu/run.sh). CTest's cuda_lineinfo_test, CUDA builds only.
#
#   kernels/cuda/check_lineinfo.sh OBJECT...   (or one ;-separated list, as CMake passes)
set -euo pipefail
fail=0 seen=0
IFS=';' read -r -a objects <<<"$*"
for f in "${objects[@]}"; do
  f=${f# }
  [[ "$f" == *.cu.o ]] || continue
  seen=$((seen + 1))
  if ! strings -a "$f" | grep nv_debug_line_sass >/dev/null; then  # (-q would SIGPIPE strings)
    echo "check_lineinfo: $(basename "$f") has no device line table (built without -lineinfo)" >&2
    fail=1
  fi
done
[ "$seen" -gt 0 ] || { echo "check_lineinfo: no CUDA objects given" >&2; exit 1; }
[ "$fail" = 0 ] && echo "check_lineinfo: $seen CUDA objects carry line tables"
exit "$fail"

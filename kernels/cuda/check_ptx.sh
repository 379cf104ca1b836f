#!/usr/bin/env bash
# PTX check, at build time (no GPU needed): every kernel of FILE.cu whose mangled name
# contains PATTERN must contain INSTRUCTION in its PTX for sm_80 and sm_90 — e.g. the
# prefill attention kernels must really use the tensor cores (mma.sync), not a scalar
# fallback the compiler chose. A kernel without it fails the build, named.
#
#   kernels/cuda/check_ptx.sh NVCC SOURCE_DIR STAMP FILE.cu PATTERN INSTRUCTION
set -euo pipefail
nvcc=$1 src=$2 stamp=$3 file=$4 pattern=$5 instruction=$6
fail=0
for arch in 80 90; do
  ptx=$("$nvcc" -std=c++17 -I"$src" -arch="compute_$arch" -ptx "$file" -o -)
  found=$(awk -v pat="$pattern" -v ins="$instruction" '
    /^(\.visible )?\.entry / { name = $NF; sub(/\(.*/, "", name); inside = index(name, pat) > 0;
                               if (inside) { seen[name] = 0; order[++n] = name } }
    inside && index($0, ins) > 0 { seen[name]++ }
    END { for (i = 1; i <= n; ++i) print order[i], seen[order[i]] }' <<<"$ptx")
  if [ -z "$found" ]; then
    echo "check_ptx: $(basename "$file") sm_$arch: no kernel matches '$pattern'" >&2
    fail=1
  fi
  while read -r name count; do
    [ -n "$name" ] || continue
    if [ "$count" = 0 ]; then
      echo "check_ptx: $(basename "$file") sm_$arch: $(c++filt "$name" 2>/dev/null || echo "$name") has no $instruction" >&2
      fail=1
    fi
  done <<<"$found"
done
[ "$fail" = 0 ] || exit 1
touch "$stamp"

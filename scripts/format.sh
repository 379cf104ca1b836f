#!/usr/bin/env bash
# clang-format (Google base, .clang-format) over every tracked C++/CUDA source.
#   scripts/format.sh          reformat in place
#   scripts/format.sh --check  fail if any file is not formatted (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi

#!/usr/bin/env bash
# Lists the Debian/Ubuntu packages that own the shared libraries the given binaries
# load (as ldd resolves them on this machine), one per line, sorted.
#
#   runtime-deps.sh BINARY...                       print the packages
#   runtime-deps.sh --check "PKG PKG ..." BINARY...  exit 1, naming each needed package
#                                                    that the list lacks
#
# Used by the Dockerfiles' builder stages so that a runtime image never misses a
# library. libcuda.so.1 is skipped: the NVIDIA driver provides it on the host (the
# container toolkit mounts it), so a builder without a GPU cannot resolve it.
set -euo pipefail

check=""
if [[ "${1:-}" == "--check" ]]; then
  check=" $2 "
  shift 2
fi
[[ $# -gt 0 ]] || { echo "usage: $0 [--check 'PKG ...'] BINARY..." >&2; exit 2; }

owner() {  # the package owning a library path; merged-/usr systems record either spelling
  local p out
  for p in "$1" "$(readlink -f "$1")" "/usr$1" "${1#/usr}"; do
    out=$(dpkg -S "$p" 2>/dev/null | head -n1 || true)
    if [[ -n "$out" && "$out" != diversion* ]]; then
      echo "${out%%:*}"
      return 0
    fi
  done
  return 1
}

status=0
libs=$(ldd "$@" | awk '$2 == "=>" && $3 == "not" { print "MISSING:" $1; next }
                       $2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
packages=$(
  for lib in $libs; do
    case "$lib" in
      MISSING:libcuda.so.*) ;;
      MISSING:*) echo "runtime-deps: ${lib#MISSING:} is not found by ldd" >&2; echo "!error" ;;
      *) owner "$lib" || { echo "runtime-deps: no package owns $lib" >&2; echo "!error"; } ;;
    esac
  done | sort -u)
if grep -qx '!error' <<<"$packages"; then
  status=1
fi
packages=$(grep -vx '!error' <<<"$packages" || true)

if [[ -n "$check" ]]; then
  for p in $packages; do
    if [[ "$check" != *" $p "* ]]; then
      echo "runtime-deps: the binaries need $p, which the runtime package list lacks" >&2
      status=1
    fi
  done
else
  echo "$packages"
fi
exit $status

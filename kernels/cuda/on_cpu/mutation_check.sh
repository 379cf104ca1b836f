#!/usr/bin/env bash
# Does kernels_on_cpu_test notice a broken kernel? Builds the test once per mutation,
# each a small change to a kernel source (in a copy: the tree is not touched) — a bound,
# an index, a barrier left out, a rounding — and expects every build's test to fail.
# CTest kernels_on_cpu_mutation_test (about 40 s on 2 cores).
#
#   kernels/cuda/on_cpu/mutation_check.sh [BUILD_DIR]     (after a build of BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
BUILD_DIR=$(cd "${1:-build}" && pwd)
ninja -C "$BUILD_DIR" kernels_on_cpu_test >/dev/null
T=$(mktemp -d /tmp/tandem-mutation.XXXXXX)
trap 'rm -rf "$T"' EXIT

# name|file (under kernels/cuda)|the text as it is|the text broken|which occurrence (default:
# the only one)
MUTATIONS=$(
  cat <<'EOF'
split bounds|attention_kernels.cu|const int k_end = min(pos + 1, k_begin + per);|const int k_end = min(pos + 1, k_begin + per - 1);
merge range|attention_kernels.cu|for (int sp = 0; sp < a.max_splits; ++sp) {|for (int sp = 0; sp + 1 < a.max_splits; ++sp) {
softmax rescale|attention_kernels.cu|if (g < G) acc[g][c] *= factor[g];|if (g < G) acc[g][c] *= 1.f;
arg-max shuffle width|ops_kernels.cu|for (int o = 16; o > 0; o >>= 1) best = Better(best, ShuffleBest(best, o));|for (int o = 8; o > 0; o >>= 1) best = Better(best, ShuffleBest(best, o));|1
arg-max last warp|ops_kernels.cu|lane < static_cast<int>(blockDim.x / 32)|lane + 1 < static_cast<int>(blockDim.x / 32)|2
attention: the barrier ending a key tile|attention_kernels.cu|__syncthreads();|;|4
block sum: its second barrier|ops_kernels.cu|__syncthreads();|;|2
KV write: V from K|ops_kernels.cu|Store(cache, type, g.V(block, layer, kvh, d, off), v[e]);|Store(cache, type, g.V(block, layer, kvh, d, off), k[e]);
RoPE pairing|ops_kernels.cu|const int32_t a = halves ? i : 2 * i, b = halves ? i + half : 2 * i + 1;|const int32_t a = halves ? i : 2 * i, b = halves ? i + half - 1 : 2 * i + 1;
gather row|ops_kernels.cu|dst[r * row_words + w] = ok ? src[from * row_words + w] : 0u;|dst[r * row_words + w] = ok ? src[from * row_words + w / 2] : 0u;
bf16 rounding|ops_kernels.cu|out[i] = __float2bfloat16_rn(x[i]);|out[i] = __ushort_as_bfloat16(__float_as_uint(x[i]) >> 16);
grid stride of Scale|ops_kernels.cu|i += int64_t{gridDim.x} * blockDim.x) {|i += int64_t{gridDim.x} * blockDim.x + 1) {|3
EOF
)

# The shim kernels' compile commands and the test's link command, from the build.
compile_of() {
  python3 - "$BUILD_DIR/compile_commands.json" "$1" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("kernels/cuda/on_cpu/" + sys.argv[2]):
        print(e["command"])
PY
}
link=$(ninja -C "$BUILD_DIR" -t commands kernels_on_cpu_test | tail -n 1 | sed 's/^: && //; s/ && :$//')
archive=kernels/libtandem_cuda_kernels_on_cpu.a

# Builds the test with `file` (under kernels/cuda) taken from $T/src into $T/test.
build_with() {
  local file=$1 wrapper=${1%.cu}.cc cmd link_cmd others
  mkdir -p "$T/obj"
  # The wrapper of that kernel file, compiled with the copy first on the include path.
  cmd=$(compile_of "$wrapper")
  cmd=${cmd/ -I/ -I$T/src -I}
  cmd=$(sed -E "s# -o [^ ]+# -o $T/obj/$wrapper.o#" <<<"$cmd")
  if ! (cd "$BUILD_DIR" && eval "$cmd") >"$T/compile.log" 2>&1; then
    cat "$T/compile.log" >&2
    echo "mutation_check: $file no longer compiles" >&2
    exit 1
  fi
  mapfile -t others < <(ar t "$BUILD_DIR/$archive" | grep -v "^$wrapper.o$")
  (cd "$T/obj" && ar x "$BUILD_DIR/$archive" "${others[@]}" && rm -f mutated.a &&
    ar rcs mutated.a "$wrapper.o" "${others[@]}")
  link_cmd=$(sed -E "s# -o [^ ]+# -o $T/test#" <<<"${link//$archive/$T/obj/mutated.a}")
  (cd "$BUILD_DIR" && eval "$link_cmd")
}

# The control: the same route with the sources unchanged must give a passing test.
for f in ops_kernels.cu attention_kernels.cu; do
  mkdir -p "$T/src/kernels/cuda"
  cp "$ROOT/kernels/cuda/$f" "$T/src/kernels/cuda/$f"
  build_with "$f"
  if ! "$T/test" --gtest_brief=1 >"$T/log" 2>&1; then
    cat "$T/log" >&2
    echo "mutation_check: the unmutated $f rebuilt by this script fails the test" >&2
    exit 1
  fi
  rm -rf "$T/src" "$T/obj" "$T/test"
done
echo "control      the unchanged sources, rebuilt this way, pass"

failed_to_notice=()
while IFS='|' read -r name file before after nth; do
  [ -n "$name" ] || continue
  mkdir -p "$T/src/kernels/cuda"
  cp "$ROOT/kernels/cuda/$file" "$T/src/kernels/cuda/$file"
  python3 - "$T/src/kernels/cuda/$file" "$before" "$after" "${nth:-0}" <<'PY'
import sys
path, before, after, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = open(path).read()
n = s.count(before)
if (nth == 0 and n != 1) or n < nth:
    sys.exit(f"mutation_check: '{before}' is not in {path} as MUTATIONS says: update it")
at = -1
for _ in range(max(nth, 1)):
    at = s.index(before, at + 1)
open(path, "w").write(s[:at] + after + s[at + len(before):])
PY
  build_with "$file"
  if "$T/test" --gtest_brief=1 >"$T/log" 2>&1; then
    echo "NOT NOTICED  $name ($file)"
    failed_to_notice+=("$name")
  else
    echo "noticed      $name ($file): $(grep -m 1 -o 'FAILED  \] KernelsOnCpu\.[A-Za-z0-9_]*' "$T/log" | sed 's/FAILED  \] //')"
  fi
  rm -rf "$T/src" "$T/obj" "$T/test"
done <<<"$MUTATIONS"
if [ ${#failed_to_notice[@]} -gt 0 ]; then
  echo "mutation_check: kernels_on_cpu_test missed: ${failed_to_notice[*]}" >&2
  exit 1
fi
echo "mutation_check: every mutation failed the test"

#!/usr/bin/env bash
# The device check, on a bare CUDA machine (the lent H200: CUDA toolkit, driver, no
# Debian libraries, no network). Runs what tests/gpu/bundle.sh packed on the build
# machine — carry ["gpu-bundle"] — and prints a short table last:
#   every test binary of the bundle (GPU kernels against their CPU references; the CPU
#   emulation and backend checks as a control), then compute-sanitizer memcheck and
#   racecheck on the GPU tests where the tool works.
# Writes logs to $OUT (the device run's output folder) or gpu-logs/. Sized for a few
# minutes; every step has its own timeout.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=${BUNDLE_DIR:-gpu-bundle}
LOGS=${OUT:-gpu-logs}
mkdir -p "$LOGS"
if [ ! -f "$BUNDLE/tests.txt" ]; then
  echo "tests/gpu/run.sh: no $BUNDLE/ here: run tests/gpu/bundle.sh on the build machine and carry it" >&2
  exit 2
fi
# bundle.sh packs bin/ and lib/; unpack them next to the logs' machine-local copy.
if [ ! -d "$BUNDLE/bin" ] && [ -f "$BUNDLE/packed.tar.xz" ]; then
  unpacked=$(mktemp -d /tmp/tandem-gpu-bundle.XXXXXX)
  if command -v xz >/dev/null; then
    xz -dc "$BUNDLE/packed.tar.xz" | tar -C "$unpacked" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$BUNDLE/packed.tar.xz" "$unpacked"
  fi || { echo "run.sh: cannot unpack $BUNDLE/packed.tar.xz" >&2; exit 2; }
  cp "$BUNDLE/tests.txt" "$unpacked/"
  cp "$BUNDLE/commit.txt" "$unpacked/" 2>/dev/null || true
  BUNDLE=$unpacked
fi
lib=$(cd "$BUNDLE/lib" && pwd)
# NCCL ships in the toolkit's lib/ on some installs, lib64/ on others.
export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"
# cluster_gpu_test starts the bundle's router and workers.
TANDEM_BIN_DIR=$(cd "$BUNDLE/bin" && pwd)
export TANDEM_BIN_DIR
have_gpu=0
nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
echo "bundle of commit $(cat "$BUNDLE/commit.txt" 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

rows=()
status=0
# One row per run: name, result, gtest counts.
record() {
  local name=$1 log=$2 rc=$3
  local passed skipped failed
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  failed=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | tail -1)
  local result=PASS
  [ "$rc" = 0 ] || { result="FAIL(rc=$rc)"; status=1; }
  # On a GPU machine a skipped test is a test that did not run: not a pass.
  if [ "$have_gpu" = 1 ] && [ "${skipped:-0}" != 0 ]; then
    result=SKIPPED
    status=1
  fi
  rows+=("$(printf '%-44s %-12s passed %-4s skipped %-4s failed %s' "$name" "$result" \
    "${passed:-0}" "${skipped:-0}" "${failed:-0}")")
}
while read -r t; do
  timeout 300 "$BUNDLE/bin/$t" >"$LOGS/$t.log" 2>&1
  record "$t" "$LOGS/$t.log" $?
done <"$BUNDLE/tests.txt"
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    # Small cases only (the sanitizers slow kernels 10-100×): each run ≤ 90 s.
    for t in cuda_device_test attention_gpu_test cuda_backend_test; do
      timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUNDLE/bin/$t" \
        --gtest_filter='*Axpy*:*DecodeBatches*:*WriteKv*:*BadIndices*:*ArgMax*' \
        >"$LOGS/$t.$tool.log" 2>&1
      record "$t ($tool)" "$LOGS/$t.$tool.log" $?
    done
  done
else
  rows+=("compute-sanitizer                            not on PATH: not run")
fi

# The ceilings (torch, when the machine has it) and the engine benchmark on the
# Llama-3-8B shape with random weights, in the same run.
if [ "$have_gpu" = 1 ]; then
  if python3 -c 'import torch' 2>/dev/null; then
    timeout 120 python3 tests/gpu/ceilings.py >"$LOGS/ceilings.log" 2>&1
    rc=$?
    rows+=("$(printf '%-44s %s' "ceilings (torch)" "$(tail -1 "$LOGS/ceilings.log")")")
    [ "$rc" = 0 ] || status=1
  else
    rows+=("ceilings                                     torch not importable: not measured")
  fi
  # Decode at batch 1 and 64, prefill of 2,048 tokens, the prefill line over 128…8,192.
  timeout 300 "$BUNDLE/bin/tandem" bench engine --device cuda --synthetic llama3-8b \
    --repetitions 2 --prompt-tokens 2048 --gen-tokens 64 --batch 64 --batch-prompt 32 \
    --batch-gen 32 --kv-cache-bytes $((16 << 30)) --pp-sweep 128,512,2048,8192 \
    --peak-tflops 989 --json >"$LOGS/bench_llama3_8b.json" 2>"$LOGS/bench_llama3_8b.log"
  rc=$?
  rows+=("$(printf '%-44s rc %s  %s' "bench engine --synthetic llama3-8b" "$rc" \
    "$(head -c 600 "$LOGS/bench_llama3_8b.json")")")
  [ "$rc" = 0 ] || status=1
  # Paged decode attention at batch 32, context 8,192 (GB/s of KV, against the copy
  # ceiling) and prefill attention at 8k causal, head dim 128 (against torch's sdpa).
  for args in "--batch 32 --context 8192" "--prefill 8192"; do
    timeout 120 "$BUNDLE/bin/tandem" bench attention --device cuda $args --json \
      >"$LOGS/bench_attention.log" 2>&1
    rc=$?
    rows+=("$(printf '%-44s rc %s  %s' "bench attention $args" "$rc" \
      "$(tail -1 "$LOGS/bench_attention.log" | head -c 300)")")
    [ "$rc" = 0 ] || status=1
  done
fi

# The KV transports' figures, printed by their tests.
for t in gpu_transports_test cluster_gpu_test; do
  [ -f "$LOGS/$t.log" ] || continue
  while read -r line; do rows+=("  $line"); done < <(grep -E '^(NCCL|CUDA IPC)' "$LOGS/$t.log")
done

echo
echo "== tandem GPU check =="
printf '%s\n' "${rows[@]}"
exit $status

#!/usr/bin/env bash
# The device check, on a bare CUDA machine (the lent H100/H200: CUDA toolkit and driver,
# no Debian libraries, no network, 10 minutes a command, 8 files back). Runs what
# tests/gpu/bundle.sh packed here — carry ["gpu-bundle"] — within one time budget, so
# that whatever happens it leaves its results:
#
#   tests/gpu/run.sh [--budget SECONDS] [PHASE...]   (default 330 s, every phase)
#   tests/gpu/run.sh --list [PHASE...]               the steps, their caps and commands
#   tests/gpu/run.sh --plan FILE [--budget S]        another plan (tests/gpu/run_test.sh)
#
# Phases, in order (a rerun names the phases it repeats; preflight always runs):
#   preflight   (≤ 30 s; stops everything when it fails) the driver, the GPU, where the
#               machine keeps cudart / cuBLASLt / NCCL and their versions against what
#               the bundle expects (expects.txt), the bundle's binaries resolving every
#               library, one smoke kernel
#   ops         the kernel and backend checks against their CPU references, each test
#               in a process of its own (a sticky CUDA error costs one test, not a group)
#   figures     prefill of 2,048 tokens and decode at batch 1 and 64 on the Llama-3-8B
#               shape with bf16 KV; paged decode attention bandwidth; prefill attention;
#               the card's ceilings (torch: GEMM, copy, SDPA) where torch is there
#   pd          the CUDA engine against the CPU engine, batch invariance, graphs against
#               eager, the tensor-core prefill in the engine; the KV transports; a
#               prefill and a decode worker on one GPU over CUDA IPC and over NCCL
#   sanitizers  compute-sanitizer memcheck and racecheck on small cases (prefill
#               included), with whatever time is left
#
# Every step is bounded by its cap and by what is left of the budget (timeout -k, so a
# step that ignores SIGTERM is killed 5 s later), and prints its row the moment it ends:
# phase, step, PASS / FAIL / TIME (cut at its limit) / SKIP (not run), seconds, and the
# figure or the first failure lines. $OUT (else gpu-logs/) receives at most 4 files,
# rewritten after every step: summary.txt (the table), results.json (every row, the
# machine, the library versions, the commit), logs.tgz (every log). Exit 0 only when
# every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SELF=$ROOT/tests/gpu/run.sh
# shellcheck source=tests/gpu/libraries.sh
. "$ROOT/tests/gpu/libraries.sh"

PHASES=(preflight ops figures pd sanitizers)
RESERVE=6  # seconds kept back for the summary and the archive

# --- the plan ----------------------------------------------------------------------
# One step a line: phase|name|cap seconds|command. "@fn args" runs run.sh's own step
# function fn (in a process of its own, like any command).
default_plan() {
  cat <<'EOF'
preflight|preflight|30|@preflight
ops|cuda_device_test|30|@gtest_each cuda_device_test
ops|cuda_backend_test|90|@gtest_each cuda_backend_test
ops|attention_gpu_test|60|@gtest_each attention_gpu_test
ops|cpu_controls|30|@gtest_each attention_tile_test
figures|bench_engine_llama3_8b|150|@bench_engine
figures|bench_decode_attention|40|@bench_attention decode
figures|bench_prefill_attention|40|@bench_attention prefill
figures|ceilings_torch|60|@ceilings
pd|engine_gpu_test|150|@gtest_each engine_gpu_test * ^(cuda.vs.cpu|head_dim|seeded.sampling)
pd|gpu_transports_test|120|@gtest_each gpu_transports_test * ^(NCCL|CUDA.IPC)
pd|cluster_gpu_test|180|@gtest_each cluster_gpu_test * pair:
sanitizers|memcheck_kernels|90|@sanitize memcheck cuda_backend_test *WriteKv*:*BadIndices*:*ArgMax*
sanitizers|memcheck_attention|90|@sanitize memcheck attention_gpu_test *SmallPrefill*:*DecodeBatches*
sanitizers|racecheck_attention|90|@sanitize racecheck attention_gpu_test *SmallPrefill*:*DecodeBatches*
sanitizers|racecheck_kernels|90|@sanitize racecheck cuda_backend_test *ArgMax*:*BadIndices*
EOF
}

# --- step functions (each runs as `run.sh __step fn args`, under the step's timeout) ----
# They read TANDEM_GPU_* from the environment preflight wrote, print FIGURE: lines for
# the summary and FAIL: lines for a failure, and exit non-zero on failure.

# The bundle's binaries with the machine's CUDA libraries and the bundle's own.
bundle_run() {
  LD_LIBRARY_PATH="$TANDEM_GPU_LD" "$TANDEM_GPU_BIN/$1" "${@:2}"
}

step_preflight() {
  local fail=() found=()
  if ! command -v nvidia-smi >/dev/null; then
    fail+=("no NVIDIA driver here (nvidia-smi not on PATH)")
  elif ! nvidia-smi -L >/dev/null 2>&1; then
    fail+=("nvidia-smi sees no GPU: $(nvidia-smi -L 2>&1 | head -n 1)")
  else
    local gpu cuda
    gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
      head -n 1)
    cuda=$(nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -n 1)
    echo "gpu: $gpu; driver's $cuda"
    echo "TANDEM_GPU_MACHINE=\"$gpu, ${cuda#CUDA Version: } (driver)\"" >>"$WORK/env.sh"
  fi
  if [ ${#fail[@]} -gt 0 ]; then  # nothing else can run: say so at once
    printf 'FAIL: %s\n' "${fail[@]}"
    return 1
  fi
  local bundle=${BUNDLE_DIR:-$ROOT/gpu-bundle}
  if [ ! -f "$bundle/packed.tar.xz" ] || [ ! -f "$bundle/tests.txt" ] ||
    [ ! -f "$bundle/expects.txt" ]; then
    fail+=("no bundle at $bundle (run tests/gpu/bundle.sh on the build machine and carry gpu-bundle)")
  else
    local unpacked=$WORK/bundle
    mkdir -p "$unpacked"
    if command -v xz >/dev/null; then
      xz -dc "$bundle/packed.tar.xz" | tar -C "$unpacked" -xf -
    else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle/packed.tar.xz" "$unpacked"
    fi || fail+=("cannot unpack $bundle/packed.tar.xz")
    echo "bundle of commit $(cat "$bundle/commit.txt" 2>/dev/null || echo '?')"
    echo "TANDEM_GPU_BUNDLE_COMMIT=$(cat "$bundle/commit.txt" 2>/dev/null || echo unknown)" \
      >>"$WORK/env.sh"
    # The CUDA libraries the bundle expects from the machine: where each is here.
    local dirs=() name built where
    while read -r name built _; do
      [ -n "$name" ] || continue
      where=$(find_system_library "$name")
      if [ -z "$where" ]; then
        fail+=("$name (built against $built) is not on this machine")
        continue
      fi
      local have
      have=$(library_version "$where")
      # Older than what the bundle was built against: its symbols may be missing
      # (ldd below and the smoke kernel decide; the row says it).
      local note=""
      if [[ "$built" =~ ^[0-9] ]] && [[ "$have" =~ ^[0-9] ]] &&
        [ "$(printf '%s\n%s\n' "$built" "$have" | sort -V | head -n 1)" != "$built" ]; then
        note=", OLDER than"
      fi
      found+=("$name $have at $(dirname "$where") (built against$note $built)")
      dirs+=("$(dirname "$where")")
    done <"$bundle/expects.txt"
    printf 'library: %s\n' "${found[@]}"
    # The driver must run the toolkit the bundle was built with.
    local driver_cuda runtime
    driver_cuda=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1)
    driver_cuda=${driver_cuda#CUDA Version: }
    runtime=$(awk '$1 ~ /^libcudart/ {print $2}' "$bundle/expects.txt" | cut -d. -f1,2)
    if [ -n "$driver_cuda" ] && [ -n "$runtime" ] &&
      [ "$(printf '%s\n%s\n' "$runtime" "$driver_cuda" | sort -V | head -n 1)" != "$runtime" ]; then
      fail+=("the driver runs CUDA $driver_cuda, the bundle was built with $runtime")
    fi
    local ld=$unpacked/lib
    for d in $(printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++'); do ld+=":$d"; done
    {
      echo "TANDEM_GPU_BIN=$unpacked/bin"
      echo "TANDEM_GPU_LD=$ld"
      echo "TANDEM_BIN_DIR=$unpacked/bin"
      printf 'TANDEM_GPU_LIBRARIES="%s"\n' "$(printf '%s; ' "${found[@]}")"
    } >>"$WORK/env.sh"
    # Every binary resolves every library with that path.
    for b in "$unpacked"/bin/*; do
      local missing
      missing=$(LD_LIBRARY_PATH="$ld" ldd "$b" 2>&1 | awk '/not found/ {print $1}' | paste -sd, -)
      [ -z "$missing" ] || fail+=("$(basename "$b") cannot find $missing")
    done
    # One smoke kernel (and the device count) through the bundle's own test.
    if [ ${#fail[@]} -eq 0 ]; then
      local smoke
      smoke=$(LD_LIBRARY_PATH="$ld" timeout -k 2 15 "$unpacked/bin/cuda_device_test" 2>&1)
      if ! grep -q '\[  PASSED  \]' <<<"$smoke" || grep -q '\[  SKIPPED \]' <<<"$smoke"; then
        fail+=("the smoke kernel did not run: $(grep -m 2 -E 'Failure|SKIPPED|error|Error' <<<"$smoke" | paste -sd' ' -)")
      fi
    fi
  fi
  if [ ${#fail[@]} -gt 0 ]; then
    printf 'FAIL: %s\n' "${fail[@]}"
    return 1
  fi
  echo "FIGURE: ${found[*]:0:4}"
}

# Each test of a bundle binary in a process of its own (optionally only those the
# gtest filter $2 selects); lines matching $3 become figures.
step_gtest_each() {
  local bin=$1 filter=${2:-*} figures=${3:-}
  local tests=() suite="" line
  while IFS= read -r line; do
    if [[ "$line" =~ ^([A-Za-z0-9_]+)\.$ ]]; then
      suite=${BASH_REMATCH[1]}
    elif [[ "$line" =~ ^\ \ ([A-Za-z0-9_]+) ]] && [[ "${BASH_REMATCH[1]}" != DISABLED_* ]]; then
      tests+=("$suite.${BASH_REMATCH[1]}")
    fi
  done < <(bundle_run "$bin" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null)
  if [ ${#tests[@]} -eq 0 ]; then
    echo "FAIL: $bin lists no tests (does it start? $(bundle_run "$bin" --gtest_list_tests 2>&1 | head -n 1))"
    return 1
  fi
  local passed=0 failed=() skipped=() unrun=0 t left out rc
  for t in "${tests[@]}"; do
    # Within the step's own limit, with room for the kill and the closing line.
    left=$((TANDEM_STEP_DEADLINE - $(date +%s) - 5))
    if [ "$left" -lt 2 ]; then
      unrun=$((unrun + 1))
      continue
    fi
    out=$(timeout -k 2 "$left" env LD_LIBRARY_PATH="$TANDEM_GPU_LD" "$TANDEM_GPU_BIN/$bin" \
      --gtest_filter="$t" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    if [ -n "$figures" ]; then
      grep -E "$figures" <<<"$out" | sed 's/^/FIGURE: /'
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      failed+=("$t (cut at its time)")
    elif [ "$rc" -gt 128 ]; then
      failed+=("$t (killed by signal $((rc - 128)))")
    elif [ "$rc" -ne 0 ]; then
      failed+=("$t")
    elif grep -q '\[  SKIPPED \] 1 test' <<<"$out"; then
      skipped+=("$t")  # on a GPU machine a skipped test did not run: not a pass
    elif ! grep -q '\[  PASSED  \] 1 test\.' <<<"$out"; then
      failed+=("$t (did not run)")  # a filter matching nothing passes vacuously
    else
      passed=$((passed + 1))
    fi
    if [ "$rc" -ne 0 ]; then
      grep -m 3 -E 'Failure|error|Error|Expected|Which is|Value of' <<<"$out" |
        sed "s/^/FAIL: $t: /"
    fi
  done
  echo "FIGURE: $passed/${#tests[@]} passed${failed:+; failed: ${failed[*]}}${skipped:+; skipped: ${skipped[*]}}$([ "$unrun" -gt 0 ] && echo "; $unrun not run (step time)")"
  [ ${#failed[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ] && [ "$unrun" -eq 0 ]
}

# Runs the Python on stdin over the JSON file $1 to print the figures; without python3
# (or if it fails) the JSON itself is the figure, so a benchmark that ran is not lost.
figures_or_json() {
  local script
  script=$(cat)
  if ! command -v python3 >/dev/null || ! python3 -c "$script" "$1"; then
    echo "FIGURE: $(tr -d '\n' <"$1" | head -c 600)"
  fi
}

# The engine on the Llama-3-8B shape (random weights filled on the machine) with bf16
# KV, the GPU targets' cache type: prefill of 2,048 tokens (and the prefill line over
# 512…8,192), decode at batch 1 and at batch 64.
step_bench_engine() {
  bundle_run tandem bench engine --device cuda --synthetic llama3-8b --kv-dtype bf16 \
    --repetitions 2 --prompt-tokens 2048 --gen-tokens 64 --batch 64 --batch-prompt 32 \
    --batch-gen 32 --kv-cache-bytes $((16 << 30)) --pp-sweep 512,2048,8192 --peak-tflops 989 \
    --json >"$WORK/bench_engine.json" || return 1
  cat "$WORK/bench_engine.json"
  figures_or_json "$WORK/bench_engine.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
pp = j["pp_tokens_per_s"]
tflops = j["pp_gflops"] / 1e3
gb = j["tg_tokens_per_s"] * j["weight_mb_read_per_token"] / 1e3
fit = j.get("pp_fit") or {}
print(f"FIGURE: kv {j['kv_dtype']}; prefill 2048: {pp:.0f} tok/s = {tflops:.0f} TFLOP/s "
      f"({100 * tflops / 989:.0f}% of 989); line fit {fit.get('tokens_per_s', 0):.0f} tok/s; "
      f"decode b1 {j['tg_tokens_per_s']:.1f} tok/s ({gb:.0f} GB/s of weights); "
      f"b64 {j['batch_s_tg']:.0f} tok/s")
PY
}

# tandem bench attention: paged decode (batch 32 × 8,192 keys, bf16 KV: GB/s of KV) or
# prefill (8,192 tokens causal, head dim 128: TFLOP/s).
step_bench_attention() {
  local args=(--batch 32 --context 8192)
  [ "$1" = prefill ] && args=(--prefill 8192)
  bundle_run tandem bench attention --device cuda "${args[@]}" --kv-dtype bf16 --json \
    >"$WORK/bench_attention_$1.json" || return 1
  cat "$WORK/bench_attention_$1.json"
  figures_or_json "$WORK/bench_attention_$1.json" <<'PY'
import json, sys
j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
if j["case"] == "prefill":
    print(f"FIGURE: prefill attention {j['context']} causal d{j['head_dim']}: "
          f"{j['median_ms']:.2f} ms = {j['tflops']:.0f} TFLOP/s")
else:
    print(f"FIGURE: decode attention b{j['batch']} x {j['context']} {j['kv_dtype']}: "
          f"{j['median_ms']:.3f} ms = {j['kv_gb_per_s']:.0f} GB/s of KV")
PY
}

# The card's ceilings through torch (never with the bundle's libraries on the path).
step_ceilings() {
  if ! python3 -c 'import torch' 2>/dev/null; then
    echo "FIGURE: torch not importable here: no ceilings"
    return 0
  fi
  python3 "$ROOT/tests/gpu/ceilings.py" | tee "$WORK/ceilings.txt" || return 1
  echo "FIGURE: $(tail -n 1 "$WORK/ceilings.txt")"
}

# compute-sanitizer TOOL over the tests of BIN that FILTER selects.
step_sanitize() {
  local tool=$1 bin=$2 filter=$3 cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ ! -x "$cs" ]; then
    echo "FAIL: compute-sanitizer is not on this machine"
    return 3
  fi
  # The bundle's libraries for the target only (through env, which execs it).
  "$cs" --tool "$tool" --error-exitcode 9 --target-processes all \
    env LD_LIBRARY_PATH="$TANDEM_GPU_LD" "$TANDEM_GPU_BIN/$bin" --gtest_filter="$filter" \
    >"$WORK/sanitize.out" 2>&1
  local rc=$?
  cat "$WORK/sanitize.out"
  echo "FIGURE: $(grep -m 1 'ERROR SUMMARY\|RACECHECK SUMMARY' "$WORK/sanitize.out" || echo 'no summary')"
  grep -m 3 -E '^========= (Invalid|Race|Error|.*hazard)' "$WORK/sanitize.out" | sed 's/^/FAIL: /'
  return "$rc"
}

# --- the summary ---------------------------------------------------------------------
json_string() {  # a JSON string literal of $1
  local s
  s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/ }
  s=${s//$'\r'/ }
  s=${s//$'\n'/ }
  printf '"%s"' "$s"
}

ROWS_JSON=()
write_results() {
  {
    printf '{"commit": %s, "bundle_commit": %s, "date": %s, "machine": %s,\n' \
      "$(json_string "$COMMIT")" "$(json_string "${TANDEM_GPU_BUNDLE_COMMIT:-}")" \
      "$(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$(json_string "${TANDEM_GPU_MACHINE:-}")"
    printf ' "libraries": %s, "budget_s": %s, "elapsed_s": %s, "running": %s,\n' \
      "$(json_string "${TANDEM_GPU_LIBRARIES:-}")" "$BUDGET" "$(($(date +%s) - START))" \
      "$(json_string "${RUNNING:-}")"
    printf ' "rows": [\n'
    local i
    for i in "${!ROWS_JSON[@]}"; do
      printf '  %s%s\n' "${ROWS_JSON[$i]}" "$([ "$i" -lt $((${#ROWS_JSON[@]} - 1)) ] && echo ,)"
    done
    printf ' ]}\n'
  } >"$OUT/results.json.tmp" && mv "$OUT/results.json.tmp" "$OUT/results.json"
}

archive_logs() {
  tar -C "$LOGS" -czf "$OUT/logs.tgz.tmp" . 2>/dev/null && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
}

COUNT_PASS=0 COUNT_OTHER=0
row() {  # row PHASE STEP RESULT SECONDS TEXT
  local text=${5//$'\n'/; }
  [ ${#text} -le 400 ] || text="${text:0:397}..."
  printf '%-10s %-26s %-5s %4ss  %s\n' "$1" "$2" "$3" "$4" "$text" | tee -a "$OUT/summary.txt"
  ROWS_JSON+=("{\"phase\": $(json_string "$1"), \"step\": $(json_string "$2"), \"result\": $(json_string "$3"), \"seconds\": $4, \"text\": $(json_string "$5")}")
  if [ "$3" = PASS ]; then COUNT_PASS=$((COUNT_PASS + 1)); else COUNT_OTHER=$((COUNT_OTHER + 1)); fi
  write_results
  archive_logs
}

# --- main ----------------------------------------------------------------------------
if [ "${1:-}" = __step ]; then  # a step function, in its own process
  shift
  # shellcheck disable=SC1091
  [ -f "$WORK/env.sh" ] && . "$WORK/env.sh"
  "step_$1" "${@:2}"
  exit $?
fi

BUDGET=330
PLAN=""
LIST=0
WANT=()
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --budget=*) BUDGET=${1#*=}; shift ;;
    --plan) PLAN=$2; shift 2 ;;
    --list) LIST=1; shift ;;
    -h | --help) sed -n '2,33p' "$SELF"; exit 0 ;;
    *)
      if [[ " ${PHASES[*]} " == *" $1 "* ]]; then
        WANT+=("$1")
        shift
      else
        echo "run.sh: unknown argument '$1' (phases: ${PHASES[*]})" >&2
        exit 2
      fi
      ;;
  esac
done
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "run.sh: --budget takes whole seconds" >&2; exit 2; }

plan_lines() {
  if [ -n "$PLAN" ]; then cat "$PLAN"; else default_plan; fi | grep -v '^[[:space:]]*\(#\|$\)'
}
wanted() {  # wanted PHASE: preflight always; the rest as named (all when none)
  [ "$1" = preflight ] || [ ${#WANT[@]} -eq 0 ] || [[ " ${WANT[*]} " == *" $1 "* ]]
}

if [ "$LIST" = 1 ]; then
  plan_lines | while IFS='|' read -r phase name cap command; do
    wanted "$phase" && printf '%-10s %-26s %4ss  %s\n' "$phase" "$name" "$cap" "$command"
  done
  exit 0
fi

START=$(date +%s)
DEADLINE=$((START + BUDGET))
OUT=${OUT:-$ROOT/gpu-logs}
mkdir -p "$OUT"
rm -f "$OUT/summary.txt" "$OUT/results.json" "$OUT/logs.tgz"
WORK=$(mktemp -d /tmp/tandem-gpu-check.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$LOGS"
: >"$WORK/env.sh"
export WORK
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat gpu-bundle/commit.txt 2>/dev/null || echo unknown)

echo "== tandem GPU check · commit $COMMIT · budget ${BUDGET}s · $(date -u +%Y-%m-%dT%H:%M:%SZ) ==" |
  tee "$OUT/summary.txt"
printf '%-10s %-26s %-5s %5s  %s\n' phase step result secs "figure / first failure" |
  tee -a "$OUT/summary.txt"

# Stopped from outside (SIGTERM, SIGINT, SIGHUP): the step in flight gets its row and
# its log goes into the archive before the script ends.
RUNNING="" STEP_PID=""
on_signal() {
  [ -z "$STEP_PID" ] || kill -KILL -- "-$STEP_PID" "$STEP_PID" 2>/dev/null
  if [ -n "$RUNNING" ]; then
    row "${RUNNING%% *}" "$(cut -d' ' -f2 <<<"$RUNNING")" FAIL "$(($(date +%s) - begin))" \
      "the check was stopped from outside while this step ran"
  fi
  echo "== stopped from outside after $(($(date +%s) - START))s ==" | tee -a "$OUT/summary.txt"
  RUNNING=""
  write_results
  archive_logs
  exit 143
}
trap on_signal TERM INT HUP

stopped=""
while IFS='|' read -r phase name cap command <&3; do
  wanted "$phase" || continue
  if [ -n "$stopped" ]; then
    row "$phase" "$name" SKIP 0 "$stopped"
    continue
  fi
  left=$((DEADLINE - $(date +%s) - RESERVE))
  if [ "$left" -lt 3 ]; then
    row "$phase" "$name" SKIP 0 "the budget is spent"
    continue
  fi
  limit=$((cap < left ? cap : left))
  log="$LOGS/$phase.$name.log"
  begin=$(date +%s)
  RUNNING="$phase $name (started $((begin - START))s in, limit ${limit}s)"
  write_results
  # In the background, so that a signal to the script runs its trap at once (bash
  # defers traps until a foreground command ends); timeout leads its own process group.
  if [[ "$command" == @* ]]; then
    read -r -a words <<<"${command#@}"
    TANDEM_STEP_DEADLINE=$((begin + limit)) timeout -k 5 "$limit" \
      bash "$SELF" __step "${words[@]}" >"$log" 2>&1 &
  else
    TANDEM_STEP_DEADLINE=$((begin + limit)) timeout -k 5 "$limit" bash -c "$command" >"$log" 2>&1 &
  fi
  STEP_PID=$!
  wait "$STEP_PID"
  rc=$?
  STEP_PID=
  RUNNING=""
  secs=$(($(date +%s) - begin))
  figure=$(grep '^FIGURE: ' "$log" | sed 's/^FIGURE: //' | paste -sd'\t' - | sed 's/\t/; /g')
  failure=$(grep '^FAIL: ' "$log" | sed 's/^FAIL: //' | head -n 4 | paste -sd'\t' - | sed 's/\t/; /g')
  [ -n "$failure" ] || failure=$(grep -v '^FIGURE: ' "$log" | tail -n 2 | paste -sd' ' -)
  if [ "$rc" -eq 0 ]; then
    row "$phase" "$name" PASS "$secs" "$figure"
  elif { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$secs" -ge $((limit - 1)) ]; then
    row "$phase" "$name" TIME "$secs" "cut at ${limit}s${failure:+; $failure}${figure:+; $figure}"
  elif [ "$rc" -gt 128 ]; then
    row "$phase" "$name" FAIL "$secs" \
      "killed by signal $((rc - 128))${failure:+: $failure}${figure:+; $figure}"
  else
    row "$phase" "$name" FAIL "$secs" "rc $rc${failure:+: $failure}${figure:+; $figure}"
  fi
  if [ "$phase" = preflight ] && [ "$rc" -ne 0 ]; then
    stopped="preflight failed"
  fi
  # What preflight found (the bundle's path, the libraries) for the steps after it.
  set -a
  # shellcheck disable=SC1091
  . "$WORK/env.sh"
  set +a
done 3< <(plan_lines)

elapsed=$(($(date +%s) - START))
echo "== $((COUNT_PASS + COUNT_OTHER)) steps: $COUNT_PASS passed, $COUNT_OTHER not · ${elapsed}s of ${BUDGET}s ==" |
  tee -a "$OUT/summary.txt"
write_results
archive_logs
rm -rf "$WORK"
[ "$COUNT_OTHER" -eq 0 ] && [ "$COUNT_PASS" -gt 0 ]

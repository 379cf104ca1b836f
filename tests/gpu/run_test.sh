#!/usr/bin/env bash
# tests/gpu/run.sh checked without a GPU (CTest gpu_run_script_test): its budget logic
# with fake steps, its step functions with stand-ins for the bundle's binaries, and the
# real script on this machine.
#   1. a step that hangs (and ignores SIGTERM) is cut at its cap, killed 5 s later, and
#      the next phase still runs and prints;
#   2. a hang whose cap outlasts the budget is cut at the budget; the next phase prints
#      a SKIP row and the script ends within the budget;
#   3. a failed preflight stops the rest, each remaining step printing SKIP;
#   4. @gtest_each runs every test in its own process: a failing, a crashing, a
#      vacuous (no test ran) and a skipped test fail the step (a skip on a GPU machine is
#      a test that did not run), the others' figure lines reach the row; and a real test
#      binary passes; a step that crashes is a failure, not a timeout; a TERM to the
#      script gives the step in flight its row, kills it, and leaves the files whole;
#   5. @bench_engine and @bench_attention call tandem with bf16 KV on the Llama-3-8B
#      shape and turn its JSON into the row's figures;
#   6. here (no GPU): the default run exits non-zero within 30 s, summary.txt names the
#      preflight failure in one line, results.json parses, and $OUT holds at most 4 files.
#
#   tests/gpu/run_test.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-${BUILD_DIR:-build}}
RUN=tests/gpu/run.sh
T=$(mktemp -d /tmp/tandem-run-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then
    echo "ok   $1"
  else
    echo "FAIL $1" >&2
    failures=$((failures + 1))
  fi
}
row_of() { grep -E "^$1 +$2 " "$3"; }  # the summary row of PHASE STEP in FILE

# --- 1. a hang cut at its cap; the next phase runs -----------------------------------
cat >"$T/plan1" <<'EOF'
preflight|ok|10|true
ops|hang|3|trap '' TERM; sleep 60
figures|after|10|echo "FIGURE: after ran"
EOF
start=$SECONDS
OUT=$T/out1 $RUN --plan "$T/plan1" --budget 60 >"$T/log1" 2>&1
rc=$?
took=$((SECONDS - start))
s=$T/out1/summary.txt
check "1: exits non-zero" test "$rc" -ne 0
check "1: the hang is TIME, cut at 3s" bash -c "grep -qE '^ops +hang +TIME .*cut at 3s' '$s'"
check "1: the next phase ran and printed" bash -c "grep -qE '^figures +after +PASS .*after ran' '$s'"
check "1: killed within cap + 5 s grace (took ${took}s)" test "$took" -le 14

# --- 2. a hang longer than the budget ---------------------------------------------------
cat >"$T/plan2" <<'EOF'
preflight|ok|10|true
ops|hang|100|sleep 100
figures|after|10|echo "FIGURE: after ran"
EOF
start=$SECONDS
OUT=$T/out2 $RUN --plan "$T/plan2" --budget 14 >"$T/log2" 2>&1
took=$((SECONDS - start))
s=$T/out2/summary.txt
check "2: the hang is cut at the budget (less the reserve)" \
  bash -c "grep -qE '^ops +hang +TIME .*cut at [0-9]+s' '$s'"
check "2: the next phase prints a SKIP row" bash -c "grep -qE '^figures +after +SKIP .*budget' '$s'"
check "2: ends within the budget (took ${took}s of 14)" test "$took" -le 15
check "2: the closing line" bash -c "grep -q '3 steps: 1 passed, 2 not' '$s'"

# --- 3. a failed preflight stops the rest -------------------------------------------------
cat >"$T/plan3" <<'EOF'
preflight|preflight|10|echo "FAIL: no driver here"; exit 1
ops|a|10|true
pd|b|10|true
EOF
OUT=$T/out3 $RUN --plan "$T/plan3" >"$T/log3" 2>&1
rc=$?
s=$T/out3/summary.txt
check "3: exits non-zero" test "$rc" -ne 0
check "3: one row names the failure" bash -c "grep -qE '^preflight +preflight +FAIL .*no driver here' '$s'"
check "3: the rest are SKIP" bash -c "[ \$(grep -cE 'SKIP .*preflight failed' '$s') = 2 ]"

# --- 4. @gtest_each -------------------------------------------------------------------------
mkdir -p "$T/bin"
cat >"$T/bin/fake_test" <<'EOF'
#!/usr/bin/env bash
case "$*" in
  *--gtest_list_tests*) printf 'Fake.\n  Passes\n  Fails\n  Skips\n  Vacuous\n  Crashes\n  DISABLED_Never\n' ;;
  *Fake.Passes*) echo "figure line: 42 GB/s"; echo "[  PASSED  ] 1 test." ;;
  *Fake.Fails*) echo "x.cc:1: Failure"; echo "Expected equality of these values"; exit 1 ;;
  *Fake.Skips*) echo "[  SKIPPED ] 1 test, listed below:" ;;
  *Fake.Vacuous*) echo "[  PASSED  ] 0 tests." ;;
  *Fake.Crashes*) kill -SEGV $$ ;;
  *) echo "fake_test: unexpected $*"; exit 3 ;;
esac
EOF
chmod +x "$T/bin/fake_test"
cp "$BUILD_DIR/tests/attention_tile_test" "$T/bin/"
# A preflight that points the steps at the stand-ins instead of an unpacked bundle.
cat >"$T/plan4" <<EOF
preflight|env|10|printf 'TANDEM_GPU_BIN=$T/bin\nTANDEM_GPU_LD=\n' >>"\$WORK/env.sh"
ops|fake|30|@gtest_each fake_test * ^figure.line
ops|real|60|@gtest_each attention_tile_test
EOF
OUT=$T/out4 $RUN --plan "$T/plan4" >"$T/log4" 2>&1
s=$T/out4/summary.txt
check "4: failing, crashing, vacuous and skipped tests fail the step" \
  bash -c "grep -qE '^ops +fake +FAIL .*1/5 passed; failed: Fake.Fails Fake.Vacuous \(did not run\) Fake.Crashes \(killed by signal 11\); skipped: Fake.Skips' '$s'"
check "4: the failure's first lines reach the row" \
  bash -c "grep -qE '^ops +fake .*Fake.Fails: x.cc:1: Failure' '$s'"
check "4: a passing test's figure reaches the row" bash -c "grep -qE '^ops +fake .*42 GB/s' '$s'"
n=$("$BUILD_DIR/tests/attention_tile_test" --gtest_list_tests | grep -c '^  ')
check "4: a real binary, each of its $n tests alone, passes" \
  bash -c "grep -qE '^ops +real +PASS .*$n/$n passed' '$s'"

# --- 4b. a crash is a failure, not a timeout; a stop from outside keeps the results ------
cat >"$T/plan7" <<'EOF'
preflight|ok|10|true
ops|crash|30|kill -SEGV $$
pd|long|60|sleep 37
EOF
OUT=$T/out7 $RUN --plan "$T/plan7" >"$T/log7" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q '^ops  *crash' "$T/out7/summary.txt" 2>/dev/null && break; sleep 0.2; done
sleep 2
kill -TERM "$pid"
wait "$pid"
rc=$?
s=$T/out7/summary.txt
check "4b: a crash is FAIL, killed by signal 11" \
  bash -c "grep -qE '^ops +crash +FAIL .*killed by signal 11' '$s'"
check "4b: stopped from outside: exit 143" test "$rc" -eq 143
check "4b: the step in flight gets its row" \
  bash -c "grep -qE '^pd +long +FAIL .*stopped from outside' '$s'"
check "4b: and its process is gone" bash -c "sleep 0.5; ! pgrep -f 'sleep 3[7]' >/dev/null"
check "4b: results.json parses, nothing left running" python3 -c "
import json; j = json.load(open('$T/out7/results.json')); assert j['running'] == '', j
assert [r['result'] for r in j['rows']] == ['PASS', 'FAIL', 'FAIL'], j['rows']"
check "4b: the archive holds the stopped step's log" bash -c "tar tzf '$T/out7/logs.tgz' | grep -q pd.long.log"

# --- 5. the benchmark steps -------------------------------------------------------------------
cat >"$T/bin/tandem" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_ARGS"
kv=f32
[[ " $* " == *" --kv-dtype bf16 "* ]] && kv=bf16
case "$*" in
  "bench engine"*)
    echo "{\"pp_tokens_per_s\": 20000, \"pp_gflops\": 321000, \"tg_tokens_per_s\": 150.5,"
    echo " \"weight_mb_read_per_token\": 16060, \"batch_s_tg\": 5000, \"kv_dtype\": \"$kv\","
    echo " \"pp_fit\": {\"tokens_per_s\": 21000}}" ;;
  "bench attention"*--prefill*)
    echo "{\"case\": \"prefill\", \"context\": 8192, \"head_dim\": 128, \"median_ms\": 2.5, \"tflops\": 440}" ;;
  "bench attention"*)
    echo "{\"case\": \"decode\", \"batch\": 32, \"context\": 8192, \"kv_dtype\": \"$kv\", \"median_ms\": 0.5, \"kv_gb_per_s\": 2100}" ;;
  *) exit 3 ;;
esac
EOF
chmod +x "$T/bin/tandem"
cat >"$T/plan5" <<EOF
preflight|env|10|printf 'TANDEM_GPU_BIN=$T/bin\nTANDEM_GPU_LD=\n' >>"\$WORK/env.sh"
figures|engine|30|@bench_engine
figures|decode|30|@bench_attention decode
figures|prefill|30|@bench_attention prefill
EOF
FAKE_ARGS=$T/args OUT=$T/out5 $RUN --plan "$T/plan5" >"$T/log5" 2>&1
s=$T/out5/summary.txt
check "5: the engine bench runs the Llama-3-8B shape with bf16 KV on the GPU" \
  bash -c "grep -qE 'bench engine --device cuda --synthetic llama3-8b --kv-dtype bf16' '$T/args'"
check "5: its figures (321 TFLOP/s = 32% of 989, 2417 GB/s of weights)" \
  bash -c "grep -qE '^figures +engine +PASS .*kv bf16; prefill 2048: 20000 tok/s = 321 TFLOP/s \(32% of 989\).*decode b1 150.5 tok/s \(2417 GB/s of weights\); b64 5000 tok/s' '$s'"
check "5: decode attention in GB/s of bf16 KV" \
  bash -c "grep -qE '^figures +decode +PASS .*b32 x 8192 bf16: 0.500 ms = 2100 GB/s of KV' '$s'"
check "5: prefill attention in TFLOP/s" \
  bash -c "grep -qE '^figures +prefill +PASS .*8192 causal d128: 2.50 ms = 440 TFLOP/s' '$s'"

# --- 6. the real thing, here --------------------------------------------------------------------
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "skip 6: this machine has a GPU"
else
  start=$SECONDS
  OUT=$T/out6 $RUN >"$T/log6" 2>&1
  rc=$?
  took=$((SECONDS - start))
  s=$T/out6/summary.txt
  check "6: exits non-zero" test "$rc" -ne 0
  check "6: within 30 s (took ${took}s)" test "$took" -le 30
  check "6: summary.txt names the preflight failure in one line" \
    bash -c "[ \$(grep -cE '^preflight +preflight +FAIL .*no NVIDIA driver' '$s') = 1 ]"
  check "6: at most 4 files in \$OUT" bash -c "[ \$(ls -A '$T/out6' | wc -l) -le 4 ]"
  check "6: results.json parses, one row a step" python3 -c "
import json, sys
j = json.load(open('$T/out6/results.json'))
rows = j['rows']
assert rows[0]['step'] == 'preflight' and rows[0]['result'] == 'FAIL', rows[0]
assert all(r['result'] == 'SKIP' for r in rows[1:]), rows
assert len(rows) == int(sys.argv[1]), len(rows)
" "$($RUN --list | wc -l)"
fi

if [ "$failures" -ne 0 ]; then
  echo "run_test: $failures check(s) failed; logs:" >&2
  for f in "$T"/log* "$T"/out*/summary.txt; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
fi
echo "run_test: all checks passed"

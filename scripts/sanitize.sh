#!/usr/bin/env bash
# The sanitizer suites: unit and in-process integration tests built with clang under
# ASan+UBSan (build-san/, which also holds the fuzzers of scripts/fuzz.sh), and the
# concurrent code that does not run inside gRPC — the engine's scheduler and thread, the
# router's request state machine and worker pool, the HTTP server, both workers joined
# in one process, the stream outbox behind a fake reactor, the peer KV receiver with
# its staging pool and the fake communicator — under TSan (build-tsan/). Any report fails the test that triggered
# it (no recovery, leaks included); zero reports is the bar. The CUDA backend is off.
#
# Not under TSan: code driven by gRPC's threads (the KV sender and receiver services,
# rpc_server). Debian's gRPC and abseil are not built with TSan, so every callback
# gRPC runs races, to TSan, with gRPC's own (invisible) synchronisation; those run
# under ASan+UBSan here, and what they hand to other threads (the outbox, the peer
# receiver) runs under TSan in tests that drive it without gRPC. tests/tsan.supp says what is suppressed and why.
#
#   scripts/sanitize.sh               both suites
#   scripts/sanitize.sh asan|tsan     one
#   scripts/sanitize.sh --configure   only configure build-san (scripts/fuzz.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

# ASan+UBSan: everything that runs in one process (the cluster tests spawn the
# Release binaries of build/, so they are TSan's and the soak's business, not these).
# The CUDA kernels on the CPU shim are among them: ASan then checks every host-memory
# access the kernels make, as compute-sanitizer's memcheck would on a device.
# The longest first (run_suite runs two at a time).
ASAN_TESTS=(engine_test kernels_on_cpu_test kernels_cpu_test router_test util_test model_test
            hf_directory_test tokenizer_test jinja_test chat_template_test kv_test
            metrics_test http_server_test rpc_server_test transport_choice_test
            worker_fault_test peer_transport_test stream_outbox_test peer_kv_receiver_test
            grammar_test cuda_on_cpu_test)
# TSan: the tests whose code runs on several threads at once, outside gRPC (above).
TSAN_TESTS=(engine_test router_test http_server_test worker_fault_test stream_outbox_test
            peer_kv_receiver_test)

# Left out under the sanitizers (10-30x slower there): engine_test's full-model numerics
# (tests/full_model_numerics.txt), which the Release suite runs, and the peer-transport
# runs of many full requests at once, whose reservations' leases the slowdown lets
# expire. The engine's scheduling, reservation and failure paths, the draft model's
# cache against a fresh one and its freeing on a failed pass, the block invariants
# through rejected, preempted and cancelled drafts (by prompt lookup; the same walk with
# a draft model is Release-only, 3 min under ASan) and every transport fault test stay in;
# the two longest walks take fewer rounds under a sanitizer (engine_test_util.h
# kSanitized: half the requests, 8 rounds of 14), 5 min → 1 min under ASan.
# Under TSan also the one test that asserts a rate (2,000 streams concurrent at once),
# which TSan's slowdown breaks, and engine_test's long scheduling walks (6 min there):
# they run on the same threads — the engine's compute pool — as the shorter tests TSan
# keeps, only for more steps, and ASan runs them.
declare -A GTEST_FILTER=(
  [engine_test]="-$(grep -v '^#' tests/full_model_numerics.txt | paste -sd:)"
  [peer_transport_test]="-PeerTransportTest.AnswersLikeOneEngineOverThePeerTransport:PeerTransportTest.ManyConcurrentRequestsPairInDescriptorOrder"
)
declare -A TSAN_FILTER=(
  [router_test]="-RouterRequestTest.ThousandsOfConcurrentStreamsAddNoThread"
  [engine_test]="${GTEST_FILTER[engine_test]}:SpeculativeTest.BlocksStayConsistentThroughRejectionPreemptionAndCancel:SpeculativeTest.DraftProposalsEqualAFreshDraftsAfterAnyHistory:SpeculativeTest.ARequestCanOptOut:EngineTest.TheLowerPriorityGivesWayWhenMemoryRunsOut:EngineTest.PrefillHereDecodeThereGivesTheSameTokens:EngineTest.ShortPromptIsNotStuckBehindALongOne"
)

if ! command -v clang++ >/dev/null; then
  echo "sanitize: clang++ not found (scripts/setup.sh installs it)" >&2
  exit 1
fi

configure() {  # configure DIR SANITIZERS FUZZ
  [ -f "$1/build.ninja" ] && return
  CC=clang CXX=clang++ cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DTANDEM_SANITIZE="$2" -DTANDEM_FUZZ="$3" -DTANDEM_CUDA=OFF -DTANDEM_BUILD_BENCH=OFF >/dev/null
}

# engine_test runs as two shards (GoogleTest's GTEST_TOTAL_SHARDS): under a sanitizer it
# is the longest binary by far and uses about one core.
declare -A SHARDS=([engine_test]=2)

# Runs the test binaries (and shards) $SANITIZE_JOBS at a time (default 2: under a
# sanitizer they use about one core each; the longest start first, so the short ones
# fill the other core), each one's output in DIR/TEST.log (DIR/TEST.SHARD.log).
run_suite() {  # run_suite DIR NAME TESTS...
  local dir=$1 name=$2
  shift 2
  local -n filters=GTEST_FILTER
  [ "$name" = tsan ] && for t in "${!TSAN_FILTER[@]}"; do GTEST_FILTER[$t]=${TSAN_FILTER[$t]}; done
  ninja -C "$dir" "$@"
  rm -f "$dir"/*.log.failed
  local logs=()
  for t in "$@"; do
    local n=${SHARDS[$t]:-1} i
    for ((i = 0; i < n; ++i)); do
      local run=$t log="$dir/$t.log"
      [ "$n" -gt 1 ] && run="$t shard $((i + 1))/$n" log="$dir/$t.$i.log"
      logs+=("$log")
      while [ "$(jobs -rp | wc -l)" -ge "${SANITIZE_JOBS:-2}" ]; do wait -n || true; done
      (
        start=$SECONDS
        if GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i "$dir/tests/$t" --gtest_brief=1 \
            --gtest_filter="${filters[$t]:-*}" >"$log" 2>&1; then
          echo "sanitize: $name $run passed ($((SECONDS - start))s)"
        else
          touch "$log.failed"
          echo "sanitize: $name $run FAILED after $((SECONDS - start))s (full log: $log)"
        fi
      ) &
    done
  done
  wait
  local failed=()
  for log in "${logs[@]}"; do
    if [ -f "$log.failed" ]; then
      tail -n 80 "$log"
      failed+=("$(basename "$log" .log)")
    fi
  done
  [ ${#failed[@]} -eq 0 ] || { echo "sanitize: $name failures: ${failed[*]}" >&2; return 1; }
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# tests/tsan.supp plus a called_from_lib line per uninstrumented abseil / gRPC library.
tsan_suppressions() {
  {
    cat tests/tsan.supp
    for t in "${TSAN_TESTS[@]}"; do ldd "build-tsan/tests/$t"; done |
      grep -o 'lib\(absl_\|grpc\|gpr\|upb\|address_sorting\|re2\|cares\)[^ ]*\.so' | sort -u |
      sed 's/^/called_from_lib:/'
  } >build-tsan/tsan.supp
}
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/build-tsan/tsan.supp"

mode=${1:-all}
case "$mode" in
  --configure)
    configure build-san address,undefined ON
    ;;
  asan)
    configure build-san address,undefined ON
    run_suite build-san asan "${ASAN_TESTS[@]}"
    ;;
  tsan)
    configure build-tsan thread OFF
    ninja -C build-tsan "${TSAN_TESTS[@]}"
    tsan_suppressions
    run_suite build-tsan tsan "${TSAN_TESTS[@]}"
    ;;
  all)
    "$0" asan
    "$0" tsan
    ;;
  *)
    echo "usage: scripts/sanitize.sh [asan|tsan|all|--configure]" >&2
    exit 2
    ;;
esac

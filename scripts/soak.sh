#!/usr/bin/env bash
# The chaos soak (tests/chaos/soak.py): ~10 minutes of mixed load on a local 2+2
# cluster while workers are killed and paused at random, on the ASan+UBSan binaries of
# build-san/ (so a memory error or leak anywhere on the way is a finding). Not in CI.
#
#   scripts/soak.sh                      600 s, 3 clients, prompts ≤ 120 words, 300 s deadline
#   scripts/soak.sh --seconds 120 --seed 7
# The sanitized workers are ~10x slower than Release ones: the default load is lighter
# than tests/chaos/soak.py's own (which BUILD_DIR=build runs on the Release binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh >/dev/null
scripts/sanitize.sh --configure
ninja -C build-san tandem-router tandem-prefill-worker tandem-decode-worker
export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
BUILD_DIR=build-san exec python3 tests/chaos/soak.py --clients 3 --max-words 120 --deadline 300 "$@"

#!/usr/bin/env bash
# Builds every libFuzzer target under ASan and UBSan with clang (build-san/, shared
# with scripts/sanitize.sh) and runs each for FUZZ_SECONDS (default 20), FUZZ_JOBS
# (default 2) at a time, with libFuzzer's random seed fixed (FUZZ_SEED, default 1: a
# failure seen in CI replays here), from its committed seed corpus (tests/fuzz/<name>/; the GGUF
# and safetensors readers' are tests/data/*.gguf and tests/data/*.safetensors).
# Fails on a target that does not build, any crash, sanitizer report, leak, timeout
# (a unit over 10 s: a hang) or single allocation over 256 MiB.
#
#   scripts/fuzz.sh                      every fuzzer
#   scripts/fuzz.sh tokenizer_fuzzer     one (or several) by name
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${FUZZ_SECONDS:-20}
FUZZERS=(gguf_fuzzer safetensors_fuzzer tokenizer_fuzzer chat_template_fuzzer openai_request_fuzzer
         decode_service_fuzzer prefill_service_fuzzer grammar_fuzzer)
[ $# -gt 0 ] && FUZZERS=("$@")
scripts/sanitize.sh --configure
ninja -C build-san "${FUZZERS[@]}"

# Per fuzzer: seed corpus and the longest input worth trying.
max_len() {
  case "$1" in
    gguf_fuzzer) echo 65536 ;;
    chat_template_fuzzer) echo 16384 ;;
    *) echo 4096 ;;
  esac
}
seeds() {
  case "$1" in
    gguf_fuzzer) echo tests/data/*.gguf ;;
    safetensors_fuzzer) echo tests/data/*.safetensors ;;
    *) echo "tests/fuzz/${1%_fuzzer}"/* ;;
  esac
}

# One fuzzer: its stats, or its log's tail and a non-zero status (run in a || list,
# where set -e does not hold: each step says its own failure).
fuzz_one() {
  local f=$1 corpus
  corpus=$(mktemp -d) || return 1
  # shellcheck disable=SC2046
  cp $(seeds "$f") "$corpus"/ || return 1
  echo "fuzz: $f for ${SECONDS_TO_RUN}s from $(ls "$corpus" | wc -l) seeds"
  if ! build-san/bin/"$f" "$corpus" -max_total_time="$SECONDS_TO_RUN" -seed="${FUZZ_SEED:-1}" -timeout=10 \
      -artifact_prefix=build-san/ -malloc_limit_mb=256 -rss_limit_mb=4096 -max_len="$(max_len "$f")" -print_final_stats=1 \
      >"$corpus.log" 2>&1; then
    tail -n 60 "$corpus.log"
    echo "fuzz: $f FAILED (the input is saved under build-san/, named above)" >&2
    rm -rf "$corpus" "$corpus.log"
    return 1
  fi
  if ! grep -E "^stat::number_of_executed_units|^stat::new_units_added|^stat::peak_rss_mb" \
      "$corpus.log" | sed "s/^/fuzz: $f /"; then
    echo "fuzz: $f printed no final stats" >&2
    rm -rf "$corpus" "$corpus.log"
    return 1
  fi
  rm -rf "$corpus" "$corpus.log"
}

# $FUZZ_JOBS fuzzers at a time (default 2: libFuzzer runs one input at a time, so each
# gets a core of the CI's two).
rm -f build-san/*_fuzzer.failed
for f in "${FUZZERS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "${FUZZ_JOBS:-2}" ]; do wait -n || true; done
  { fuzz_one "$f" || touch "build-san/$f.failed"; } &  # any failure of the job counts
done
wait
if ls build-san/*_fuzzer.failed >/dev/null 2>&1; then
  echo "fuzz: failed: $(basename -s .failed build-san/*_fuzzer.failed | paste -sd' ')" >&2
  exit 1
fi
echo "fuzz: ${#FUZZERS[@]} fuzzers, ${SECONDS_TO_RUN}s each, ${FUZZ_JOBS:-2} at a time, without a finding"

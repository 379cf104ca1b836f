#!/usr/bin/env bash
# The CPU engine per GGUF weight type against llama.cpp's llama-bench, on the same files,
# same thread count, same machine, alternating: one random-weight llama model whose
# widths are multiples of 256 (bench/make_random_model.py), quantized to each type with
# llama-quantize --pure (every matrix in that type, no mixture or fallback).
#
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin [PY=/tmp/refvenv/bin/python] \
#     [CPU_MATH=exact|fast] [LLAMA_BENCH_ARGS="--repack 0"] bench/quant_types.sh
#
# LLAMA_CPP_BIN must hold llama-quantize and llama-bench built from a llama.cpp checkout
# outside this repository (tandem neither vendors nor builds it); PY a Python with numpy
# and the gguf package (tests/reference/requirements.txt). Measures, as llama-bench
# defines them (tandem: `tandem bench engine`): pp512, prompt tokens/s for one 512-token
# prompt; tg128, generated tokens/s for one stream of 128 tokens. Beside tandem's figures,
# how far each is from its roof: decode's weight bandwidth as a share of what the machine
# streams, prefill's GFLOP/s (both from `tandem bench engine`).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to a directory with llama-quantize and llama-bench}"
PY=${PY:-/tmp/refvenv/bin/python}
THREADS=${THREADS:-$(nproc)}
CPU_MATH=${CPU_MATH:-exact}
# Extra llama-bench flags (e.g. --repack 0 where its repacked weights crash the CPU).
read -r -a LLAMA_BENCH_ARGS <<< "${LLAMA_BENCH_ARGS:-}"
TYPES=${TYPES:-"Q8_0 Q6_K Q5_K Q5_1 Q5_0 Q4_K Q4_1 Q4_0 IQ4_NL IQ4_XS Q3_K Q2_K"}
OUT=${OUT:-build/bench/quant_types}
command -v jq >/dev/null || { echo "needs jq (apt-get install jq)" >&2; exit 1; }
mkdir -p "$OUT"
scripts/build.sh tandem >/dev/null
base="$OUT/random-f16.gguf"
[ -f "$base" ] || "$PY" bench/make_random_model.py --tokenizer-from models/smollm2-135m-instruct-q4_1.gguf --out "$base"

printf "%-7s %10s %10s %7s %8s   %10s %10s %7s %6s   %s\n" type "pp512 t" "pp512 l" ratio "GFLOP/s" \
  "tg128 t" "tg128 l" ratio "roof" "tandem weights"
for t in $TYPES; do
  f="$OUT/random-$t.gguf"
  [ -f "$f" ] || "$LLAMA_CPP_BIN/llama-quantize" --pure "$base" "$f" "$t" >"$OUT/quantize-$t.log" 2>&1
  build/bin/tandem bench engine --model "$f" --threads "$THREADS" --cpu-math "$CPU_MATH" -r 3 \
    --batch 1 --batch-prompt 16 --batch-gen 8 --json > "$OUT/tandem-$t.json"
  "$LLAMA_CPP_BIN/llama-bench" -m "$f" -t "$THREADS" -p 512 -n 128 -r 3 "${LLAMA_BENCH_ARGS[@]}" \
    -o json > "$OUT/llama-$t.json" 2>/dev/null
  pp_t=$(jq .pp_tokens_per_s "$OUT/tandem-$t.json"); pp_l=$(jq '.[] | select(.n_prompt==512) | .avg_ts' "$OUT/llama-$t.json")
  tg_t=$(jq .tg_tokens_per_s "$OUT/tandem-$t.json"); tg_l=$(jq '.[] | select(.n_gen==128) | .avg_ts' "$OUT/llama-$t.json")
  printf "%-7s %10.1f %10.1f %6.2fx %8.1f   %10.1f %10.1f %6.2fx %5.0f%%   %s\n" "$t" "$pp_t" "$pp_l" \
    "$(awk -v a="$pp_t" -v b="$pp_l" 'BEGIN { print a / b }')" "$(jq .pp_gflops "$OUT/tandem-$t.json")" \
    "$tg_t" "$tg_l" "$(awk -v a="$tg_t" -v b="$tg_l" 'BEGIN { print a / b }')" \
    "$(jq '.tg_roof_fraction * 100' "$OUT/tandem-$t.json")" \
    "$(build/bin/tandem inspect -m "$f" | sed -n 's/.*weights in memory //p')"
done
echo "llama.cpp $(jq -r '.[0].build_commit' "$OUT/llama-$t.json"), $THREADS threads, tandem --cpu-math $CPU_MATH ($(jq -r .cpu_math_isa "$OUT/tandem-$t.json")), model $(build/bin/tandem inspect -m "$base" | sed -n 's/  architecture *//p')"

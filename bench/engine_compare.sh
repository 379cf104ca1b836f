#!/usr/bin/env bash
# CPU engine vs llama.cpp on the same GGUF, same thread count, same machine, in one
# run: tandem and llama.cpp alternate ROUNDS times and every ratio is taken within a
# round, so machine noise hits both sides alike.
#
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin bench/engine_compare.sh
#
# LLAMA_CPP_BIN must hold llama-bench and llama-batched-bench built from a llama.cpp
# checkout outside this repository (tandem neither vendors nor builds it).
# Measures, as llama.cpp's tools define them (tandem: `tandem bench engine`):
#   pp512  prompt tokens/s for one 512-token prompt         (llama-bench -p 512)
#   tg128  generated tokens/s for one stream of 128 tokens  (llama-bench -n 128)
#   S_TG   aggregate decode tokens/s, 16 sequences of 128 prompt + 128 new tokens
#          (llama-batched-bench -npp 128 -ntg 128 -npl 16)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-build/bench/engine_compare}
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to a directory with llama-bench and llama-batched-bench}"
command -v jq >/dev/null || { echo "needs jq (apt-get install jq)" >&2; exit 1; }
mkdir -p "$OUT"
scripts/build.sh tandem >/dev/null

# REPORT_ONLY=1 reprints the table from the JSON files of the last run.
for r in $(seq 1 "$ROUNDS"); do
  [ "${REPORT_ONLY:-0}" = 1 ] && break
  build/bin/tandem bench engine --model "$MODEL" --threads "$THREADS" -r 3 --json > "$OUT/tandem.$r.json"
  "$LLAMA_CPP_BIN/llama-bench" -m "$MODEL" -t "$THREADS" -p 512 -n 128 -r 3 -o json \
    > "$OUT/llama-bench.$r.json" 2>/dev/null
  "$LLAMA_CPP_BIN/llama-batched-bench" -m "$MODEL" -t "$THREADS" -c 8192 -b 2048 -ub 512 \
    -npp 128 -ntg 128 -npl 16 --output-format jsonl 2>/dev/null | grep '^{' > "$OUT/llama-batched.$r.jsonl"
done

echo "model $MODEL, $THREADS threads, $ROUNDS rounds; llama.cpp $(jq -r '.[0].build_commit + " (build " + (.[0].build_number|tostring) + ")"' "$OUT/llama-bench.1.json")"
printf "%-6s %-8s %12s %12s %8s\n" metric round tandem llama.cpp ratio
for r in $(seq 1 "$ROUNDS"); do
  t="$OUT/tandem.$r.json"; b="$OUT/llama-bench.$r.json"; bb="$OUT/llama-batched.$r.jsonl"
  pp_t=$(jq .pp_tokens_per_s "$t");  pp_l=$(jq '.[] | select(.n_prompt==512) | .avg_ts' "$b")
  tg_t=$(jq .tg_tokens_per_s "$t");  tg_l=$(jq '.[] | select(.n_gen==128) | .avg_ts' "$b")
  st_t=$(jq .batch_s_tg "$t");       st_l=$(jq .speed_tg "$bb")
  for row in "pp512 $pp_t $pp_l" "tg128 $tg_t $tg_l" "S_TG16 $st_t $st_l"; do
    set -- $row
    printf "%-6s %-8s %12.1f %12.1f %7.2fx\n" "$1" "$r" "$2" "$3" "$(awk -v a="$2" -v b="$3" 'BEGIN { print a / b }')"
  done
done
jq -r '"tandem: peak RSS \(.peak_rss_mib|round) MiB (256 MiB KV pool); machine: \(.machine_read_gb_per_s*10|round/10) GB/s read, \(.machine_gemm_gflops|round) GFLOP/s f32 GEMM (tandem kernel)"' "$OUT/tandem.$ROUNDS.json"

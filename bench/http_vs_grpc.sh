#!/usr/bin/env bash
# HTTP against gRPC through one `tandem serve` (issue #17: "HTTP keeps up with gRPC").
#
# One local cluster (prefix caching off, so every run computes its prompts), one
# warm-up wave, then PAIRS pairs of `tandem bench serve` runs, one per front, at
# CONCURRENCY concurrent requests of INPUT_LEN random prompt tokens and exactly
# OUTPUT_LEN output tokens. The order within a pair alternates (openai grpc, grpc
# openai, …) so that drift hits both alike; each ratio is taken within its pair.
#
#   bench/http_vs_grpc.sh                 # 6 pairs, c=16, 512 in / 128 out
#   PAIRS=3 OUTPUT_LEN=64 bench/http_vs_grpc.sh
#
# Prints each run's output tokens/s, each pair's HTTP/gRPC ratio, the means and the
# median ratio; the JSON of every run stays in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
TANDEM=${TANDEM:-build/bin/tandem}
MODEL=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
PAIRS=${PAIRS:-6}
CONCURRENCY=${CONCURRENCY:-16}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-128}
THREADS_PER_WORKER=${THREADS_PER_WORKER:-0}
OUT=${OUT:-build/bench/http_vs_grpc}
mkdir -p "$OUT"
rm -f "$OUT"/*.json

endpoints="$OUT/endpoints.json.out"
rm -f "$endpoints"
"$TANDEM" serve --model "$MODEL" --grpc-port 0 --http-port 0 --no-prefix-caching \
  --threads-per-worker "$THREADS_PER_WORKER" --endpoints-file "$endpoints" \
  >"$OUT/serve.log" 2>&1 &
serve=$!
trap 'kill -INT $serve 2>/dev/null; wait $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  [ -f "$endpoints" ] && break
  kill -0 $serve 2>/dev/null || { cat "$OUT/serve.log" >&2; exit 1; }
  sleep 0.5
done
[ -f "$endpoints" ] || { echo "http_vs_grpc: the cluster did not start" >&2; exit 1; }
grpc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["grpc"])' "$endpoints")
http=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["http"])' "$endpoints")

run() {  # run BACKEND NAME
  local endpoint=$grpc
  [ "$1" = openai ] && endpoint=$http
  "$TANDEM" bench serve --backend "$1" --endpoint "$endpoint" --tokenizer "$MODEL" \
    --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --ignore-eos \
    --max-concurrency "$CONCURRENCY" --num-prompts "$CONCURRENCY" --num-warmups 0 --json \
    >"$OUT/$2.json"
}

run grpc warmup
echo "http_vs_grpc: warm-up done ($grpc, $http)" >&2
for p in $(seq 1 "$PAIRS"); do
  if [ $((p % 2)) -eq 1 ]; then order="openai grpc"; else order="grpc openai"; fi
  for backend in $order; do run "$backend" "$backend.$p"; done
  echo "http_vs_grpc: pair $p of $PAIRS done" >&2
done

python3 - "$OUT" "$PAIRS" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
tps = lambda name: json.load(open(f"{out}/{name}.json"))["output_throughput"]
h = [tps(f"openai.{p}") for p in range(1, pairs + 1)]
g = [tps(f"grpc.{p}") for p in range(1, pairs + 1)]
ratios = [a / b for a, b in zip(h, g)]
print(f"{'pair':<6} {'HTTP tok/s':>11} {'gRPC tok/s':>11} {'HTTP/gRPC':>10}")
for p, (a, b, r) in enumerate(zip(h, g, ratios), 1):
    print(f"{p:<6} {a:>11.1f} {b:>11.1f} {r:>10.3f}")
print(f"{'mean':<6} {statistics.mean(h):>11.1f} {statistics.mean(g):>11.1f} "
      f"{statistics.mean(h) / statistics.mean(g):>10.3f}")
print(f"median pair ratio {statistics.median(ratios):.3f} (range {min(ratios):.3f}–{max(ratios):.3f})")
PY

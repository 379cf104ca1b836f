#!/usr/bin/env bash
# tandem vs llama.cpp's llama-server, side by side on the same GGUF, the same machine,
# the same load: `tandem bench serve` (random 512-token prompts, 128 output tokens,
# ignore_eos, all requests at once capped at the concurrency) against
#   1. llama-server -t THREADS -np C   (its OpenAI API)
#   2. tandem serve (1 prefill + 1 decode worker) through its OpenAI HTTP API
#   3. the same tandem cluster through its gRPC API
# for each concurrency C, then prints the ratios the benchmark issue sets targets for.
#
#   LLAMA_CPP_BIN=/path/to/llama.cpp/build/bin bench/compare_llamacpp.sh
#
# LLAMA_CPP_BIN must hold llama-server built from a llama.cpp checkout outside this
# repository (tandem neither vendors nor builds it). Every run uses fresh random prompts
# (a different --seed), so no prefix cache (tandem's or llama-server's) helps. Each
# freshly started server first gets one unmeasured wave of the same concurrency (16
# output tokens): the first big wave after a start is measurably slower (allocator and
# buffer growth), and without it whichever target ran first on a server paid for it.
#   MODEL        GGUF (default: the default model)
#   THREADS      llama-server's threads (default: nproc)
#   TANDEM_SERVE_ARGS  extra `tandem serve` flags (default: none — its defaults, which
#                give every worker a thread per core and start the prefill workers at a
#                lower OS priority; "--threads-per-worker N" sets N threads each at one
#                priority, as this script ran before 2026-12-07)
#   CONCURRENCY  default "1 4 16";  NUM_PROMPTS  default "4 8 16" (one per concurrency)
#   INPUT, OUTPUT  default 512, 128
#   OUT          results directory (default build/bench/compare-<date>)
#   LLAMA_SERVER_ARGS  extra llama-server flags (e.g. --no-repack where its repacked
#                weights crash the CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_CPP_BIN:?set LLAMA_CPP_BIN to a directory with llama-server}"
MODEL=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
THREADS=${THREADS:-$(nproc)}
read -r -a CONC <<< "${CONCURRENCY:-1 4 16}"
read -r -a PROMPTS <<< "${NUM_PROMPTS:-4 8 16}"
INPUT=${INPUT:-512}
OUTPUT=${OUTPUT:-128}
OUT=${OUT:-build/bench/compare-$(date +%Y%m%d-%H%M%S)}
read -r -a SERVER_ARGS <<< "${LLAMA_SERVER_ARGS:-}"
read -r -a TANDEM_ARGS <<< "${TANDEM_SERVE_ARGS:-}"
mkdir -p "$OUT"
scripts/build.sh tandem tandem-router tandem-prefill-worker tandem-decode-worker >/dev/null
TANDEM=build/bin/tandem

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {  # URL PID
  for _ in $(seq 600); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
warm() {  # BACKEND ENDPOINT CONCURRENCY SEED: one unmeasured wave
  "$TANDEM" bench serve --backend "$1" --endpoint "$2" --max-concurrency "$3" --num-prompts "$3" \
    --seed "$4" --random-input-len "$INPUT" --random-output-len 16 --ignore-eos \
    --tokenizer "$MODEL" --json > /dev/null 2>&1 || echo "  (warm-up wave against $2 had failures)"
}
bench() {  # LABEL BACKEND ENDPOINT CONCURRENCY PROMPTS SEED
  "$TANDEM" bench serve --label "$1" --backend "$2" --endpoint "$3" --max-concurrency "$4" \
    --num-prompts "$5" --seed "$6" --random-input-len "$INPUT" --random-output-len "$OUTPUT" \
    --ignore-eos --tokenizer "$MODEL" --result-json "$OUT/$1.c$4.json" > "$OUT/$1.c$4.txt"
  echo "  $1 c=$4: $(grep -E 'Output token throughput' "$OUT/$1.c$4.txt" | awk '{print $NF}') tok/s"
}

"$LLAMA_CPP_BIN/llama-server" --version > "$OUT/llama-server.version" 2>&1 || true
{
  echo "date: $(date -u +%FT%TZ)"
  echo "tandem commit: $(git rev-parse --short HEAD)"
  echo "model: $MODEL  threads: $THREADS  tandem serve args: ${TANDEM_SERVE_ARGS:-(defaults)}  input: $INPUT  output: $OUTPUT"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)  cores: $(nproc)"
} > "$OUT/setup.txt"
seed=100
for i in "${!CONC[@]}"; do
  c=${CONC[$i]}
  n=${PROMPTS[$i]}
  echo "concurrency $c ($n requests)"
  # llama-server: -np slots share a context of -c tokens.
  port=$(free_port)
  ctx=$(( c * (INPUT + OUTPUT + 64) ))
  "$LLAMA_CPP_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$c" -c "$ctx" "${SERVER_ARGS[@]}" \
    --host 127.0.0.1 --port "$port" > "$OUT/llama-server.c$c.log" 2>&1 &
  lpid=$!
  wait_http "http://127.0.0.1:$port/health" "$lpid" || { echo "llama-server did not start" >&2; cat "$OUT/llama-server.c$c.log" >&2; exit 1; }
  warm openai "http://127.0.0.1:$port" "$c" $((seed += 1))
  bench llama-server openai "http://127.0.0.1:$port" "$c" "$n" $((seed += 1))
  kill "$lpid"; wait "$lpid" 2>/dev/null || true

  "$TANDEM" serve --model "$MODEL" --grpc-port 0 --http-port 0 "${TANDEM_ARGS[@]}" \
    --endpoints-file "$OUT/tandem.c$c.endpoints" > "$OUT/tandem.c$c.log" 2>&1 &
  tpid=$!
  for _ in $(seq 600); do [ -f "$OUT/tandem.c$c.endpoints" ] && break; sleep 0.2; done
  grpc=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['grpc'])" "$OUT/tandem.c$c.endpoints")
  http=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['http'])" "$OUT/tandem.c$c.endpoints")
  warm openai "$http" "$c" $((seed += 1))
  bench tandem-http openai "$http" "$c" "$n" $((seed += 1))
  bench tandem-grpc grpc "$grpc" "$c" "$n" $((seed += 1))
  kill -TERM "$tpid"; wait "$tpid" 2>/dev/null || true
done

python3 - "$OUT" "${CONC[@]}" <<'PY'
import json, sys
out, concs = sys.argv[1], [int(c) for c in sys.argv[2:]]
def load(label, c):
    with open(f"{out}/{label}.c{c}.json") as f:
        return json.load(f)
print(f"\n{'':36}" + "".join(f"{'c=' + str(c):>18}" for c in concs))
rows = [("output tok/s", lambda j: j["output_throughput"]),
        ("TTFT p50 ms", lambda j: j["ttft_ms"]["p50"]),
        ("TPOT p50 ms", lambda j: j["tpot_ms"]["p50"]),
        ("E2E p50 ms", lambda j: j["e2e_ms"]["p50"])]
for label in ("llama-server", "tandem-http", "tandem-grpc"):
    for name, get in rows:
        print(f"{label + ' ' + name:36}" + "".join(f"{get(load(label, c)):18.1f}" for c in concs))
print("\nratios (tandem / llama-server; targets: tok/s at c=16 >= 4, TTFT p50 at c=1 <= 0.5, TPOT p50 at c=1 <= 1.0)")
for label in ("tandem-http", "tandem-grpc"):
    for name, get in rows:
        cells = "".join(f"{get(load(label, c)) / get(load('llama-server', c)):18.2f}" for c in concs)
        print(f"{label + ' ' + name:36}" + cells)
PY
echo "results: $OUT"

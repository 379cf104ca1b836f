#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: installs packages, builds, fetches the
# default model (SmolLM2-135M-Instruct, Q4_1), starts a local disaggregated cluster
# (router + 1 prefill worker + 1 decode worker on loopback), streams one answer through
# it, prints how to query it, and keeps serving until Ctrl-C.
#
#   scripts/quickstart.sh [--once] [QUESTION]
#     --once   stop the cluster after the demo answer (tests use this)
#   TANDEM_PORT       the router's gRPC port (default 50051)
#   TANDEM_HTTP_PORT  its OpenAI-compatible HTTP port (default 8000; 0: any free port)
set -euo pipefail
cd "$(dirname "$0")/.."

ONCE=0
if [ "${1:-}" = "--once" ]; then
  ONCE=1
  shift
fi
QUESTION=${1:-"What is the capital of France? Answer in one sentence."}
PORT=${TANDEM_PORT:-50051}
HTTP_PORT=${TANDEM_HTTP_PORT:-8000}
MODEL=models/smollm2-135m-instruct-q4_1.gguf

scripts/setup.sh
scripts/fetch-model.sh
scripts/build.sh tandem tandem-router tandem-prefill-worker tandem-decode-worker

LOG=$(mktemp /tmp/tandem-quickstart-XXXXXX.log)
build/bin/tandem serve --model "$MODEL" --grpc-port "$PORT" --http-port "$HTTP_PORT" >"$LOG" 2>&1 &
SERVE=$!
stop_cluster() {
  if kill -0 "$SERVE" 2>/dev/null; then
    kill -TERM "$SERVE" 2>/dev/null || true
    wait "$SERVE" 2>/dev/null || true
  fi
}
trap stop_cluster EXIT

for _ in $(seq 1200); do
  grep -q "tandem serve ready" "$LOG" && break
  if ! kill -0 "$SERVE" 2>/dev/null; then
    echo "quickstart: the cluster did not start:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.1
done
grep -q "tandem serve ready" "$LOG" || { echo "quickstart: the cluster is not ready after 120 s" >&2; cat "$LOG" >&2; exit 1; }
grep "tandem serve ready" "$LOG"
HTTP_URL=$(grep -o 'HTTP http://[0-9.:]*' "$LOG" | head -1 | cut -d' ' -f2)

echo "user: $QUESTION"
printf "assistant: "
build/bin/tandem client --endpoint "127.0.0.1:$PORT" --chat --prompt "$QUESTION" \
  --temperature 0 --max-tokens 128

# The same question through the OpenAI-compatible HTTP API.
printf "assistant (OpenAI API, %s/v1/chat/completions): " "$HTTP_URL"
# -f and the parse below fail the demo (set -e, pipefail) on an HTTP error or an answer
# without a message.
curl -fsS --max-time 300 "$HTTP_URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "$(python3 -c 'import json,sys; print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}], "temperature": 0, "max_tokens": 128}))' "$QUESTION")" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'

cat <<EOM

The cluster serves gRPC (tandem.v1.Generation) on 127.0.0.1:$PORT and the OpenAI API on
$HTTP_URL/v1 (Prometheus metrics: $HTTP_URL/metrics). Open $HTTP_URL/ in a browser for
the cluster's live view and a chat playground. Try:
  curl -N $HTTP_URL/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"messages": [{"role": "user", "content": "Tell me a joke"}], "stream": true}'
  build/bin/tandem client --endpoint 127.0.0.1:$PORT --chat --prompt 'Tell me a short story'
  build/bin/tandem client --endpoint 127.0.0.1:$PORT --prompt 'Once upon a time' --json
Its log: $LOG
EOM
if [ "$ONCE" = 1 ]; then
  exit 0
fi
echo "Serving until Ctrl-C."
wait "$SERVE" || true

#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: installs packages, builds, fetches the
# default model (SmolLM2-135M-Instruct, Q4_1) and streams an answer from the
# single-process CPU engine. (The disaggregated cluster arrives with the cluster issue.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/fetch-model.sh
scripts/build.sh tandem

MODEL=models/smollm2-135m-instruct-q4_1.gguf
QUESTION=${1:-"What is the capital of France? Answer in one sentence."}
echo "model: $MODEL"
echo "user: $QUESTION"
printf "assistant: "
build/bin/tandem generate --model "$MODEL" --chat --prompt "$QUESTION" --temperature 0 --max-tokens 128
echo
echo "Try: build/bin/tandem generate --model $MODEL --chat --prompt 'Tell me a short story'"
echo "     build/bin/tandem generate --model $MODEL --prompt 'Once upon a time' --json"

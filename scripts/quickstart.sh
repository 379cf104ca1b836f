#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: installs packages, builds, fetches
# the default model and shows what tandem can do with it so far — the model's
# config and tokenizer, and a prompt tokenized. (Generation and the local cluster
# arrive with the engine and cluster issues.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/fetch-model.sh
scripts/build.sh tandem

MODEL=models/smollm2-135m-instruct-q4_1.gguf
build/bin/tandem inspect --model "$MODEL" | sed -n '1,26p'
echo
PROMPT='<|im_start|>user
What is the capital of France?<|im_end|>'
echo "tokens of the chat prompt:"
build/bin/tandem tokenize --model "$MODEL" --text "$PROMPT" --show-pieces

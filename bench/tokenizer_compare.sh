#!/usr/bin/env bash
# Tokenizer throughput: tandem vs Hugging Face tokenizers on the same 1 MiB mixed
# text and the same vocabulary, one thread each; also checks that both produce the
# same ids on the whole corpus.
#
#   bench/tokenizer_compare.sh            # results: build/bench/tokenizer_*.json
#
# The Python comparator lives in a venv (default /tmp/tandem-refvenv, or $REFVENV)
# made from tests/reference/requirements.txt; torch is not needed.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/smollm2-135m-instruct-q4_1.gguf}
VENV=${REFVENV:-/tmp/tandem-refvenv}
OUT=build/bench
mkdir -p "$OUT"

scripts/build.sh tokenizer_bench
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet -r tests/reference/requirements.txt
fi
python3 bench/make_corpus.py "$OUT/corpus.txt"
build/bin/tokenizer_bench --model "$MODEL" --text "$OUT/corpus.txt" --repeat 5 --json \
  --dump-ids "$OUT/corpus.tandem.ids" | tee "$OUT/tokenizer_tandem.json"
RAYON_NUM_THREADS=1 "$VENV/bin/python" bench/tokenizer_hf.py --model "$MODEL" \
  --text "$OUT/corpus.txt" --repeat 5 --json --dump-ids "$OUT/corpus.hf.ids" 2>/dev/null \
  | tee "$OUT/tokenizer_hf.json"
if cmp -s "$OUT/corpus.tandem.ids" "$OUT/corpus.hf.ids"; then
  echo "ids: identical on the whole corpus"
else
  echo "ids: DIFFER (see $OUT/corpus.*.ids)"; exit 1
fi
python3 - "$OUT/tokenizer_tandem.json" "$OUT/tokenizer_hf.json" <<'PY'
import json, sys
t, h = (json.load(open(p)) for p in sys.argv[1:3])
print(f"tandem {t['mb_per_s']:.1f} MB/s (cold cache {t['first_mb_per_s']:.1f}), "
      f"HF tokenizers {h['mb_per_s']:.2f} MB/s -> {t['mb_per_s'] / h['mb_per_s']:.1f}x")
PY

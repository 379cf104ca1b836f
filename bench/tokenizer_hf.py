"""Throughput baseline: Hugging Face `tokenizers` (Rust) on a text file, same tokenizer as the goldens.

What it does
    Loads the reference tokenizer from the GGUF exactly as tests/reference/make_tokenizer_golden.py
    does (tests/reference/hf_tokenizer.py: load_reference_tokenizer -- transformers' GGUF
    conversion plus the 'smollm' Digits+ByteLevel pre-tokenizer patch), then times
        tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    on the whole file as one string (the Rust tokenizers.Tokenizer directly, so the Python wrapper
    is not measured). Reports the best of --repeat runs (wall time, time.perf_counter).
    Control-token text in the file (e.g. "<|im_end|>") is matched as special tokens, as in the goldens.

Output
    Human-readable line: bytes, tokens, best seconds, MB/s (MB = 1e6 bytes).
    --json: one JSON object on stdout instead:
        {"impl": "hf-tokenizers", "version": "<tokenizers version>", "bytes": N, "tokens": N,
         "best_s": float, "mb_per_s": float}
    --dump-ids FILE: write the token ids, one per line, for comparison with the C++ tokenizer.

How to run (from the repository root)
    python3 bench/make_corpus.py /tmp/corpus.txt
    /tmp/refvenv/bin/python bench/tokenizer_hf.py --model models/smollm2-135m-instruct-q4_1.gguf \
        --text /tmp/corpus.txt [--repeat 5] [--json] [--dump-ids /tmp/corpus.hf.ids]

Requirements
    tests/reference/requirements.txt (transformers==5.24.0, tokenizers==0.23.3, gguf==0.19.0, numpy).
    Note: the Rust tokenizer may use several threads for one long string only when batching; a
    single encode() call is effectively single-threaded. Set RAYON_NUM_THREADS=1 to be explicit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))


def main() -> int:
    ap = argparse.ArgumentParser(description="HF tokenizers throughput on a text file")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--text", required=True, help="UTF-8 text file")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dump-ids", metavar="FILE", help="write token ids, one per line")
    args = ap.parse_args()

    import tokenizers
    from hf_tokenizer import load_reference_tokenizer

    tok = load_reference_tokenizer(args.model, patched=True).backend_tokenizer
    with open(args.text, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")

    best, enc = float("inf"), None
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        enc = tok.encode(text, add_special_tokens=False)
        dt = time.perf_counter() - t0
        best = min(best, dt)
    ids = enc.ids

    if args.dump_ids:
        with open(args.dump_ids, "w") as f:
            f.write("\n".join(map(str, ids)))
            f.write("\n")

    result = {
        "impl": "hf-tokenizers",
        "version": tokenizers.__version__,
        "bytes": len(raw),
        "tokens": len(ids),
        "best_s": best,
        "mb_per_s": len(raw) / best / 1e6,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"hf-tokenizers {result['version']}: {result['bytes']} bytes -> {result['tokens']} tokens, "
              f"best of {args.repeat}: {best * 1e3:.1f} ms, {result['mb_per_s']:.2f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

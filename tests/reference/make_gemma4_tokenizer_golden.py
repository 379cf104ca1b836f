"""A tiny Gemma 4-style vocabulary (tokenizer.ggml.model = 'gemma4') as a vocab-only GGUF,
with golden ids from Hugging Face `tokenizers`.

Gemma 4's tokenizer is SentencePiece-style BPE with ranked merges: spaces written "▁"
by the normalizer, the text cut into runs of newlines and runs of anything else, BPE
over code points (not GPT-2's spelled bytes), byte fallback ("<0xXX>") for what stays
outside the vocabulary. llama.cpp's vocabulary suite (ggml-vocab-gemma-4.gguf, 262,144
tokens, too large to commit) checks tandem against the real one
(tests/reference/vocab_suite.py); this file checks the same algorithm on a small one.

Produces
    tests/data/spm_gemma4.gguf            vocab-only GGUF: tokens, token_type (CONTROL for
        <bos>/<eos>, BYTE for the 256 "<0xXX>", NORMAL otherwise), merges, scores (0),
        tokenizer.ggml.model 'gemma4', add_bos false.
    tests/data/tokenizer_spm_gemma4.json  {"gguf_file", "pre", "reference", "cases":
        [{"text", "ids"[, "decoded"]}]}: ids = encode(text, add_special_tokens=False).

The Hugging Face tokenizer: normalizer Replace(" ", "▁"); pre-tokenizer Split("\\n+",
isolated); BPE(byte_fallback=True) trained (vocab 1200, alphabet limited to 120 code
points so that CJK, emoji and rarer scripts fall back to bytes) on the default model's
golden texts (tests/reference/make_tokenizer_golden.py build_cases); decoder Replace
("▁", " ") + ByteFallback + Fuse.

Training with a limited alphabet is not deterministic in tokenizers 0.23.3 (which code
points make the alphabet varies run to run): each run writes a vocabulary and goldens
that belong together, not the same bytes as the last (the committed pair: 204 of the
508 cases through byte fallback).

    /tmp/refvenv/bin/python tests/reference/make_gemma4_tokenizer_golden.py [--outdir tests/data]
Requirements: tests/reference/requirements.txt (tokenizers==0.23.3, gguf==0.19.0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from make_pretokenizer_goldens import golden_cases, write_golden, write_vocab_gguf  # noqa: E402
from make_tokenizer_golden import build_cases  # noqa: E402

SPECIAL = ["<bos>", "<eos>"]
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def build(texts):
    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("\n+"), "isolated")
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIAL + BYTES,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    # The byte tokens as ordinary vocabulary entries (byte fallback's), not added tokens.
    fresh = Tokenizer(models.BPE(model["vocab"], [tuple(m) for m in model["merges"]],
                                 byte_fallback=True))
    fresh.normalizer = tok.normalizer
    fresh.pre_tokenizer = tok.pre_tokenizer
    fresh.add_special_tokens(SPECIAL)
    fresh.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                       decoders.Fuse()])
    return fresh, model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "tests", "data"))
    args = ap.parse_args()
    texts = build_cases()
    tok, _ = build(texts)
    gguf_path = os.path.join(args.outdir, "spm_gemma4.gguf")
    write_vocab_gguf(gguf_path, tok, "gemma4", "spm-gemma4", "gemma4",
                     lambda t: gguf.TokenType.CONTROL if t in SPECIAL else
                     gguf.TokenType.BYTE if t in BYTES else gguf.TokenType.NORMAL, scores=True,
                     special=SPECIAL)
    cases, differs = golden_cases(tok, texts)
    fallbacks = sum(any(tok.id_to_token(i) in BYTES for i in c["ids"]) for c in cases)
    doc = {"gguf_file": os.path.basename(gguf_path), "pre": "",
           "reference": "Hugging Face tokenizers " + __import__("tokenizers").__version__
           + ": Replace(' ', '▁'), Split('\\n+', isolated), BPE(byte_fallback) trained on the "
           "cases; encode(add_special_tokens=False); made by "
           "tests/reference/make_gemma4_tokenizer_golden.py.",
           "cases": cases}
    write_golden(os.path.join(args.outdir, "tokenizer_spm_gemma4.json"), doc)
    print(f"gemma4: {len(cases)} cases ({fallbacks} with byte fallback), "
          f"{len(tok.get_vocab())} tokens, {differs} decode differently")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

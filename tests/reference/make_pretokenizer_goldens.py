"""Tiny byte-level BPE vocabularies for the gpt2, llama3 and qwen2 pre-tokenizers, as
vocab-only GGUFs, with golden ids from Hugging Face `tokenizers`.

Why
    The default model (SmolLM2) covers only the 'smollm' pre-tokenizer. Llama 3, Qwen2 and
    GPT-2 split text with their own regular expressions before BPE; tandem runs them on
    PCRE2 (common/tokenizer/pre_tokenizer.cc), Hugging Face on its own regex engine. These
    goldens check that both split, and so encode, every case the same way.

Produces, for each PRE in gpt2, llama-bpe (Llama 3) and qwen2:
    tests/data/bpe_<name>.gguf        vocab-only GGUF (~30 KB): general.architecture='llama',
        tokenizer.ggml.model='gpt2', tokenizer.ggml.pre=PRE, tokens, token_type
        (NORMAL=1, CONTROL=3), merges, bos/eos ids of the two CONTROL tokens, add_bos false.
    tests/data/tokenizer_<name>.json  {"gguf_file", "pre", "reference",
        "cases": [{"text", "ids"[, "decoded"]}]}: ids = the Hugging Face tokenizer's
        encode(text, add_special_tokens=False); decoded where its decode differs from text.

The Hugging Face tokenizer for each is built as the published tokenizer.json of that model
family builds it: GPT-2 ByteLevel(add_prefix_space=False, use_regex=True); Llama 3 and Qwen2
Sequence([Split(Regex(<the family's pattern>), 'isolated'), ByteLevel(add_prefix_space=False,
use_regex=False)]), a ByteLevel decoder, the two CONTROL tokens as special added tokens. Its
BPE model is trained (tokenizers' BpeTrainer, vocab 1500, the 256-byte initial alphabet) on
the case texts themselves, so merges apply across the cases.

Cases: the default model's golden texts (tests/reference/make_tokenizer_golden.py
build_cases, ~500: prose, code, numbers, contractions in both cases, CJK, emoji, scripts,
whitespace runs, CR/LF mixes, special-token text) plus digit runs that separate the
patterns (\\p{N} vs \\p{N}{1,3}).

How to run (from the repository root; no torch, no network)
    /tmp/refvenv/bin/python tests/reference/make_pretokenizer_goldens.py [--outdir tests/data]
Requirements: tests/reference/requirements.txt (tokenizers==0.23.3, gguf==0.19.0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from make_tokenizer_golden import build_cases  # noqa: E402

# The splitting patterns as the families' tokenizer.json files publish them.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

FAMILIES = {
    # name: (tokenizer.ggml.pre, HF pre-tokenizer)
    "gpt2": ("gpt2", lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
    "llama3": ("llama-bpe", lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])),
    "qwen2": ("qwen2", lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])),
}
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]
EXTRA = ["1234567", "x=123456789;", "3.14159 2.71828", "In 2024, 12345 people", "00:11:22",
         "١٢٣٤٥ ٦٧", "IT'S I'M YOU'LL THEY'D WE'VE", "a\r\n\r\nb", "  \n  \n", "tab\t\tsep",
         "\u00a0nbsp\u00a0", "line1\nline2\r\n"]


def build(name, texts):
    pre, make_pre = FAMILIES[name]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = make_pre()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return pre, tok


def write_gguf(path, name, pre, tok):
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    types = [gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens]
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m
              for m in json.loads(tok.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(f"bpe-{name}")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[SPECIAL[0]])
    w.add_eos_token_id(vocab[SPECIAL[1]])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "tests", "data"))
    args = ap.parse_args()
    texts = build_cases() + EXTRA
    for name in FAMILIES:
        pre, tok = build(name, texts)
        gguf_path = os.path.join(args.outdir, f"bpe_{name}.gguf")
        write_gguf(gguf_path, name, pre, tok)
        cases, differs = [], 0
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            case = {"text": text, "ids": ids}
            back = tok.decode(ids, skip_special_tokens=False)
            if back != text:
                case["decoded"] = back
                differs += 1
            cases.append(case)
        doc = {
            "gguf_file": os.path.basename(gguf_path),
            "pre": pre,
            "reference": "Hugging Face tokenizers "
            + __import__("tokenizers").__version__
            + f": BPE trained on the cases (vocab 1500), pre-tokenizer as the {name} family's "
            "tokenizer.json builds it, encode(add_special_tokens=False); made by "
            "tests/reference/make_pretokenizer_goldens.py.",
            "cases": cases,
        }
        out = os.path.join(args.outdir, f"tokenizer_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(f"{name}: {len(cases)} cases, {len(tok.get_vocab())} tokens, {differs} decode "
              f"differently; {os.path.getsize(gguf_path)} + {os.path.getsize(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

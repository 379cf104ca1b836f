"""SentencePiece-style tokenizer.json directories and their Hugging Face goldens.

The two SentencePiece models of make_spm_vocab.py (spm_tiny.model, Llama 2 style, and
spm_gemma.model, Gemma style) written as the tokenizer.json files published for those
families carry them: a BPE model whose merges are every pair of pieces that concatenate to
a piece, ranked by the piece's score (the layout of transformers' SentencePiece extractor),
with byte fallback, "<unk>" and fuse_unk; and around it

    hf_tokenizer_spm_llama/    Llama 2 / Phi-3 ("legacy"): normalizer Prepend("▁") then
                               Replace(" ", "▁"), no pre-tokenizer; a post-processor that
                               prepends "<s>".
    hf_tokenizer_spm_mistral/  Mistral v0.3 and later Llama-family files (legacy=False): no
                               normalizer, pre-tokenizer Metaspace("▁", prepend_scheme
                               "first", split=False).
    hf_tokenizer_spm_gemma/    Gemma: normalizer Replace(" ", "▁"), pre-tokenizer
                               Split(" ", MergedWithPrevious); the turn markers are special
                               added tokens, "\\n\\n" a non-special one.

Each directory also holds tokenizer_config.json (bos/eos/unk, add_bos_token, a chat
template). tests/data/tokenizer_hf_spm_<name>.json holds, for every text of the
SentencePiece golden plus cases around special tokens and leading spaces, the ids Hugging
Face tokenizers gives (encode(text, add_special_tokens=False), added tokens matched as it
matches them), and whether they equal sentencepiece's ids on the same model.

How to run (from the repository root; transformers' converters are not used: in 5.24 they
fail on these models, and the published layout is written here directly)
    /tmp/refvenv/bin/python tests/reference/make_spm_tokenizer_json.py [--outdir tests/data]

Requirements: tests/reference/requirements.txt (tokenizers==0.23.3, sentencepiece==0.2.3).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
# Texts that exercise what differs between the three layouts: added tokens inside the
# text (the "▁" prefix after them), leading spaces (Metaspace does not add a second "▁").
EXTRA = ["<s>hello", "hello</s>world", "</s> leading", "a<s>  two spaces", "<s>", "x</s>",
         " one leading space", "  two leading spaces", "<start_of_turn>user\nhi<end_of_turn>\n",
         "<start_of_turn>  spaced<end_of_turn>", "para one\n\npara two\n\n\nthree", "\n\n",
         "<unk> is text", "▁already marked", "▁", "a▁b ▁ c"]


def merges_of(sp: spm.SentencePieceProcessor, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every pair of normal pieces that concatenates to a normal piece, best piece first."""
    normal = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i))
              and sp.id_to_piece(i) not in ("<start_of_turn>", "<end_of_turn>", "\n\n")}
    ranked = []
    for piece, i in normal.items():
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                ranked.append((-sp.get_score(i), i, vocab[left], vocab[right], left, right))
    return [(l, r) for *_, l, r in sorted(ranked)]


def build(sp: spm.SentencePieceProcessor, layout: str) -> Tokenizer:
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    tok = Tokenizer(models.BPE(vocab, merges_of(sp, vocab), unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    decode = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if layout == "llama":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        decode.append(decoders.Strip(" ", 1, 0))
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    elif layout == "mistral":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        decode = [decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False),
                  decoders.ByteFallback(), decoders.Fuse()]
    else:  # gemma
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    tok.decoder = decoders.Sequence(decode)
    specials = ["<unk>", "<s>", "</s>"]
    if layout == "gemma":
        specials += ["<start_of_turn>", "<end_of_turn>"]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    if layout == "gemma":
        tok.add_tokens([AddedToken("\n\n", normalized=False, special=False)])
    return tok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "tests", "data"))
    args = ap.parse_args()
    for name, model, golden in [("llama", "spm_tiny.model", "tokenizer_spm_tiny.json"),
                                ("mistral", "spm_tiny.model", "tokenizer_spm_tiny.json"),
                                ("gemma", "spm_gemma.model", "tokenizer_spm_gemma.json")]:
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args.outdir, model))
        tok = build(sp, name)
        with open(os.path.join(args.outdir, golden), encoding="utf-8") as f:
            texts = [c["text"] for c in json.load(f)["cases"]]
        texts += EXTRA
        cases, same_as_spm = [], 0
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            spm_ids = sp.encode(text)
            case = {"text": text, "ids": ids, "sentencepiece_ids_equal": ids == spm_ids}
            same_as_spm += ids == spm_ids
            back = tok.decode(ids, skip_special_tokens=False)
            if back != text:
                case["decoded"] = back
            cases.append(case)
        hf_dir = os.path.join(args.outdir, f"hf_tokenizer_spm_{name}")
        os.makedirs(hf_dir, exist_ok=True)
        tok.save(os.path.join(hf_dir, "tokenizer.json"))
        config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                  "chat_template": TEMPLATE}
        if name != "llama":  # Llama's post-processor says it
            config["add_bos_token"] = True
        with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=1)
        doc = {"hf_dir": os.path.basename(hf_dir),
               "reference": "Hugging Face tokenizers " + __import__("tokenizers").__version__
               + f": the {name} tokenizer.json layout over {model}, encode(add_special_tokens=False);"
               " made by tests/reference/make_spm_tokenizer_json.py.",
               "cases": cases}
        out = os.path.join(args.outdir, f"tokenizer_hf_spm_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=0)
            f.write("\n")
        print(f"{name}: {len(cases)} cases, {same_as_spm} equal to sentencepiece, "
              f"{sum('decoded' in c for c in cases)} decode differently")
    return 0


if __name__ == "__main__":
    sys.exit(main())

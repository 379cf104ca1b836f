"""Tiny SentencePiece-BPE vocabulary as a vocab-only GGUF, plus golden ids from sentencepiece.

Produces, for spm_tiny (Llama 2 style) and spm_gemma (Gemma style: add_dummy_prefix off,
split_digits, user-defined <start_of_turn> <end_of_turn> and "\\n\\n", the GGUF's
add_space_prefix false and those pieces USER_DEFINED):
    tests/data/spm_tiny.gguf            vocab-only GGUF (no tensors), ~20 KB:
        general.architecture='llama', general.name='spm-tiny',
        tokenizer.ggml.model='llama', tokenizer.ggml.pre='default',
        tokenizer.ggml.tokens / scores (float32) / token_type (int32: NORMAL=1, UNKNOWN=2,
        CONTROL=3, USER_DEFINED=4, UNUSED=5, BYTE=6), bos/eos/unknown_token_id (1/2/0),
        tokenizer.ggml.add_bos_token=True, tokenizer.ggml.add_space_prefix=True.
    tests/data/spm_tiny.model           the trained sentencepiece model (kept so the goldens can
                                        be regenerated/inspected without retraining)
    tests/data/tokenizer_spm_tiny.json
        {"gguf_file": "spm_tiny.gguf", "reference": "...",
         "cases": [{"text", "ids", "decoded", "hf_ids", "hf_matches"}, ...]}
        ids     = sentencepiece encode(text) (no BOS; add_bos_token is applied by the caller)
        decoded = sentencepiece decode(ids) (== text for every case unless listed in the
                  printed summary; identity normalization keeps text unchanged)
        hf_ids  = transformers' GGUF tokenizer (tests/reference/hf_tokenizer.py) on the same GGUF,
                  add_special_tokens=False; hf_matches = (hf_ids == ids). Informational only:
                  sentencepiece is the reference.

Training (deterministic): sentencepiece BPE, vocab_size=800, byte_fallback=True,
normalization_rule_name=identity, add_dummy_prefix=True, remove_extra_whitespaces=False,
split_digits=False (default), num_threads=1, character_coverage=0.9995 (rare accented letters
in the corpus fall outside coverage and exercise byte fallback), unk=0 '<unk>', bos=1 '<s>',
eos=2 '</s>', no pad, on a seeded generated English-ish corpus (SEED below).

How to run (from the repository root)
    /tmp/refvenv/bin/python tests/reference/make_spm_vocab.py [--outdir tests/data]

Requirements
    tests/reference/requirements.txt (sentencepiece==0.2.3, gguf==0.19.0, transformers==5.24.0,
    tokenizers==0.23.3, numpy). No torch, no network.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

SEED = 1234
VOCAB_SIZE = 800

SYLLABLES = (
    "ka ta na ma ra sa la pa ba da ga ha wa ya ze te ne me re se le pe be de ge he we "
    "ki ti ni mi ri si li pi bi di gi hi ko to no mo ro so lo po bo do go ho ku tu nu mu "
    "ru su lu pu bu du gu hu an en in on un ar er ir or ur ing ed ly tion ness ment able"
).split()
COMMON = (
    "the of and to a in is it you that he was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your how said "
    "an each she which do their time if will way about many then them write would like so these "
    "her long make thing see him two has look more day could go come did number sound no most "
    "people my over know water than call first who may down side been now find any new work part "
    "take get place made live where after back little only round man year came show every good "
    "me give our under name very through just form sentence great think say help low line differ "
    "turn cause much mean before move right boy old too same tell does set three want air well "
    "also play small end put home read hand port large spell add even land here must big high such"
).split()
RARE = ["café", "naïve", "façade", "résumé", "jalapeño", "über", "Zoë", "coöperate", "Ångström", "smörgåsbord"]


def make_corpus(rng: random.Random) -> list[str]:
    lines = []
    vocab = COMMON + ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    for i in range(6000):
        n = rng.randint(3, 18)
        words = []
        for _ in range(n):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(COMMON)
            elif r < 0.93:
                w = rng.choice(vocab)
            elif r < 0.97:
                w = str(rng.randint(0, 99999))
            elif r < 0.985:
                w = rng.choice(["(", ")", "-", "\"", "'s", ":", ";", "&", "%", "$"]) + rng.choice(COMMON)
            else:
                w = rng.choice(RARE) if rng.random() < 0.05 else rng.choice(COMMON).upper()
            words.append(w)
        words[0] = words[0].capitalize()
        sep = "  " if rng.random() < 0.05 else " "
        lines.append(sep.join(words) + rng.choice([".", ".", ".", "?", "!", ",", ""]))
    return lines


# Gemma's vocabulary style: no dummy "▁" prefix, every digit alone, and user-defined
# pieces (its turn markers, a run of newlines) matched whole wherever they appear.
GEMMA_USER_DEFINED = ["<start_of_turn>", "<end_of_turn>", "\n\n"]


def train(lines: list[str], gemma: bool = False) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    extra = {"split_digits": True, "user_defined_symbols": GEMMA_USER_DEFINED} if gemma else {}
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=not gemma,
        remove_extra_whitespaces=False,
        **extra,
        character_coverage=0.9995,
        num_threads=1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        shuffle_input_sentence=False,
        input_sentence_size=0,
        minloglevel=2,
    )
    return buf.getvalue()


def write_gguf(sp, path: str, gemma: bool = False) -> None:
    import gguf

    n = sp.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            t = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            t = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            t = gguf.TokenType.BYTE
        elif sp.id_to_piece(i) in GEMMA_USER_DEFINED and gemma:
            t = gguf.TokenType.USER_DEFINED
        else:
            t = gguf.TokenType.NORMAL
        types.append(int(t))
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("spm-gemma" if gemma else "spm-tiny")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(np.asarray(scores, dtype=np.float32).tolist())
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_space_prefix(not gemma)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def golden_texts(rng: random.Random) -> list[str]:
    fixed = [
        "Hello world",
        "hello world",
        "The number of people who came was small.",
        "Write a sentence about the water.",
        "a",
        "A",
        "the",
        " the",
        "  the",
        "the ",
        "the  ",
        " ",
        "  ",
        "     ",
        "word    word",
        " leading space",
        "   leading spaces",
        "trailing space ",
        "trailing spaces   ",
        "  both sides  ",
        "line one\nline two",
        "\n",
        "\n\n",
        "ends with newline\n",
        "\nstarts with newline",
        "tab\tseparated",
        "\t",
        "windows\r\nline",
        "0",
        "42",
        "12345",
        "3.14159",
        "1,234,567",
        "2024-06-11",
        "call 555-0100 now",
        "zyzzyva quixotic xylophone",
        "Pneumonoultramicroscopicsilicovolcanoconiosis",
        "supercalifragilistic",
        "OUT-OF-VOCABULARY WORDS IN CAPS",
        "qwxz jjjj vvvv kkkk",
        "café",
        "naïve résumé",
        "über Zoë smörgåsbord",
        "Crème brûlée",
        "Ærøskøbing",
        "Tiếng Việt",
        "Привет мир",
        "Γειά σου",
        "مرحبا",
        "שלום",
        "नमस्ते",
        "你好",
        "你好，世界",
        "日本語",
        "こんにちは",
        "한국어",
        "😀",
        "emoji 😀 inside",
        "👨\u200d👩\u200d👧",
        "🇺🇸",
        "👍🏽",
        "e\u0301",
        "\u00a0",
        "non\u00a0breaking",
        "\u3000",
        "zero\u200bwidth",
        "\ufeffbom",
        "<s>",
        "</s>",
        "<unk>",
        "text with <s> inside",
        "▁",
        "▁▁already▁escaped",
        "it's don't won't",
        "(parenthesized) [bracketed] {braced}",
        "\"quoted\" 'single'",
        "a.b,c;d:e!f?g",
        "$100 & 50% off!",
        "\x00",
        "\x7f",
        "~`|\\^",
        "def f(x):\n    return x + 1\n",
        "{\"key\": [1, 2, 3]}",
    ]
    words = COMMON + RARE + ["zyx", "qwerty", "blorp", "xenon", "fjord", "glyph", "rhythm"]
    extra = ["é", "ü", "ñ", "中", "😀", "ß", "ø", "→", "€", "\t", "\n", "  ", "   "]
    rnd = []
    for _ in range(60):
        n = rng.randint(1, 12)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.75:
                w = rng.choice(words)
                if rng.random() < 0.15:
                    w = w.capitalize()
            elif r < 0.85:
                w = str(rng.randint(0, 10 ** rng.randint(1, 9)))
            else:
                w = "".join(rng.choice(extra) for _ in range(rng.randint(1, 3)))
            parts.append(w)
        s = "".join(p + rng.choice([" ", " ", " ", "", "  ", "\n"]) for p in parts)
        if rng.random() < 0.5:
            s = s.rstrip(" \n")
        if rng.random() < 0.15:
            s = " " + s
        if s:
            rnd.append(s)
    seen, out = set(), []
    for t in fixed + rnd:
        if t and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def make_one(outdir: str, name: str, gemma: bool) -> None:
    import sentencepiece as spm

    args = argparse.Namespace(outdir=outdir)
    rng = random.Random(SEED)
    model = train(make_corpus(rng), gemma)
    model_path = os.path.join(args.outdir, f"{name}.model")
    with open(model_path, "wb") as f:
        f.write(model)
    sp = spm.SentencePieceProcessor(model_proto=model)

    gguf_path = os.path.join(args.outdir, f"{name}.gguf")
    write_gguf(sp, gguf_path, gemma)

    from hf_tokenizer import dump_cases_json, load_reference_tokenizer, reference_description

    hf = load_reference_tokenizer(gguf_path, patched=False)

    cases, n_hf_diff, not_roundtrip = [], 0, []
    for text in golden_texts(random.Random(SEED + 1)):
        ids = sp.encode(text)
        decoded = sp.decode(ids)
        hf_ids = hf.encode(text, add_special_tokens=False)
        ok = hf_ids == ids
        n_hf_diff += not ok
        if decoded != text:
            not_roundtrip.append((text, decoded))
        cases.append({"text": text, "ids": ids, "decoded": decoded, "hf_ids": hf_ids, "hf_matches": ok})

    n_byte = sum(sp.is_byte(i) for i in range(sp.get_piece_size()))
    doc = {
        "gguf_file": os.path.basename(gguf_path),
        "reference": (
            f"ids/decoded: sentencepiece {spm.__version__} SentencePieceProcessor.encode/decode with the model in "
            f"{name}.model (BPE, vocab {sp.get_piece_size()} incl. {n_byte} byte-fallback pieces, identity "
            "normalization, add_dummy_prefix=" + str(not gemma) + (", split_digits, user-defined " + repr(GEMMA_USER_DEFINED) if gemma else "") + ", remove_extra_whitespaces=False, trained by "
            f"tests/reference/make_spm_vocab.py seed {SEED}); ids exclude BOS (GGUF says add_bos_token=true, "
            "prepend 1 yourself). Control-token text such as '<s>' in the input is plain text for sentencepiece. "
            "decoded == text except where the input itself contains U+2581 (decoded as a space). "
            "hf_ids (informational): " + reference_description(patched=False)
            + " encode(add_special_tokens=False)."
        ),
        "cases": cases,
    }
    json_path = os.path.join(args.outdir, f"tokenizer_{name}.json")
    with open(json_path, "w", encoding="utf-8") as f:
        f.write(dump_cases_json(doc))

    for p in (model_path, gguf_path, json_path):
        print(f"wrote {p}: {os.path.getsize(p)} bytes")
    print(f"vocab {sp.get_piece_size()} ({n_byte} byte pieces); {len(cases)} cases")
    print(f"sentencepiece vs transformers-GGUF disagreements: {n_hf_diff}")
    for c in cases:
        if not c["hf_matches"]:
            print("  differs:", repr(c["text"])[:70], c["ids"][:12], c["hf_ids"][:12])
    print(f"sentencepiece decode(encode(text)) != text: {len(not_roundtrip)}")
    for t, d in not_roundtrip:
        print("  not round-trip:", repr(t)[:60], "->", repr(d)[:60])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "tests", "data"))
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)

    import sentencepiece as spm

    for name, gemma in (("spm_tiny", False), ("spm_gemma", True)):
        make_one(args.outdir, name, gemma)
    return 0


if __name__ == "__main__":
    sys.exit(main())

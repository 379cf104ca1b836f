"""Tiny byte-level BPE vocabularies for every byte-level pre-tokenizer family tandem
implements, as vocab-only GGUFs, with golden ids from Hugging Face `tokenizers`.

Why
    The default model (SmolLM2) covers only the 'smollm' pre-tokenizer. Llama 3, Qwen2 and
    GPT-2 split text with their own regular expressions before BPE; tandem runs them on
    PCRE2 (common/tokenizer/pre_tokenizer.cc), Hugging Face on its own regex engine. These
    goldens check that both split, and so encode, every case the same way.

Produces, for each family in FAMILIES (gpt2, llama3, qwen2, qwen35, tekken, gpt4o,
chatglm_bpe, deepseek_llm, deepseek_coder, falcon, mpt):
    tests/data/bpe_<name>.gguf        vocab-only GGUF (~30 KB): general.architecture='llama',
        tokenizer.ggml.model='gpt2', tokenizer.ggml.pre=PRE, tokens, token_type
        (NORMAL=1, CONTROL=3, USER_DEFINED=4 for mpt's space runs), merges, bos/eos ids of
        the two CONTROL tokens, add_bos false.
    tests/data/tokenizer_<name>.json  {"gguf_file", "pre", "reference",
        "cases": [{"text", "ids"[, "decoded"]}]}: ids = the Hugging Face tokenizer's
        encode(text, add_special_tokens=False); decoded where its decode differs from text.

The Hugging Face tokenizer for each is built as the published tokenizer.json of that model
family builds it (FAMILIES spells each out; llama3 and tekken with ignore_merges and whole
words added to the vocabulary that no merge makes, mpt with NFC and GPT-NeoX's space-run
added tokens), e.g.: GPT-2 ByteLevel(add_prefix_space=False, use_regex=True); Llama 3 and Qwen2
Sequence([Split(Regex(<the family's pattern>), 'isolated'), ByteLevel(add_prefix_space=False,
use_regex=False)]), a ByteLevel decoder, the two CONTROL tokens as special added tokens. Its
BPE model is trained (tokenizers' BpeTrainer, vocab 1500, the 256-byte initial alphabet) on
the case texts themselves, so merges apply across the cases.

Qwen2, Qwen3.5 and MPT publish an NFC normalizer before splitting. Their Hugging Face
tokenizers here are not assembled by this script: they are transformers' own tokenizer
classes (Qwen2Tokenizer, Qwen3_5Tokenizer, GPTNeoXTokenizer: the published pipeline, its
regex and normalizer as transformers writes them) over the trained vocabulary and merges.
llama.cpp applies no normalizer to a GGUF, so for these families the golden also holds
"llama_cpp_ids" wherever `llama-tokenize` (--llama-tokenize) gives other ids for the GGUF:
tandem's GGUF path follows llama.cpp, its Hugging Face directory path Hugging Face.

And tests/data/tokenizer_qwen2_nfc.json with tests/data/bpe_qwen2_nfc.gguf and
tests/data/hf_tokenizer_qwen2_nfc/ (Qwen2Tokenizer.save_pretrained): a vocabulary trained on
~1,200 texts that NFC changes (nfc_cases: decomposed Latin, Greek, Cyrillic and Vietnamese,
combining marks in every order, Hangul syllables as conjoining jamo, singletons such as the
Angstrom sign and CJK compatibility ideographs, composition exclusions, ZWJ emoji beside
them), in both their composed and decomposed forms, so a tokenizer that skips NFC gives
other ids; ids from Hugging Face and from llama.cpp for each.

Cases: the default model's golden texts (tests/reference/make_tokenizer_golden.py
build_cases, ~500: prose, code, numbers, contractions in both cases, CJK, emoji, scripts,
whitespace runs, CR/LF mixes, special-token text) plus digit runs that separate the
patterns (\\p{N} vs \\p{N}{1,3}).

How to run (from the repository root; no torch, no network)
    /tmp/refvenv/bin/python tests/reference/make_pretokenizer_goldens.py \
        --llama-tokenize LLAMA_CPP_BUILD/bin/llama-tokenize [--outdir tests/data]
Requirements: tests/reference/requirements.txt (tokenizers==0.23.3, transformers==5.24.0,
gguf==0.19.0), and a llama.cpp build's llama-tokenize as the GGUF comparator (the goldens
were made with llama.cpp 0c1e570).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from make_tokenizer_golden import build_cases  # noqa: E402

# The splitting patterns as the families' tokenizer.json files publish them.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
         rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _chars(ranges):
    """A character class body of literal characters, as DeepSeek's tokenizer.json writes it."""
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


_DEEPSEEK_LETTERS = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA),
    (0x1BC, 0x1BF), (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377),
    (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C),
    (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F), (0x531, 0x556),
    (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA), (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107), (0x210A, 0x2113),
    (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128),
    (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149),
    (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787),
    (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]
_DEEPSEEK_PUNCT = [(0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E),
                   (0x2018, 0x201F), (0x3000, 0x3002)]
_DEEPSEEK_CJK = "[" + _chars([(0x4E00, 0x9FA5), (0x800, 0x4E00), (0xAC00, 0xD7FF)]) + "]+"
DEEPSEEK_LLM = [r"[\r\n]", r"\s?[" + _chars(_DEEPSEEK_LETTERS) + "]+",
                r"\s?[" + _chars(_DEEPSEEK_PUNCT) + "]+", r"\s+$", _DEEPSEEK_CJK, r"\p{N}+"]
DEEPSEEK_CODER = [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK, r"\p{N}"]


def _splits(patterns, trim_offsets=True):
    return lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in patterns]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=trim_offsets,
                                    use_regex=False)])


FAMILIES = {
    # name: (tokenizer.ggml.pre, HF pre-tokenizer[, options])
    "gpt2": ("gpt2", lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
    # ignore_merges, as Llama 3's tokenizer.json sets: whole words added to the trained
    # vocabulary without merges must come out as one token.
    "llama3": ("llama-bpe", _splits([LLAMA3]), {"ignore_merges": True}),
    "qwen2": ("qwen2", _splits([QWEN2], trim_offsets=False), {"hf_class": "Qwen2Tokenizer"}),
    "qwen35": ("qwen35", _splits([QWEN35], trim_offsets=False),
               {"hf_class": "Qwen3_5Tokenizer"}),
    "tekken": ("tekken", _splits([TEKKEN]), {"ignore_merges": True}),
    "gpt4o": ("gpt-4o", _splits([GPT4O])),
    # GLM-4 (llama.cpp's chatglm-bpe): Llama 3's pattern, without ignore_merges.
    "chatglm_bpe": ("chatglm-bpe", _splits([LLAMA3])),
    "deepseek_llm": ("deepseek-llm", _splits(DEEPSEEK_LLM)),
    "deepseek_coder": ("deepseek-coder", _splits(DEEPSEEK_CODER)),
    # Falcon: punctuation runs, GPT-2 splitting with the byte spelling, then digit runs
    # and groups of three digits on the spelled pieces.
    "falcon": ("falcon", lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False)])),
    # MPT (GPT-NeoX's tokenizer): GPT-2 splitting, and runs of 2..24 spaces as
    # non-special added tokens (user-defined in the GGUF), matched before splitting.
    "mpt": ("mpt", lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            {"space_runs": True, "hf_class": "GPTNeoXTokenizer"}),
}
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]
# Families also written as Hugging Face tokenizer directories (tokenizer.json,
# tokenizer_config.json): tests/data/hf_tokenizer_<name>/.
HF_DIRS = ("gpt2", "llama3", "qwen2", "tekken", "mpt")
# GPT-2's spelling of each byte (bytes_to_unicode).
BYTE_SPELLING = {}
_n = 0
for _b in range(256):
    if 0x21 <= _b <= 0x7E or 0xA1 <= _b <= 0xAC or _b >= 0xAE:
        BYTE_SPELLING[_b] = chr(_b)
    else:
        BYTE_SPELLING[_b] = chr(256 + _n)
        _n += 1
# Pieces given a token of their own (not made by any merge) under ignore_merges.
WHOLE_WORDS = [" Vi\u1ec7t", " quickly", " Nam", "Hello", "\u4e16\u754c", "HelloWorld"]
EXTRA = ["Cửa Việt", "Việt Nam quickly", "Hello quickly 世界", "x  y   z    w", "½ ¾ ²³ ¹",
         "4½ months", "12½3456", "a+b=c|d~e^f`g$h", "HelloWorld XMLHttpRequest iPhone",
         "1234567", "x=123456789;", "3.14159 2.71828", "In 2024, 12345 people", "00:11:22",
         "١٢٣٤٥ ٦٧", "IT'S I'M YOU'LL THEY'D WE'VE", "a\r\n\r\nb", "  \n  \n", "tab\t\tsep",
         "\u00a0nbsp\u00a0", "line1\nline2\r\n"]


def build(name, texts, train_texts=None):
    pre, make_pre, *rest = FAMILIES[name]
    options = rest[0] if rest else {}
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = make_pre()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_texts or texts, trainer)
    user_defined = []
    if options.get("ignore_merges"):
        model = json.loads(tok.to_str())["model"]
        vocab, merges = model["vocab"], [tuple(m) for m in model["merges"]]
        # Whole pieces the merges do not reach: each becomes a token of its own.
        added = 0
        for word in WHOLE_WORDS:
            spelled = "".join(BYTE_SPELLING[b] for b in word.encode("utf-8"))
            if spelled not in vocab:
                vocab[spelled] = len(vocab)
                added += 1
        assert added >= 2, f"{name}: the trained vocabulary already holds the whole words"
        tok.model = models.BPE(vocab, merges, ignore_merges=True)
    if options.get("hf_class"):
        # The published pipeline (normalizer, splitting, byte level) as transformers builds
        # it, over the trained vocabulary and merges.
        import transformers
        model = json.loads(tok.to_str())["model"]
        published = getattr(transformers, options["hf_class"])(
            vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
            bos_token=SPECIAL[0], eos_token=SPECIAL[1], pad_token=SPECIAL[1], unk_token=None)
        tok = published.backend_tokenizer
        assert json.loads(tok.to_str())["normalizer"] == {"type": "NFC"}, options["hf_class"]
        assert len(tok.get_vocab()) == len(model["vocab"]), "the class added tokens"
    if options.get("space_runs"):
        user_defined = [" " * n for n in range(24, 1, -1)]
        tok.add_tokens(user_defined)
    return pre, tok, user_defined


def write_vocab_gguf(path, tok, arch, name, model, type_of, pre=None, scores=False,
                     special=None):
    """A vocab-only GGUF of a Hugging Face tokenizer: tokens in id order, their types
    (type_of(token)), its merges, `special`'s (default SPECIAL's) first two as BOS and EOS,
    add_bos false."""
    special = special or SPECIAL
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m
              for m in json.loads(tok.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name(name)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([type_of(t) for t in tokens])
    if scores:
        w.add_token_scores([0.0] * len(tokens))
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[special[0]])
    w.add_eos_token_id(vocab[special[1]])
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gguf(path, name, pre, tok, user_defined):
    write_vocab_gguf(path, tok, "llama", f"bpe-{name}", "gpt2",
                     lambda t: gguf.TokenType.CONTROL if t in SPECIAL else
                     gguf.TokenType.USER_DEFINED if t in user_defined else gguf.TokenType.NORMAL,
                     pre=pre)


def write_golden(path, doc):
    """A golden as the tests read it: UTF-8 JSON, one value per line, a final newline."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")


def golden_cases(tok, texts, llama_ids=None):
    """Each text's ids (encode without special tokens), and its decoding where that
    differs from the text; and how many do. With `llama_ids` (llama.cpp's ids of each
    text for the GGUF), "llama_cpp_ids" where those differ."""
    cases, differs = [], 0
    for i, text in enumerate(texts):
        ids = tok.encode(text, add_special_tokens=False).ids
        case = {"text": text, "ids": ids}
        if llama_ids is not None and llama_ids[i] != ids:
            case["llama_cpp_ids"] = llama_ids[i]
        back = tok.decode(ids, skip_special_tokens=False)
        if back != text:
            case["decoded"] = back
            differs += 1
        cases.append(case)
    return cases, differs


def llama_cpp_ids(binary, gguf_path, texts):
    """llama.cpp's ids of each text for the GGUF: `llama-tokenize -f` on the text's
    bytes, special tokens parsed, no BOS."""
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(binary)))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "text")
        for text in texts:
            with open(path, "wb") as f:
                f.write(text.encode("utf-8"))
            r = subprocess.run([binary, "-m", gguf_path, "-f", path, "--ids", "--no-escape",
                                "--no-bos", "--log-disable"], capture_output=True, env=env)
            if r.returncode != 0:
                raise RuntimeError(f"llama-tokenize failed on {text!r}: {r.stderr[-500:]!r}")
            out.append(json.loads(r.stdout.decode().strip().splitlines()[-1]))
    return out


# Words with accents, written composed here; the cases use their decomposed forms.
NFC_WORDS = [
    "café", "naïve", "résumé", "façade", "jalapeño", "Ångström", "Zürich", "São Paulo",
    "Kraków", "Dvořák", "Øresund", "Málaga", "Crème brûlée", "Đà Nẵng", "Việt Nam",
    "Hồ Chí Minh", "tiếng Việt", "Nguyễn", "phở bò", "Ελληνικά", "ἀρχὴ", "Ὀδυσσεύς",
    "Йошкар-Ола", "ёлка", "Ђорђе", "Ќ Ѓ Ї", "Şişli", "Ğ ğ İ", "Łódź", "Ústí nad Labem",
    "Ærø", "Ísland", "Ñandú", "Pokémon", "Beyoncé", "über", "Mañana", "ŝanĝo", "Ṭhākur",
    "Ḥaḍramawt", "Ǖ ǖ Ǘ ǘ", "Ǹ ǹ", "Ȧ ȧ Ȯ ȯ", "ạ ả ấ ầ ẩ ẫ ậ", "ệ ỉ ị ọ ỏ ố ồ ổ ỗ ộ",
]
# Combining marks of several classes (230 above, 220 below, 202 attached, 216 ...).
MARKS = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0304", "\u0306", "\u0307", "\u0308",
         "\u030a", "\u030b", "\u030c", "\u0323", "\u0324", "\u0325", "\u0327", "\u0328",
         "\u0331", "\u031b", "\u0345", "\u0342", "\u0313", "\u0314"]
BASES = "aeiouyAEIOUYcgknrswzCGKNRSWZαεηιουωΑΕΗΙΟΥΩиеИЕ"
# Singletons NFC maps to another character, and characters NFC leaves decomposed.
SINGLETONS = ["\u212b", "\u2126", "\u212a", "\u0340", "\u0341", "\u0343", "\u0374",
              "\u037e", "\u0387", "\u1f71", "\u1fbb", "\u2000", "\u2001", "\u2329",
              "\u232a"] + [chr(c) for c in range(0xF900, 0xF920)]
EXCLUSIONS = ["\u0958", "\u0959", "\u095a", "\u095b", "\u09dc", "\u0a33", "\u0b5c",
              "\ufb1d", "\ufb1f", "\ufb2a", "\ufb2b", "\ufb4e", "\u0f43", "\u2adc"]
ZWJ = ["\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
       "\U0001F3F3\ufe0f\u200d\U0001F308", "\U0001F469\U0001F3FD\u200d\U0001F4BB",
       "\u2764\ufe0f\u200d\U0001F525", "\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1",
       "\U0001F441\ufe0f\u200d\U0001F5E8\ufe0f"]


def _hangul(rng, n):
    """n Hangul syllables, random."""
    return "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(n))


def nfc_cases():
    """~1,200 texts, every one changed by NFC (asserted), deterministic."""
    rng = random.Random(20261207)
    nfd = lambda t: unicodedata.normalize("NFD", t)  # noqa: E731
    texts = []
    for w in NFC_WORDS:  # decomposed words, alone and in a sentence
        texts += [nfd(w), nfd(f"The word {w} is here."), nfd(f"{w.upper()} {w.lower()}!")]
    for _ in range(300):  # a base and one to four marks in random order
        word = "".join(rng.choice(BASES) + "".join(rng.sample(MARKS, rng.randint(1, 4)))
                       for _ in range(rng.randint(1, 4)))
        texts.append(f"{word} {rng.choice(['x', 'word', '42', ''])}".strip())
    for _ in range(250):  # Hangul as conjoining jamo (LV, LVT), beside syllables and spaces
        jamo = nfd(_hangul(rng, rng.randint(1, 6)))
        texts.append(rng.choice([jamo, f"{jamo} {_hangul(rng, 2)}", f"한국어 {jamo}.",
                                 f"{jamo}\n{jamo}"]))
    for _ in range(120):  # jamo sequences built by hand: L V, L V T
        text = ""
        for _ in range(rng.randint(1, 5)):
            text += chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21))
            if rng.random() < 0.5:
                text += chr(0x11A8 + rng.randrange(27))
        texts.append(text)
    for _ in range(200):  # singletons and exclusions among words and marks
        parts = [rng.choice(SINGLETONS + EXCLUSIONS) for _ in range(rng.randint(1, 3))]
        parts.append(nfd(rng.choice(NFC_WORDS)))
        rng.shuffle(parts)
        texts.append(" ".join(parts))
    for _ in range(120):  # ZWJ emoji beside decomposed text
        texts.append(f"{rng.choice(ZWJ)} {nfd(rng.choice(NFC_WORDS))} {rng.choice(ZWJ)}")
    everything = [chr(c) for c in range(0xA0, 0x30000)
                  if unicodedata.normalize("NFD", chr(c)) != chr(c)]
    for _ in range(100):  # any decomposable character, decomposed, among ASCII
        chars = [nfd(rng.choice(everything)) for _ in range(rng.randint(1, 4))]
        texts.append("a " + " ".join(chars) + " z")
    texts = [t for t in texts if unicodedata.normalize("NFC", t) != t]
    return list(dict.fromkeys(texts))


def write_nfc_golden(args):
    """tokenizer_qwen2_nfc.json, bpe_qwen2_nfc.gguf, hf_tokenizer_qwen2_nfc/."""
    texts = nfc_cases()
    assert len(texts) >= 1000, len(texts)
    nfc = [unicodedata.normalize("NFC", t) for t in texts]
    pre, tok, _ = build("qwen2", texts, train_texts=texts + nfc)
    gguf_path = os.path.join(args.outdir, "bpe_qwen2_nfc.gguf")
    write_gguf(gguf_path, "qwen2_nfc", pre, tok, [])
    cases, _ = golden_cases(tok, texts, llama_cpp_ids(args.llama_tokenize, gguf_path, texts))
    # A tokenizer that skips NFC must be caught: most texts tokenize otherwise unnormalised.
    skipping = Tokenizer.from_str(tok.to_str())
    skipping.normalizer = normalizers.Sequence([])
    caught = sum(skipping.encode(t, add_special_tokens=False).ids != c["ids"]
                 for t, c in zip(texts, cases))
    assert caught >= 0.9 * len(cases), (caught, len(cases))
    hf_dir = os.path.join(args.outdir, "hf_tokenizer_qwen2_nfc")
    os.makedirs(hf_dir, exist_ok=True)
    tok.save(os.path.join(hf_dir, "tokenizer.json"))
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": False,
                   "tokenizer_class": "Qwen2Tokenizer"}, f, indent=1)
    differ = sum("llama_cpp_ids" in c for c in cases)
    doc = {
        "gguf_file": os.path.basename(gguf_path),
        "hf_dir": os.path.basename(hf_dir),
        "pre": pre,
        "reference": "ids: Hugging Face tokenizers " + __import__("tokenizers").__version__
        + " through transformers' Qwen2Tokenizer (NFC, then Qwen2's split) on a BPE trained on "
        "the cases composed and decomposed; llama_cpp_ids: llama.cpp's llama-tokenize on the "
        "GGUF where they differ (llama.cpp applies no normalizer); made by "
        "tests/reference/make_pretokenizer_goldens.py.",
        "cases": cases,
    }
    write_golden(os.path.join(args.outdir, "tokenizer_qwen2_nfc.json"), doc)
    print(f"qwen2_nfc: {len(cases)} cases, {len(tok.get_vocab())} tokens; without NFC "
          f"{caught} tokenize otherwise; llama.cpp differs on {differ}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "tests", "data"))
    ap.add_argument("--llama-tokenize", required=True,
                    help="llama.cpp's llama-tokenize, the GGUF comparator of the NFC families")
    args = ap.parse_args()
    texts = build_cases() + EXTRA
    for name in FAMILIES:
        pre, tok, user_defined = build(name, texts)
        gguf_path = os.path.join(args.outdir, f"bpe_{name}.gguf")
        write_gguf(gguf_path, name, pre, tok, user_defined)
        options = FAMILIES[name][2] if len(FAMILIES[name]) > 2 else {}
        llama_ids = (llama_cpp_ids(args.llama_tokenize, gguf_path, texts)
                     if options.get("hf_class") else None)
        cases, differs = golden_cases(tok, texts, llama_ids)
        if llama_ids is not None:
            # Where llama.cpp differs, it is NFC's doing.
            for c in cases:
                if "llama_cpp_ids" in c:
                    assert unicodedata.normalize("NFC", c["text"]) != c["text"], c["text"]
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
        if name in HF_DIRS:
            # The same tokenizer as a Hugging Face directory would hold it.
            hf_dir = os.path.join(args.outdir, f"hf_tokenizer_{name}")
            os.makedirs(hf_dir, exist_ok=True)
            tok.save(os.path.join(hf_dir, "tokenizer.json"))
            with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": SPECIAL[0], "eos_token": SPECIAL[1],
                           "add_bos_token": False,
                           "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
                          f, indent=1)
        out = os.path.join(args.outdir, f"tokenizer_{name}.json")
        write_golden(out, doc)
        print(f"{name}: {len(cases)} cases, {len(tok.get_vocab())} tokens, {differs} decode "
              f"differently; {os.path.getsize(gguf_path)} + {os.path.getsize(out)} bytes"
              + (f"; llama.cpp differs on {sum('llama_cpp_ids' in c for c in cases)}"
                 if llama_ids is not None else ""))
    write_nfc_golden(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

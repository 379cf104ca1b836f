"""Golden tokenizer ids for SmolLM2 (byte-level BPE, tokenizer.ggml.pre='smollm').

Produces
    tests/data/tokenizer_smollm2.json
        {"model_file": "smollm2-135m-instruct-q4_1.gguf",
         "reference": "<how produced, versions, the patch>",
         "cases": [{"text": str, "ids": [int, ...], "unpatched_matches": bool}, ...]}
    A case also gets "hf_roundtrip": false if the HF tokenizer itself fails to decode(ids) back
    to text (none are dropped).

Reference
    Hugging Face transformers' own GGUF tokenizer conversion, loaded from the same GGUF
    (tests/reference/hf_tokenizer.py: load_reference_tokenizer), encoded with
    add_special_tokens=False (no BOS; the file says tokenizer.ggml.add_bos_token=false).
    CONTROL tokens (ids 0..16: <|endoftext|>, <|im_start|>, <|im_end|>, ...) are added by
    transformers as special AddedTokens, so their text inside a string is matched whole.

    PATCH: transformers' GGUF conversion has no GGUF_PRE_TOKENIZER_SPLITS entry for pre type
    'smollm' and falls back to plain GPT-2 ByteLevel splitting (no per-digit split). SmolLM2's
    tokenizer.json and llama.cpp's 'smollm' pre-tokenizer use
        Sequence([Digits(individual_digits=True),
                  ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    and we set exactly that pre-tokenizer on the backend tokenizer loaded from the GGUF (the same
    mechanism as transformers' set_split_regex). "unpatched_matches" says whether transformers'
    unmodified tokenizer gives the same ids; the number of differences is printed.

    Every case is checked: tokenizer.decode(ids, skip_special_tokens=False,
    clean_up_tokenization_spaces=False) == text.

How to run (from the repository root)
    /tmp/refvenv/bin/python tests/reference/make_tokenizer_golden.py \
        [--model models/smollm2-135m-instruct-q4_1.gguf] [--out tests/data/tokenizer_smollm2.json]

Requirements
    tests/reference/requirements.txt (gguf==0.19.0, transformers==5.24.0, tokenizers==0.23.3,
    sentencepiece==0.2.3, numpy). No torch, no network. Deterministic (seeded RNG).
"""

from __future__ import annotations

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from hf_tokenizer import dump_cases_json, load_reference_tokenizer, reference_description  # noqa: E402

SEED = 20240611

# ---------------------------------------------------------------------------------------------
# Hand-written cases, grouped by what they exercise.
# ---------------------------------------------------------------------------------------------
PROSE = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
    "It was the best of times, it was the worst of times.",
    "Mr. Smith went to Washington D.C. on Jan. 3rd; he didn't return.",
    "e.g. i.e. etc. vs. a.m. p.m.",
    "SmolLM2 is a family of compact language models.",
    "What is the capital of France? Paris.",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_SNAKE",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "Supercalifragilisticexpialidocious!!!",
    "...",
    "?!?!",
    "--- *** ___ === +++ ~~~",
    "(parentheses) [brackets] {braces} <angles>",
    "\"double quotes\" 'single quotes' `backticks`",
    "email: someone@example.com, url: https://example.org/path?q=1&x=y#frag",
    "@user #hashtag $100 50% ^caret &amp; *star*",
    "a",
    "I",
    " a",
    "A.",
]

CONTRACTIONS = [
    "it's",
    "don't",
    "you're",
    "we've",
    "I'm",
    "they'll",
    "he'd",
    "IT'S",
    "DON'T",
    "YOU'RE",
    "WE'VE",
    "I'M",
    "THEY'LL",
    "HE'D",
    "John'S book",
    "John's book",
    "It's a dog's life, isn't it? We'd've thought so.",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll",
    "''quoted''",
    "'",
    "l'homme d'état",
    "It\u2019s curly",
    "o'clock 90's 2000's",
]

CODE = [
    "def f(x):\n    return x * 2\n",
    "import numpy as np\nimport os, sys\n\nif __name__ == \"__main__\":\n    main()\n",
    "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n",
    "for i in range(10):\n\tprint(i, end='')\n",
    "lambda x: x**2 + 3*x - 1",
    "x = [i for i in range(100) if i % 3 == 0]",
    "#include <stdio.h>\nint main(void) {\n    printf(\"hello\\n\");\n    return 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto it = v.begin();",
    "std::unique_ptr<Foo> p = std::make_unique<Foo>(42);",
    "if (a != b && c >= d || !e) { x <<= 2; y >>= 1; }",
    "int* ptr = &arr[0]; ptr->next = nullptr; // comment",
    "/* block\n * comment\n */",
    "{\"name\": \"tandem\", \"version\": \"0.1.0\", \"deps\": []}",
    "{\n  \"a\": 1,\n  \"b\": [true, false, null],\n  \"c\": {\"d\": -1.5e-3}\n}",
    "[{\"id\":1},{\"id\":2}]",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "ls -la | grep -v '^d' | awk '{print $5}' > /tmp/out.txt 2>&1",
    "export PATH=\"$HOME/.local/bin:$PATH\"",
    "git commit -m \"fix: handle edge case\" && git push origin main",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;",
    "<div class=\"x\"><p>Hello</p></div>",
    "fn main() { let v: Vec<u8> = vec![0; 16]; }",
    "    indented four\n        indented eight\n",
    "a==b!=c<=d>=e->f=>g::h",
    "0x1F 0b1010 0o777 1e10 3.14f 1_000_000",
]

NUMBERS = [
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345678901234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "1,234,567",
    "1,234,567.89",
    "-42",
    "+1 (555) 123-4567",
    "2024-06-11T12:34:56Z",
    "v1.2.3",
    "10^9 + 7 = 1000000007",
    "999999999999999999999999999999",
    "abc123def456",
    "x1 y22 z333 w4444",
    " 1 2 3 4 5",
    "1.0e-10",
    "100%",
    "$3.50",
    "\u00bd \u00b2 \u00b3 \u2155 \u2167 \u2460",
    "\u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13",
    "00000000",
    "3rd 21st 42nd 100th",
]

WHITESPACE = [
    " ",
    "  ",
    "   ",
    "        ",
    "                                        ",
    "\t",
    "\t\t\t",
    "\n",
    "\n\n",
    "\n\n\n\n",
    "\r\n",
    "\r\n\r\n",
    "\r",
    " \n ",
    "trailing space ",
    "trailing spaces     ",
    " leading space",
    "     leading spaces",
    "  both  ",
    "multiple    spaces    between    words",
    "tab\tseparated\tvalues",
    "line one\nline two\nline three",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \r\n whitespace",
    "word\n\n\nword",
    "\n leading newline",
    "trailing newline\n",
    "  \n  \n  ",
    "a \u00a0b",
    "no\u00a0break\u00a0space",
    "thin\u2009space",
    "ideographic\u3000space",
    "zero\u200bwidth\u200bspace",
    "\ufeffBOM at start",
    "BOM\ufeffin middle",
    "en\u2002em\u2003spaces",
    "line\u2028separator\u2029paragraph",
    "next\u0085line",
    "\u00a0",
    "\u3000",
    "\u200b",
    "\ufeff",
    "\x0b\x0c vertical tab and form feed",
]

LATIN = [
    "café",
    "naïve résumé",
    "Ærøskøbing",
    "straße Straße STRASSE",
    "Crème brûlée à la française",
    "¿Dónde está la biblioteca? ¡Aquí!",
    "São Paulo, Brasil",
    "Zürich, Österreich, Ångström",
    "Łódź, Kraków, Gdańsk",
    "Tiếng Việt có dấu",
    "Xin chào, tôi tên là Nguyễn Văn A.",
    "Phở bò tái chín",
    "ñ Ñ ç Ç ß ø Ø å Å æ Æ œ Œ",
    "©®™ ° ± × ÷ µ ¶ § ¬",
    "İstanbul ığdır şçöü",
    "Čeština: Příliš žluťoučký kůň",
]

COMBINING = [
    "e\u0301",
    "cafe\u0301",
    "n\u0303",
    "a\u0300\u0301\u0302\u0303",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u0915\u094d\u0937",
    "\u1100\u1161\u11a8",
    "\u0301 leading combining",
]

CJK = [
    "你好",
    "你好，世界！",
    "我爱自然语言处理。",
    "中华人民共和国成立于1949年。",
    "繁體中文：這是一個測試。",
    "日本語のテキストです。",
    "こんにちは、世界！",
    "カタカナとひらがなと漢字",
    "東京タワーは333メートルです。",
    "ｶﾀｶﾅ 半角",
    "한국어 텍스트입니다.",
    "안녕하세요, 세계!",
    "서울특별시 강남구",
    "中文English混合text测试",
    "日本語 and English mixed",
    "𠀀𠀁𪚥",
]

EMOJI = [
    "😀",
    "Hello 👋 world 🌍",
    "👍👍🏻👍🏼👍🏽👍🏾👍🏿",
    "👨\u200d👩\u200d👧\u200d👦",
    "👩\u200d💻 coding",
    "🏳\ufe0f\u200d🌈",
    "🇺🇸🇬🇧🇯🇵🇩🇪🇫🇷",
    "🇺🇸 flag",
    "❤️ ❤ ♥",
    "🧑🏽\u200d🚀",
    "🤷\u200d♂️",
    "1️⃣ 2️⃣ #️⃣",
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "🎉🎉🎉🎉🎉",
    "emoji😀inside😀words",
    "☃ ☀ ★ ♠ ♣ ✓ ✗ → ← ↑ ↓ ∞ ∑ √ ∫ ≈ ≠ ≤ ≥",
]

SCRIPTS = [
    "مرحبا بالعالم",
    "اللغة العربية جميلة.",
    "שלום עולם",
    "עברית מימין לשמאל",
    "Привет, мир!",
    "Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία",
    "नमस्ते दुनिया",
    "हिन्दी भाषा",
    "สวัสดีชาวโลก",
    "ሰላም ልዑል",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    "English مرحبا Русский 中文 עברית हिन्दी 日本語 한국어",
    "abc\u202eRTL override\u202cdef",
    "Ελληνικά και English",
    "Кириллица123Latin",
]

SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "hello<|endoftext|>world",
    "mid<|endoftext|>word",
    "<|im_sta",
    "<|im_start",
    "<|im_start|",
    "im_start|>",
    "<|im_end|><|im_end|>",
    "<|endoftext|><|endoftext|><|endoftext|>",
    " <|im_start|> ",
    "  <|im_end|>  ",
    "\n<|im_start|>\n",
    "<|IM_START|>",
    "< |im_start| >",
    "<|im_start|><|im_start|user",
    "<repo_name>tandem<file_sep>main.cpp<filename>x.py",
    "<gh_stars>100",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1",
    "<empty_output>",
    "<issue_start>bug<issue_comment>fixed<issue_closed>",
    "text <|endoftext|",
    "<||>",
    "<|>",
    "<|im_end|>.",
    "a<|im_start|>b<|im_end|>c",
]

SINGLE = [
    "!", "\"", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    ":", ";", "<", "=", ">", "?", "@", "[", "\\", "]", "^", "_", "`", "{", "|", "}", "~",
    "Z", "z", "9", "é", "ß", "中", "あ", "한", "😀", "\x00", "\x7f", "\u00ff", "\u0100",
    "\uffff", "\U0010ffff", "\U0001f600", "€", "™",
    # Bytes SmolLM2's vocabulary has no token for (0x14, ...): Hugging Face drops them, and
    # their neighbours may merge across the gap (found by tokenizer_fuzzer).
    "\x14", "a\x14b", "Hello ,wo\x14\x01rld!", "".join(chr(c) for c in range(0x20)),
    "\u00f2\u00f3", "x\U00091695y",
]

# ---------------------------------------------------------------------------------------------
# Seeded random generation.
# ---------------------------------------------------------------------------------------------
WORDS = (
    "the of and to in is was that for it with as his on be at by had are but from or have an they "
    "which one you were all we her she there would their will when who him been has more if no out "
    "so said what up its about than into them can only other time new some could these two may "
    "first then do any like my now over such our man me even most made after also did many off "
    "before must well back through years where much your way down should because long each just "
    "model token inference server quantization tensor matrix kernel cache attention layer"
).split()

FRAGMENT_POOLS = [PROSE, CONTRACTIONS, CODE, NUMBERS, LATIN, CJK, EMOJI, SCRIPTS, SPECIAL, COMBINING]
SEPARATORS = [" ", "", "\n", "\t", "  ", "\r\n", ", ", ". ", "\n\n", "   ", "\u00a0"]
UNICODE_RANGES = [
    (0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
    (0x900, 0x97F), (0xE00, 0xE7F), (0x1EA0, 0x1EFF), (0x2000, 0x206F), (0x2190, 0x22FF),
    (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
    (0x20000, 0x2A6DF),
]


def gen_random(rng: random.Random) -> list[str]:
    out = []
    # 1. random English-ish sentences with casing, punctuation, numbers and contractions
    for _ in range(50):
        n = rng.randint(1, 14)
        words = []
        for _ in range(n):
            w = rng.choice(WORDS)
            r = rng.random()
            if r < 0.1:
                w = w.capitalize()
            elif r < 0.15:
                w = w.upper()
            elif r < 0.22:
                w = w + rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"])
            elif r < 0.3:
                w = str(rng.randint(0, 10 ** rng.randint(1, 12)))
            words.append(w)
        s = rng.choice([" ", " ", " ", "  ", "\t"]).join(words)
        s += rng.choice(["", ".", "!", "?", "...", "\n", " ", ";"])
        if rng.random() < 0.2:
            s = rng.choice([" ", "  ", "\n", "\t"]) + s
        out.append(s)
    # 2. long digit runs and formatted numbers
    for _ in range(25):
        k = rng.randint(1, 60)
        digits = "".join(rng.choice("0123456789") for _ in range(k))
        style = rng.randrange(5)
        if style == 0:
            s = digits
        elif style == 1:
            s = f"{int(digits):,}"
        elif style == 2:
            s = digits[: max(1, k // 2)] + "." + digits[k // 2:] if k > 1 else digits
        elif style == 3:
            s = f"value={digits} units"
        else:
            s = " ".join(digits[i:i + 3] for i in range(0, k, 3))
        out.append(s)
    # 3. whitespace runs between words, trailing/leading
    for _ in range(25):
        parts = []
        for _ in range(rng.randint(1, 5)):
            parts.append(rng.choice(WORDS))
            parts.append("".join(rng.choice([" ", " ", "\t", "\n", "\r\n", "\u00a0", "\u3000"])
                                 for _ in range(rng.randint(1, 9))))
        s = "".join(parts)
        if rng.random() < 0.5:
            s = s.rstrip()
        out.append(s)
    # 4. concatenations of hand-written fragments from different pools
    for _ in range(60):
        k = rng.randint(2, 4)
        frags = [rng.choice(rng.choice(FRAGMENT_POOLS)) for _ in range(k)]
        s = frags[0]
        for f in frags[1:]:
            s += rng.choice(SEPARATORS) + f
        out.append(s)
    # 5. random code points from assorted blocks
    for _ in range(35):
        n = rng.randint(1, 16)
        chars = []
        for _ in range(n):
            lo, hi = rng.choice(UNICODE_RANGES)
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    # 6. random printable ASCII soup (stress for punctuation / merges)
    for _ in range(20):
        n = rng.randint(1, 40)
        out.append("".join(chr(rng.randint(0x20, 0x7E)) for _ in range(n)))
    return out


def build_cases() -> list[str]:
    rng = random.Random(SEED)
    texts = []
    for group in (PROSE, CONTRACTIONS, CODE, NUMBERS, WHITESPACE, LATIN, COMBINING, CJK, EMOJI, SCRIPTS, SPECIAL,
                  SINGLE):
        texts.extend(group)
    texts.extend(gen_random(rng))
    seen, uniq = set(), []
    for t in texts:
        if t and t not in seen:
            seen.add(t)
            uniq.append(t)
    return uniq


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tokenizer_smollm2.json"))
    args = ap.parse_args()

    tok = load_reference_tokenizer(args.model, patched=True)
    unpatched = load_reference_tokenizer(args.model, patched=False)
    texts = build_cases()

    cases, n_diff, roundtrip_fail = [], 0, []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        ids_u = unpatched.encode(text, add_special_tokens=False)
        case = {"text": text, "ids": ids, "unpatched_matches": ids == ids_u}
        if ids != ids_u:
            n_diff += 1
        back = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if back != text:
            case["hf_roundtrip"] = False
            case["decoded"] = back
            roundtrip_fail.append((text, back))
        cases.append(case)

    doc = {
        "model_file": os.path.basename(args.model),
        "reference": reference_description(patched=True)
        + " Encoded with add_special_tokens=False (no BOS). CONTROL tokens are special AddedTokens and match whole."
        + " unpatched_matches: ids from transformers' unmodified GGUF tokenizer are identical."
        + f" Cases generated by tests/reference/make_tokenizer_golden.py (seed {SEED}).",
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(dump_cases_json(doc))

    print(f"wrote {args.out}: {len(cases)} cases, {os.path.getsize(args.out)} bytes")
    print(f"unpatched transformers tokenizer differs on {n_diff} case(s)")
    for c in cases:
        if not c["unpatched_matches"]:
            print("  differs:", repr(c["text"])[:100])
    print(f"HF round-trip failures: {len(roundtrip_fail)}")
    for t, b in roundtrip_fail:
        print("  roundtrip:", repr(t)[:80], "->", repr(b)[:80])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Deterministic ~1 MiB mixed-text corpus for tokenizer benchmarks.

Produces
    The file given as argv[1]: UTF-8 text of exactly TARGET_BYTES = 1,048,576 bytes, or up to 3
    bytes fewer (the cut is moved back to a UTF-8 character boundary). Prints its size and SHA-256.

Content (approximate share of bytes), as chunks of ~2-4 KB shuffled together with a seeded RNG:
    ~23%  English prose: every regular file in /usr/share/common-licenses (sorted by name;
          symlinks such as GPL -> GPL-3 skipped so nothing is counted twice). This directory is
          from base-files and exists on every Debian 12 system.
    ~21%  English-like prose: an order-2 word Markov chain trained on those same license texts,
          sampled with a seeded RNG.
    ~21%  C code: the libc6-dev headers listed in C_HEADERS below (stdio.h, stdlib.h, ...), read
          from /usr/include. libc6-dev is pulled in by build-essential, so these exist on every
          Debian 12 build machine (contents fixed by the Debian 12 glibc 2.36 package). The script
          fails loudly if one is missing rather than producing a different corpus.
    ~11%  generated code: Python, C++, JSON and shell from seeded templates.
    ~7%   numbers: CSV tables, decimals, dates, thousands separators, 20-60 digit runs.
    ~12%  CJK: Chinese, Japanese and Korean paragraphs drawn from fixed character pools.
    ~5%   emoji-laden text: skin tones, ZWJ families/professions, flags, keycaps.
Everything not read from the Debian files comes from random.Random(SEED) using only
random()/randrange()/choice()/shuffle(), whose output is stable across Python 3 versions, so the
file is byte-identical given the same Debian 12 files.

How to run (from the repository root)
    python3 bench/make_corpus.py bench/corpus.txt
    (any Python >= 3.8, standard library only; e.g. /tmp/refvenv/bin/python works too)

Requirements
    Debian 12 (bookworm) with base-files and libc6-dev (build-essential). No third-party packages.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys

TARGET_BYTES = 1 << 20
SEED = 0x7A4DE3
LICENSE_DIR = "/usr/share/common-licenses"
INCLUDE_DIR = "/usr/include"
C_HEADERS = ["stdio.h", "stdlib.h", "string.h", "unistd.h", "pthread.h", "time.h", "signal.h", "fcntl.h"]

# budgets in bytes for the generated parts
MARKOV_BYTES = 225_000
GENCODE_BYTES = 115_000
NUMBER_BYTES = 72_000
CJK_BYTES = 125_000
EMOJI_BYTES = 55_000


def read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def paragraphs(text: str) -> list[str]:
    return [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


def chunk(paras: list[str], rng: random.Random, lo: int = 2000, hi: int = 4000) -> list[str]:
    """Group consecutive paragraphs into chunks of roughly lo..hi bytes."""
    out, cur, size, want = [], [], 0, lo + rng.randrange(hi - lo)
    for p in paras:
        cur.append(p)
        size += len(p.encode("utf-8")) + 2
        if size >= want:
            out.append("\n\n".join(cur))
            cur, size, want = [], 0, lo + rng.randrange(hi - lo)
    if cur:
        out.append("\n\n".join(cur))
    return out


# ---------------------------------------------------------------------------------------------
def license_texts() -> list[str]:
    names = sorted(os.listdir(LICENSE_DIR))
    texts = []
    for n in names:
        p = os.path.join(LICENSE_DIR, n)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        texts.append(read_text(p))
    if not texts:
        raise SystemExit(f"no files in {LICENSE_DIR}")
    return texts


def markov_prose(texts: list[str], rng: random.Random, budget: int) -> list[str]:
    words = " ".join(t for t in texts).split()
    table: dict[tuple[str, str], list[str]] = {}
    for a, b, c in zip(words, words[1:], words[2:]):
        table.setdefault((a, b), []).append(c)
    keys = sorted(table)
    out, total = [], 0
    while total < budget:
        a, b = keys[rng.randrange(len(keys))]
        para = [a, b]
        for _ in range(40 + rng.randrange(120)):
            nxt = table.get((a, b))
            if not nxt:
                break
            c = nxt[rng.randrange(len(nxt))]
            para.append(c)
            a, b = b, c
        # wrap at ~72 columns like the license files
        lines, line = [], ""
        for w in para:
            if line and len(line) + 1 + len(w) > 72:
                lines.append(line)
                line = w
            else:
                line = f"{line} {w}" if line else w
        lines.append(line)
        p = "\n".join(lines)
        out.append(p)
        total += len(p.encode("utf-8")) + 2
    return out


def c_headers() -> list[str]:
    out = []
    for h in C_HEADERS:
        p = os.path.join(INCLUDE_DIR, h)
        if not os.path.isfile(p):
            raise SystemExit(f"missing {p}: install libc6-dev (build-essential)")
        out.append(read_text(p))
    return out


# ---------------------------------------------------------------------------------------------
IDENT = ("value count index buffer result config tensor token model cache layer weight scale offset "
         "length size total queue request response handle state context stream batch score").split()
TYPES = ["int", "float", "double", "size_t", "uint32_t", "int64_t", "bool", "std::string", "char"]


def ident(rng: random.Random) -> str:
    a, b = rng.choice(IDENT), rng.choice(IDENT)
    return a if rng.random() < 0.3 else f"{a}_{b}"


def gen_python(rng: random.Random) -> str:
    name = ident(rng)
    args = [ident(rng) for _ in range(rng.randrange(4))]
    lines = [f"def {name}({', '.join(args)}):", f'    """Compute the {name.replace("_", " ")} of the input."""']
    for _ in range(2 + rng.randrange(8)):
        r = rng.random()
        v = ident(rng)
        if r < 0.3:
            lines.append(f"    {v} = {rng.randrange(1000)} * {rng.choice(args or ['1'])} + {rng.random():.4f}")
        elif r < 0.5:
            lines.append(f"    for i in range({rng.randrange(1, 64)}):")
            lines.append(f"        {v}[i] += i ** {rng.randrange(1, 4)}  # accumulate")
        elif r < 0.7:
            lines.append(f"    if {v} is None or len({v}) == 0:")
            lines.append(f"        raise ValueError(f\"bad {v}: {{{v}!r}}\")")
        elif r < 0.85:
            lines.append(f"    {v} = [x * {rng.randrange(2, 9)} for x in {rng.choice(IDENT)} if x % 2 == 0]")
        else:
            lines.append(f"    print(\"{v} =\", {v}, sep='\\t')")
    lines.append(f"    return {ident(rng)}")
    return "\n".join(lines)


def gen_cpp(rng: random.Random) -> str:
    cls = "".join(w.capitalize() for w in ident(rng).split("_"))
    lines = [f"template <typename T>", f"class {cls} {{", " public:"]
    for _ in range(2 + rng.randrange(6)):
        t, f = rng.choice(TYPES), ident(rng)
        lines.append(f"  {t} {f}() const {{ return {f}_; }}")
        lines.append(f"  void set_{f}({t} v) {{ {f}_ = v; }}")
    lines.append("  void run(std::vector<T>& xs) {")
    lines.append(f"    for (size_t i = 0; i < xs.size(); ++i) {{ xs[i] = xs[i] * {rng.randrange(1, 100)} + static_cast<T>(i); }}")
    lines.append("    if (xs.empty() && !ready_) { throw std::runtime_error(\"empty\"); }")
    lines.append("  }")
    lines.append(" private:")
    lines.append(f"  bool ready_ = {rng.choice(['true', 'false'])};")
    lines.append("};")
    return "\n".join(lines)


def gen_json(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth > 2 or r < 0.35:
        return rng.choice([rng.randrange(-10**6, 10**6), round(rng.random() * 1000, 3), ident(rng), True, False, None])
    if r < 0.6:
        return [gen_json(rng, depth + 1) for _ in range(rng.randrange(1, 5))]
    return {ident(rng): gen_json(rng, depth + 1) for _ in range(rng.randrange(1, 6))}


def gen_shell(rng: random.Random) -> str:
    cmds = [
        f"ls -la /var/log | grep -v '^d' | awk '{{print $5}}' > /tmp/{ident(rng)}.txt",
        f"export {ident(rng).upper()}=\"$HOME/.local/bin:$PATH\"",
        f"for f in *.{rng.choice(['txt', 'log', 'gguf', 'json'])}; do echo \"$f\"; wc -c \"$f\"; done",
        f"cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j{rng.randrange(1, 33)}",
        f"curl -sS http://localhost:{rng.randrange(1024, 65536)}/v1/completions -d '{{\"prompt\": \"hi\"}}'",
        f"git log --oneline -n {rng.randrange(1, 50)} | tee -a {ident(rng)}.log",
        f"[ -f \"$1\" ] || {{ echo \"usage: $0 FILE\" >&2; exit {rng.randrange(1, 3)}; }}",
    ]
    return "#!/bin/sh\nset -eu\n" + "\n".join(rng.choice(cmds) for _ in range(3 + rng.randrange(6)))


def gen_code(rng: random.Random, budget: int) -> list[str]:
    out, total = [], 0
    while total < budget:
        r = rng.random()
        if r < 0.4:
            s = gen_python(rng)
        elif r < 0.7:
            s = gen_cpp(rng)
        elif r < 0.85:
            s = json.dumps(gen_json(rng), indent=2, ensure_ascii=False, sort_keys=True)
        else:
            s = gen_shell(rng)
        out.append(s)
        total += len(s.encode("utf-8")) + 2
    return out


def gen_numbers(rng: random.Random, budget: int) -> list[str]:
    out, total = [], 0
    while total < budget:
        r = rng.random()
        if r < 0.35:
            rows = ["id,timestamp,value,ratio,count"]
            for i in range(5 + rng.randrange(20)):
                rows.append(f"{rng.randrange(10**6)},2024-{1 + rng.randrange(12):02d}-{1 + rng.randrange(28):02d}T"
                            f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z,"
                            f"{(rng.random() - 0.5) * 10 ** rng.randrange(1, 7):.6f},{rng.random():.4f},{rng.randrange(10**9)}")
            s = "\n".join(rows)
        elif r < 0.55:
            s = " ".join("".join(str(rng.randrange(10)) for _ in range(20 + rng.randrange(41)))
                         for _ in range(1 + rng.randrange(4)))
        elif r < 0.8:
            s = "The total was {:,} units, up {:.2f}% from {:,}; the median was {:,.3f} and pi ~ 3.{}.".format(
                rng.randrange(10**9), rng.random() * 100, rng.randrange(10**7), rng.random() * 10**5,
                "".join(str(rng.randrange(10)) for _ in range(30)))
        else:
            s = "\n".join(f"{a} x {b} = {a * b}" for a, b in
                          ((rng.randrange(1, 10**6), rng.randrange(1, 10**6)) for _ in range(3 + rng.randrange(8))))
        out.append(s)
        total += len(s.encode("utf-8")) + 2
    return out


ZH = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成"
      "事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向"
      "情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别"
      "处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台"
      "模型语言数据处理计算速度测试服务器推理")
ZH_PUNCT = "，，，。。、；：！？「」《》（）"
HIRA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽっゃゅょ"
KATA = "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポッャュョー"
KANJI = "日本語東京大学時間人生会社電話食事学校先生友達天気今日明日新聞映画音楽仕事家族"
KO = ("가나다라마바사아자차카타파하그는을를이가에서와과도의로으로한국어서울대학교사람시간오늘내일학생선생님친구날씨음식"
      "영화음악회사전화가족세계문화역사과학기술컴퓨터언어모델데이터처리속도")


def gen_cjk(rng: random.Random, budget: int) -> list[str]:
    out, total = [], 0
    while total < budget:
        r = rng.random()
        parts = []
        if r < 0.45:
            for _ in range(3 + rng.randrange(10)):
                parts.append("".join(rng.choice(ZH) for _ in range(4 + rng.randrange(18))) + rng.choice(ZH_PUNCT))
            s = "".join(parts)
        elif r < 0.75:
            for _ in range(3 + rng.randrange(10)):
                seg = "".join(rng.choice(rng.choice([HIRA, HIRA, KATA, KANJI])) for _ in range(4 + rng.randrange(16)))
                parts.append(seg + rng.choice("、。、。！？"))
            s = "".join(parts)
        else:
            for _ in range(5 + rng.randrange(25)):
                parts.append("".join(rng.choice(KO) for _ in range(1 + rng.randrange(5))))
            s = " ".join(parts) + "."
        if rng.random() < 0.3:  # mixed-script sentence
            s += f" (English: {rng.choice(IDENT)} {rng.randrange(2000)})"
        out.append(s)
        total += len(s.encode("utf-8")) + 2
    return out


EMOJI = ["😀", "😂", "🥲", "😍", "🤔", "🙃", "😭", "🔥", "✨", "🎉", "🚀", "💡", "📈", "🧠", "🤖", "🍕", "☕", "🌍", "❤️", "✅",
         "⚠️", "👍", "👋", "🙏", "💯", "🐍", "🦀", "🐧", "🌸", "🍣"]
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
ZWJ = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻", "👨\u200d🔬", "🧑\u200d🚀", "🏳\ufe0f\u200d🌈", "👩\u200d❤\ufe0f\u200d👨",
       "🤷\u200d♀\ufe0f", "🧑\U0001F3FD\u200d🍳"]
FLAGS = ["🇺🇸", "🇬🇧", "🇯🇵", "🇩🇪", "🇫🇷", "🇻🇳", "🇰🇷", "🇨🇳", "🇧🇷", "🇮🇳"]
KEYCAPS = ["1\ufe0f\u20e3", "2\ufe0f\u20e3", "#\ufe0f\u20e3", "*\ufe0f\u20e3"]


def gen_emoji(rng: random.Random, budget: int) -> list[str]:
    words = "the model is fast today and we ship it now great news team wow love this build passed".split()
    out, total = [], 0
    while total < budget:
        toks = []
        for _ in range(8 + rng.randrange(30)):
            r = rng.random()
            if r < 0.55:
                toks.append(rng.choice(words))
            elif r < 0.75:
                toks.append(rng.choice(EMOJI))
            elif r < 0.83:
                toks.append(rng.choice(["👍", "👋", "🙏", "💪", "🤝"]) + rng.choice(SKIN))
            elif r < 0.92:
                toks.append(rng.choice(ZWJ))
            elif r < 0.97:
                toks.append(rng.choice(FLAGS))
            else:
                toks.append(rng.choice(KEYCAPS))
        s = " ".join(toks)
        if rng.random() < 0.3:
            s = s.replace(" ", "", rng.randrange(1, 4))
        out.append(s)
        total += len(s.encode("utf-8")) + 2
    return out


# ---------------------------------------------------------------------------------------------
def build() -> bytes:
    rng = random.Random(SEED)
    lic = license_texts()
    chunks = []
    for t in lic:
        chunks += chunk(paragraphs(t), rng)
    chunks += chunk(markov_prose(lic, rng, MARKOV_BYTES), rng)
    for h in c_headers():
        chunks += chunk(paragraphs(h), rng)
    chunks += chunk(gen_code(rng, GENCODE_BYTES), rng)
    chunks += chunk(gen_numbers(rng, NUMBER_BYTES), rng)
    chunks += chunk(gen_cjk(rng, CJK_BYTES), rng, 1500, 3000)
    chunks += chunk(gen_emoji(rng, EMOJI_BYTES), rng, 1000, 2000)
    rng.shuffle(chunks)
    data = "\n\n".join(chunks).encode("utf-8")
    if len(data) < TARGET_BYTES:
        raise SystemExit(f"corpus too small: {len(data)} bytes")
    cut = TARGET_BYTES
    while cut > 0 and (data[cut] & 0xC0) == 0x80:  # do not split a UTF-8 sequence
        cut -= 1
    return data[:cut]


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUTPUT_FILE", file=sys.stderr)
        return 2
    data = build()
    data.decode("utf-8")  # sanity: valid UTF-8
    with open(sys.argv[1], "wb") as f:
        f.write(data)
    print(f"wrote {sys.argv[1]}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

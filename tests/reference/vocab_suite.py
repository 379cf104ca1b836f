#!/usr/bin/env python3
"""Runs llama.cpp's vocabulary test files through `tandem tokenize`.

llama.cpp keeps, for each tokenizer family, a vocab-only GGUF (ggml-vocab-NAME.gguf)
with an input file (.inp: texts separated by "\\n__ggml_vocab_test__\\n") and the ids
Hugging Face tokenizers gives each text (.out: one line per text), encoded without
special tokens. This script is a comparator run at test-writing time: the files come
from a llama.cpp checkout (or its llama-cpp-python sdist) and are never committed.

  tests/reference/vocab_suite.py LLAMA_CPP/models [--tandem build/bin/tandem] [NAME...]

Prints one line per family (passed/total) and every mismatch; exits 1 unless every
text of every family given (default: all with .inp/.out) matches id for id.
"""
import argparse
import json
import pathlib
import subprocess
import sys

SEP = "\n__ggml_vocab_test__\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--tandem", default="build/bin/tandem")
    ap.add_argument("--show", type=int, default=3, help="mismatches shown per family")
    args = ap.parse_args()
    models = pathlib.Path(args.models)
    names = args.names or sorted(
        p.name[len("ggml-vocab-"):-len(".gguf.inp")] for p in models.glob("ggml-vocab-*.gguf.inp"))
    failed = False
    for name in names:
        gguf = models / f"ggml-vocab-{name}.gguf"
        texts = (models / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split(SEP)
        want = (models / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
        # The .inp ends with a separator and the .out with a newline: drop the tails.
        texts = texts[:-1] if texts and texts[-1] == "" else texts
        want = want[: len(texts)]
        ok, shown, error = 0, 0, None
        for text, line in zip(texts, want):
            r = subprocess.run([args.tandem, "tokenize", "-m", str(gguf), "--json", "--no-special",
                                "--no-parse-special"], input=text.encode(), capture_output=True)
            if r.returncode != 0:
                error = r.stderr.decode(errors="replace").strip()
                break
            got = json.loads(r.stdout)
            expect = [int(t) for t in line.split()]
            if got == expect:
                ok += 1
            elif shown < args.show:
                shown += 1
                print(f"  {name}: {text!r}\n    want {expect}\n    got  {got}")
        status = f"{ok}/{len(texts)}" if error is None else f"refused: {error}"
        print(f"{name:16} {status}", flush=True)
        failed |= error is not None or ok != len(texts)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

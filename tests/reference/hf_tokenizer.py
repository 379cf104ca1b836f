"""Reference Hugging Face tokenizer built from a GGUF file (shared helper).

What it provides
    load_reference_tokenizer(gguf_path, patched=True) -> transformers.PreTrainedTokenizerFast
    load_gguf_tokenizer_dict(gguf_path) -> (architecture, tokenizer_dict, tokenizer_config)
    reference_description(patched=True) -> str   (provenance text for golden files)

The tokenizer is the one transformers itself builds from a GGUF, i.e. what
`AutoTokenizer.from_pretrained(dir, gguf_file=name)` does internally:
    get_gguf_tokenizer(path)              -> metadata dicts
    convert_gguf_tokenizer(arch, dict)    -> tokenizers.Tokenizer (vocab, merges, CONTROL tokens
                                             added as special AddedTokens, USER_DEFINED as added
                                             tokens, pre-tokenizer from GGUF_PRE_TOKENIZER_SPLITS)
transformers' `get_gguf_tokenizer` reads metadata with `transformers.integrations.gguf.reader`,
which imports torch at module level even though metadata reading does not need it. When torch
is not installed we read the same keys with the `gguf` package (`_gguf_tokenizer_dict_no_torch`,
a line-by-line port of transformers' get_gguf_tokenizer) and still call transformers'
`convert_gguf_tokenizer` for the actual construction.

The patch (patched=True, the default)
    transformers has no GGUF_PRE_TOKENIZER_SPLITS entry for tokenizer.ggml.pre == 'smollm', so it
    falls back to plain GPT-2 ByteLevel splitting, which does NOT split digits one by one. SmolLM2's
    own tokenizer.json (and llama.cpp's 'smollm' pre-tokenizer) uses
        pre_tokenizers.Sequence([Digits(individual_digits=True),
                                 ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    We set exactly that pre-tokenizer on the backend tokenizer, the same way transformers' own
    `set_split_regex` overrides `backend_tokenizer.pre_tokenizer` for the pre types it knows.
    Nothing else (vocab, merges, added/special tokens, decoder) is touched.

How to run
    Not a script; imported by tests/reference/make_tokenizer_golden.py and bench/tokenizer_hf.py.
    Quick self-check:
        /tmp/refvenv/bin/python tests/reference/hf_tokenizer.py models/smollm2-135m-instruct-q4_1.gguf

Requirements
    tests/reference/requirements.txt (gguf==0.19.0, transformers==5.24.0, tokenizers==0.23.3,
    sentencepiece==0.2.3, numpy); torch is NOT required.
"""

from __future__ import annotations

import json
import os
import sys

import gguf
import tokenizers
import transformers
from tokenizers import pre_tokenizers

# Pre-tokenizers for GGUF pre types that transformers' GGUF conversion does not know.
# Each value is a zero-argument factory returning a tokenizers PreTokenizer.
MISSING_PRE_TOKENIZERS = {
    # SmolLM / SmolLM2 (HuggingFaceTB cosmo2 tokenizer), as in their tokenizer.json.
    "smollm": lambda: pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    ),
}

# Which metadata reader was used by the last load (for provenance strings).
_LAST_READER = "unknown"


def _gguf_tokenizer_dict_no_torch(gguf_path: str):
    """Port of transformers.integrations.gguf.gguf_tokenizer_mapping.get_gguf_tokenizer using the
    `gguf` package's GGUFReader instead of transformers' torch-importing reader."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, _SPECIAL_TOKENS

    reader = gguf.GGUFReader(gguf_path)

    def value(key):
        field = reader.fields[key]
        v = field.contents()
        if isinstance(v, list):
            # numeric arrays -> plain Python numbers (transformers' reader gives Python ints/floats)
            v = [x.item() if hasattr(x, "item") else x for x in v]
        elif hasattr(v, "item"):
            v = v.item()
        return v

    metadata = {k: value(k) for k in reader.fields if not k.startswith("GGUF.")}
    architecture = metadata["general.architecture"]
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]
    tokenizer_type = tokenizer.get("tokenizer_type")
    if tokenizer_type == "llama":
        tokenizer_config.setdefault("add_bos_token", True)
    elif tokenizer_type == "gemma4":
        tokenizer_config["add_bos_token"] = False
    for name, key in _SPECIAL_TOKENS.items():
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        tokenizer_config[name] = tokenizer["tokens"][token_id] if token_id is not None else None
    return architecture, tokenizer, tokenizer_config


def load_gguf_tokenizer_dict(gguf_path: str):
    """(architecture, tokenizer_dict, tokenizer_config) exactly as transformers' get_gguf_tokenizer."""
    global _LAST_READER
    try:
        import torch  # noqa: F401  (transformers' GGUF reader needs it)
    except ImportError:
        _LAST_READER = "gguf.GGUFReader port of transformers get_gguf_tokenizer (torch not installed)"
        return _gguf_tokenizer_dict_no_torch(gguf_path)
    from transformers.integrations.gguf import get_gguf_tokenizer

    _LAST_READER = "transformers get_gguf_tokenizer"
    return get_gguf_tokenizer(gguf_path)


def load_reference_tokenizer(gguf_path: str, patched: bool = True):
    """transformers' GGUF tokenizer, wrapped as a PreTrainedTokenizerFast.

    patched=True replaces the pre-tokenizer for pre types listed in MISSING_PRE_TOKENIZERS
    (e.g. 'smollm'); patched=False is transformers' unmodified conversion.
    Returns the wrapper; the Rust object is `.backend_tokenizer`.
    """
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    architecture, tokenizer_dict, tokenizer_config = load_gguf_tokenizer_dict(gguf_path)
    backend, additional = convert_gguf_tokenizer(architecture, tokenizer_dict)
    pre = tokenizer_dict.get("pre_tokenizer_type")
    if patched and pre in MISSING_PRE_TOKENIZERS:
        backend.pre_tokenizer = MISSING_PRE_TOKENIZERS[pre]()
    kwargs = dict(tokenizer_config)
    kwargs.update(additional)
    kwargs.pop("chat_template", None)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)
    tok.gguf_pre_tokenizer_type = pre
    return tok


def reference_description(patched: bool = True) -> str:
    patch = (
        " PATCH: for tokenizer.ggml.pre='smollm' (absent from transformers' GGUF_PRE_TOKENIZER_SPLITS, which "
        "would fall back to plain GPT-2 ByteLevel and not split digits) backend_tokenizer.pre_tokenizer is set to "
        "Sequence([Digits(individual_digits=True), ByteLevel(add_prefix_space=False, trim_offsets=True, "
        "use_regex=True)]), as in SmolLM2's tokenizer.json and llama.cpp's 'smollm' pre-tokenizer "
        "(same mechanism as transformers' set_split_regex)."
        if patched
        else ""
    )
    return (
        f"Hugging Face transformers {transformers.__version__} GGUF tokenizer conversion "
        f"(convert_gguf_tokenizer; metadata via {_LAST_READER}; gguf {getattr(gguf, '__version__', _gguf_version())}), "
        f"tokenizers {tokenizers.__version__}, built by tests/reference/hf_tokenizer.py.{patch}"
    )


def _gguf_version() -> str:
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:  # pragma: no cover
        return "?"


def dump_cases_json(doc: dict) -> str:
    """JSON with one case per line (small diffs), UTF-8, no ASCII escaping."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    s = json.dumps(head, ensure_ascii=False)[:-1]
    lines = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in doc["cases"]]
    return s + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join("models", "smollm2-135m-instruct-q4_1.gguf")
    for p in (True, False):
        t = load_reference_tokenizer(path, patched=p)
        s = "<|im_start|>user\nI'll pay 1234567 dollars<|im_end|>"
        print("patched" if p else "unpatched", t.encode(s, add_special_tokens=False))
    print(reference_description())

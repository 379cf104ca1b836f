#!/usr/bin/env python3
"""Writes a copy of a GGUF model with every tensor decoded to float32 (or float16).

For the draft-model benchmark (docs/performance.md, issue #21): the decoded copy is a
target that reads 4-6x more bytes per token than the quantized file, which then serves
as its draft. The metadata (config, tokenizer, chat template) is copied unchanged, so
the two share the vocabulary token for token.

  python3 bench/dequantize_gguf.py models/smollm2-135m-instruct-q4_1.gguf \\
      /tmp/smollm2-135m-instruct-f32.gguf [--type f32|f16]

Needs the `gguf` and `numpy` packages (pip).
"""
import argparse

import gguf
import numpy as np

SKIP = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.file_type"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", choices=["f32", "f16"], default="f32")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(a.dst, arch)
    for key, field in r.fields.items():
        if key in SKIP or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    w.add_key_value("general.file_type", 0 if a.type == "f32" else 1, gguf.GGUFValueType.UINT32)
    out = np.float32 if a.type == "f32" else np.float16
    for t in r.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        # Norms and other 1-D tensors stay float32 (as llama.cpp's converters keep them).
        dtype = np.float32 if len(t.shape) == 1 else out
        w.add_tensor(t.name, values.astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

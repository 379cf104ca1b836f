#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random F16 weights and another model's tokenizer.

For benchmarks that need a file of a given shape in every quantization type (the base
for llama.cpp's llama-quantize; bench/quant_types.sh): every width is a multiple of 256,
so the K and IQ4_XS types apply to every matrix without fallbacks. Weights are normal
with std 0.02 (norms 1), so the model is fast to make and meaningless to read.

    /tmp/refvenv/bin/python bench/make_random_model.py --tokenizer-from models/smollm2-135m-instruct-q4_1.gguf \
        --out build/bench/random-f16.gguf [--layers 12 --hidden 768 --heads 12 --kv-heads 4 --ffn 2048]
        [--experts 64 --experts-used 8]

With --experts, every layer's FFN is a mixture of that many experts, each --ffn wide, of
which --experts-used are picked per token (llama with experts, as Mixtral's GGUF files
are: a float32 router ffn_gate_inp and stacked ffn_{gate,up,down}_exps).

Needs numpy and the gguf package (tests/reference/requirements.txt).
"""
import argparse

import numpy as np

import gguf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer-from", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--experts-used", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for name, v in (("hidden", a.hidden), ("ffn", a.ffn)):
        if v % 256:
            ap.error(f"--{name} must be a multiple of 256")
    if a.hidden % a.heads or a.heads % a.kv_heads:
        ap.error("--heads must divide --hidden, and --kv-heads must divide --heads")

    src = gguf.GGUFReader(a.tokenizer_from)
    w = gguf.GGUFWriter(a.out, arch="llama")
    if a.experts and not 0 < a.experts_used <= a.experts:
        ap.error("--experts-used must be in 1 .. --experts")
    w.add_name(f"random-llama-{a.layers}x{a.hidden}" + (f"-{a.experts}x{a.ffn}" if a.experts else ""))
    if a.experts:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
    head_dim = a.hidden // a.heads
    tokens = [bytes(src.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
              for i in src.fields["tokenizer.ggml.tokens"].data]
    vocab = len(tokens)
    w.add_block_count(a.layers)
    w.add_context_length(8192)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # The tokenizer, copied key by key.
    for key, field in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vt = field.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(key, vals)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(key, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(key, field.parts[field.data[0]].tolist()[0], vt)

    rng = np.random.default_rng(a.seed)

    def matrix(name, rows, cols):
        w.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16))

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    matrix("token_embd.weight", vocab, a.hidden)
    norm("output_norm.weight", a.hidden)
    for i in range(a.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", a.hidden)
        matrix(p + "attn_q.weight", a.heads * head_dim, a.hidden)
        matrix(p + "attn_k.weight", a.kv_heads * head_dim, a.hidden)
        matrix(p + "attn_v.weight", a.kv_heads * head_dim, a.hidden)
        matrix(p + "attn_output.weight", a.hidden, a.heads * head_dim)
        norm(p + "ffn_norm.weight", a.hidden)
        if a.experts:
            w.add_tensor(p + "ffn_gate_inp.weight",
                         rng.standard_normal((a.experts, a.hidden), dtype=np.float32) * 0.02)
            for name, rows, cols in (("ffn_gate_exps", a.ffn, a.hidden),
                                     ("ffn_up_exps", a.ffn, a.hidden),
                                     ("ffn_down_exps", a.hidden, a.ffn)):
                w.add_tensor(p + name + ".weight", (rng.standard_normal(
                    (a.experts, rows, cols), dtype=np.float32) * 0.02).astype(np.float16))
            continue
        matrix(p + "ffn_gate.weight", a.ffn, a.hidden)
        matrix(p + "ffn_up.weight", a.ffn, a.hidden)
        matrix(p + "ffn_down.weight", a.hidden, a.ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

"""Golden rotary position embeddings from Hugging Face transformers, for the CPU RoPE
kernels (kernels/cpu/ops_test.cc).

Produces tests/data/rope_golden.json:
    {"reference": "...", "cases": [{"name", "head_dim", "theta", "position_scale",
      "freq_factors" (null or [head_dim / 2]), "positions" [n], "x" [n][head_dim],
      "out" [n][head_dim]}, ...]}
    x and out are one head's query rows in Hugging Face's layout (the rotated pairs are
    (i, i + head_dim / 2): the NeoX / "halves" order); out = apply_rotary_pos_emb(x) with
    the cos / sin of transformers' LlamaRotaryEmbedding for that configuration, float32.

Cases: the default RoPE (theta 10000, head 64) at positions up to 8191; Llama 3's scaled
RoPE (theta 500000, factor 8, low / high frequency factors 1 / 4, original context
8192), given to tandem as the per-frequency divisors a GGUF carries (rope_freqs:
default inverse frequency / scaled one, float32, as llama.cpp's converter writes them);
linear scaling (factor 2: positions divided by 2), head 32; YaRN with gpt-oss's parameters
(theta 150000, factor 32, original context 4096, beta 32 / 1, bounds not truncated, head
64) and with Qwen3's long-context ones (theta 10^6, factor 4, original context 32768,
truncated, head 128), each with transformers' own inverse frequencies ("inv_freq") and
attention factor ("attention_factor", multiplying cos and sin). tandem applies the same
rotation to pairs (2i, 2i + 1) in GGUF's permuted llama layout; the test permutes.

How to run (from the repository root; CPU, a few seconds)
    /tmp/refvenv/bin/python tests/reference/make_rope_golden.py [--out tests/data/rope_golden.json]
Requirements: tests/reference/requirements.txt (transformers==5.24.0, torch).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POSITIONS = [0, 1, 2, 15, 17, 100, 1000, 4097, 8191]


def rotary(head_dim, rope_parameters):
    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=16384, rope_parameters=rope_parameters)
    return LlamaRotaryEmbedding(config)


def case(name, head_dim, rope_parameters, position_scale=1.0, with_factors=False, seed=0):
    torch.manual_seed(seed)
    emb = rotary(head_dim, rope_parameters)
    pos = torch.tensor([POSITIONS])
    x = torch.randn(1, 1, len(POSITIONS), head_dim, dtype=torch.float32)  # [b, heads, n, d]
    cos, sin = emb(x, pos)
    out, _ = apply_rotary_pos_emb(x, x.clone(), cos, sin)
    factors = None
    extra = {}
    if rope_parameters["rope_type"] == "yarn":
        extra = {"yarn": {k: rope_parameters.get(k) for k in
                          ("factor", "original_max_position_embeddings", "beta_fast",
                           "beta_slow", "truncate")},
                 "inv_freq": emb.inv_freq.tolist(), "attention_factor": emb.attention_scaling}
    if with_factors:
        plain = rotary(head_dim, {"rope_type": "default",
                                  "rope_theta": rope_parameters["rope_theta"]})
        factors = (plain.inv_freq / emb.inv_freq).to(torch.float32).tolist()
    return {"name": name, "head_dim": head_dim, "theta": rope_parameters["rope_theta"],
            "position_scale": position_scale, "freq_factors": factors, "positions": POSITIONS,
            "x": x[0, 0].tolist(), "out": out[0, 0].tolist(), **extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "rope_golden.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = [
        case("default", 64, {"rope_type": "default", "rope_theta": 10000.0}, seed=1),
        case("llama3", 64, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
             with_factors=True, seed=2),
        case("linear", 32, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
             position_scale=2.0, seed=3),
        case("yarn_gpt_oss", 64, {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                  "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False}, seed=4),
        case("yarn_qwen3", 128, {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                 "original_max_position_embeddings": 32768, "beta_fast": 32.0,
                                 "beta_slow": 1.0, "truncate": True}, seed=5),
    ]
    doc = {"reference": f"transformers {transformers.__version__}, torch {torch.__version__}: "
                        "LlamaRotaryEmbedding + apply_rotary_pos_emb, float32; made by "
                        "tests/reference/make_rope_golden.py",
           "cases": cases}
    with open(args.out, "w") as f:
        json.dump(doc, f)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} cases, {os.path.getsize(args.out)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

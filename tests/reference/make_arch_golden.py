"""Tiny random-weight models of each architecture, made with Hugging Face transformers,
written as GGUF, with transformers' logits and greedy continuations on them.

Produces, for ARCH in ARCHS (today: qwen3):
    tests/data/tiny_<ARCH>.gguf          the model as GGUF, float32 weights (general.architecture
                                         = ARCH, the names and metadata llama.cpp's converter
                                         writes for it; no tokenizer: tests feed token ids)
    tests/data/tiny_<ARCH>_golden.gguf   a container (general.architecture = 'tandem-golden'):
        metadata  n_prompts (UINT32), p{i}.n_prompt (UINT32)
        tensors   p{i}.tokens  I32 [n_pos]         prompt ids, then N_NEW greedy ids
                  p{i}.logits  F32 [n_pos, vocab]  teacher-forced logits at every position
                  p{i}.margin  F32 [n_pos]         logit[top1] - logit[top2]

Reference
    transformers' own modelling code (e.g. Qwen3ForCausalLM) in float32, eager attention, on
    weights drawn here (seeded): matrices N(0, INIT_STD^2), norm weights 1 + N(0, 0.1^2)
    (so the QK-norm weights matter). The GGUF holds exactly those tensors under llama.cpp's
    names (no permutation: these architectures use NeoX-style RoPE, which llama.cpp's
    converter leaves unpermuted). Greedy: argmax of a full forward pass per step (no cache),
    N_NEW steps; then one teacher-forced pass over prompt + continuation gives the logits.

    /tmp/refvenv/bin/python tests/reference/make_arch_golden.py

Requirements: tests/reference/requirements.txt (transformers, gguf, numpy) and torch
(CPU is enough; a few seconds).
"""
import os

import numpy as np
import torch

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
SEED = 20261203
INIT_STD = 0.1
N_NEW = 12
PROMPT_LENGTHS = (7, 19, 33)


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=512, rope_theta=1e6, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attn_implementation="eager")
    model = Qwen3ForCausalLM(cfg)
    meta = {
        "block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
        "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
        "attention.head_count": cfg.num_attention_heads,
        "attention.head_count_kv": cfg.num_key_value_heads,
        "attention.key_length": cfg.head_dim, "attention.value_length": cfg.head_dim,
        "rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
        "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps), "vocab_size": cfg.vocab_size,
    }
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
                 "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(cfg.num_hidden_layers):
        for hf, g in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{g}.weight"
    return model, meta, names


ARCHS = {"qwen3": qwen3}


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))


def write_model(arch, model, meta, names, path):
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name(f"tiny-random-{arch}")
    for key, value in meta.items():
        full = f"{arch}.{key}"
        if isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, value)
    state = model.state_dict()
    assert set(state) == set(names), sorted(set(state) ^ set(names))
    for hf, g in names.items():
        w.add_tensor(g, state[hf].detach().numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    torch.set_num_threads(2)
    for arch, make in ARCHS.items():
        gen = torch.Generator().manual_seed(SEED)
        model, meta, names = make()
        randomize(model, gen)
        model.eval()
        write_model(arch, model, meta, names, os.path.join(DATA, f"tiny_{arch}.gguf"))
        out = gguf.GGUFWriter(os.path.join(DATA, f"tiny_{arch}_golden.gguf"), arch="tandem-golden")
        out.add_uint32("n_prompts", len(PROMPT_LENGTHS))
        vocab = model.config.vocab_size
        for i, n in enumerate(PROMPT_LENGTHS):
            tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
            with torch.no_grad():
                for _ in range(N_NEW):
                    logits = model(torch.tensor([tokens])).logits[0, -1]
                    tokens.append(int(torch.argmax(logits)))
                logits = model(torch.tensor([tokens])).logits[0].numpy().astype(np.float32)
            top2 = np.sort(logits, axis=1)[:, -2:]
            margin = (top2[:, 1] - top2[:, 0]).astype(np.float32)
            out.add_uint32(f"p{i}.n_prompt", n)
            out.add_tensor(f"p{i}.tokens", np.array(tokens, dtype=np.int32))
            out.add_tensor(f"p{i}.logits", logits)
            out.add_tensor(f"p{i}.margin", margin)
            print(f"{arch} prompt {i}: {n} + {N_NEW} tokens, logits in [{logits.min():.3f}, "
                  f"{logits.max():.3f}], smallest greedy margin "
                  f"{margin[n - 1:n - 1 + N_NEW].min():.4f}")
        out.write_header_to_file()
        out.write_kv_data_to_file()
        out.write_tensors_to_file()
        out.close()


if __name__ == "__main__":
    main()

"""Tiny random-weight models of each architecture, made with Hugging Face transformers,
written as GGUF, with transformers' logits and greedy continuations on them.

Produces, for ARCH in ARCHS (llama, qwen2, qwen3, gemma2, gemma3, phi3, mistral, and the
mixtures of experts qwen3moe, mixtral, mixtral_split, olmoe, qwen2moe; qwen3_yarn, qwen3
with YaRN RoPE scaling; gpt_oss) or those named on the command line:
    tests/data/tiny_<ARCH>.gguf          the model as GGUF, float32 weights (general.architecture
                                         = ARCH, the names and metadata llama.cpp's converter
                                         writes for it; no tokenizer: tests feed token ids)
    tests/data/tiny_<ARCH>_hf/           the same model as transformers saves it (config.json,
                                         float32 model.safetensors; gemma3's sharded with
                                         model.safetensors.index.json)
    tests/data/tiny_<ARCH>_golden.gguf   a container (general.architecture = 'tandem-golden'):
        metadata  n_prompts (UINT32), p{i}.n_prompt (UINT32)
        tensors   p{i}.tokens  I32 [n_pos]         prompt ids, then N_NEW greedy ids
                  p{i}.logits  F32 [n_pos, vocab]  teacher-forced logits at every position
                  p{i}.margin  F32 [n_pos]         logit[top1] - logit[top2]

Reference
    transformers' own modelling code (e.g. Qwen3ForCausalLM) in float32, eager attention, on
    weights drawn here (seeded): matrices N(0, INIT_STD^2), norm weights (as applied)
    1 + N(0, 0.1^2) (so the QK-norm weights matter). The GGUF holds those tensors under
    llama.cpp's names, as its converter writes them: Gemma's norms shifted by +1 (its RMSNorm
    multiplies by 1 + w), mistral's Q/K rows permuted for adjacent-pair RoPE, the others
    unpermuted (NeoX-style RoPE). Sliding windows are 8 keys and Gemma 2's soft-caps low
    (1.5 and 4), so that both shape the logits of these short prompts. Greedy: argmax of a full forward pass per step (no cache),
    N_NEW steps; then one teacher-forced pass over prompt + continuation gives the logits.

    Mixtures of experts: 8 experts (2 to 4 picked), the experts' weights as llama.cpp's
    converter stacks them (ffn_{gate,up,down}_exps [experts][rows][cols]), mixtral_split
    as older Mixtral files hold them (ffn_gate.E, one tensor per expert); a prompt is
    also drawn again until no token's k-th and (k+1)-th router logits lie within 1e-3
    (a near-tie float32 rounding could flip).

    /tmp/refvenv/bin/python tests/reference/make_arch_golden.py [ARCH ...]

Requirements: tests/reference/requirements.txt (transformers, gguf, numpy) and torch
(CPU is enough; a few seconds).
"""
import os
import shutil

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


def _meta(cfg, head_dim, **extra):
    meta = {
        "block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
        "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
        "attention.head_count": cfg.num_attention_heads,
        "attention.head_count_kv": cfg.num_key_value_heads,
        "attention.key_length": head_dim, "attention.value_length": head_dim,
        "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps), "vocab_size": cfg.vocab_size,
    }
    meta.update(extra)
    return meta


def _qkv_bias_names(cfg, names):
    """Qwen's Q/K/V biases under llama.cpp's names."""
    for i in range(cfg.num_hidden_layers):
        for hf, g in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v")):
            names[f"model.layers.{i}.self_attn.{hf}.bias"] = f"blk.{i}.{g}.bias"
    return names


def _layer_names(cfg, per_layer, names):
    for i in range(cfg.num_hidden_layers):
        for hf, g in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{g}.weight"
    return names


# Gemma's norms, as llama.cpp's converter writes them: the (1 + w) of Gemma's RMSNorm
# stored as one weight (every *norm.weight, the QK-norms included).
GEMMA_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
               "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}


def gemma2():
    """Local (window 8) and global layers, attention and final soft-capping set low
    enough to matter on these small logits, GeGLU, embedding scale, sandwich norms, and
    scores scaled by query_pre_attn_scalar 20 ≠ head_dim 32 (as Gemma 2 27B's 144 ≠ 128),
    written as tandem's key attention.query_pre_attn_scalar: llama.cpp's converter
    stores none (llama.cpp infers the 27B's from its layer count), nor can a tiny file's
    layer count say it."""
    from transformers import Gemma2Config, Gemma2ForCausalLM
    cfg = Gemma2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       query_pre_attn_scalar=20, sliding_window=8, attn_logit_softcapping=1.5,
                       final_logit_softcapping=4.0, max_position_embeddings=512,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, attn_implementation="eager")
    meta = _meta(cfg, cfg.head_dim, **{
        "rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
        "attention.sliding_window": cfg.sliding_window,
        "attn_logit_softcapping": float(cfg.attn_logit_softcapping),
        "final_logit_softcapping": float(cfg.final_logit_softcapping),
        "attention.query_pre_attn_scalar": cfg.query_pre_attn_scalar})
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    return Gemma2ForCausalLM(cfg), meta, _layer_names(cfg, GEMMA_LAYER, names)


def gemma3():
    """Five local layers (window 8, RoPE base 10,000) then a global one (base 10^6),
    QK-norm, GeGLU, embedding scale, sandwich norms."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    cfg = Gemma3TextConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                           max_position_embeddings=512, rms_norm_eps=1e-6,
                           tie_word_embeddings=True, attn_implementation="eager")
    assert cfg.layer_types[5] == "full_attention" and cfg.layer_types[4] == "sliding_attention"
    meta = _meta(cfg, cfg.head_dim, **{
        "rope.freq_base": float(cfg.rope_parameters["full_attention"]["rope_theta"]),
        "attention.sliding_window": cfg.sliding_window})
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = dict(GEMMA_LAYER, **{"self_attn.q_norm": "attn_q_norm",
                                 "self_attn.k_norm": "attn_k_norm"})
    return Gemma3ForCausalLM(cfg), meta, _layer_names(cfg, layer, names)


def phi3():
    """Fused QKV and gate/up projections, NeoX RoPE, a sliding window of 8 on every layer."""
    from transformers import Phi3Config, Phi3ForCausalLM
    cfg = Phi3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                     max_position_embeddings=512, original_max_position_embeddings=512,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                     eos_token_id=2, pad_token_id=0, attn_implementation="eager")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    meta = _meta(cfg, head_dim, **{
        "rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
        "rope.dimension_count": head_dim, "attention.sliding_window": cfg.sliding_window})
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = {"self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
             "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    return Phi3ForCausalLM(cfg), meta, _layer_names(cfg, layer, names)


def _permute_for_adjacent_rope(w, n_head):
    """llama.cpp's converter's Q/K row order for llama/mistral (pairs (2i, 2i+1))."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


LLAMA_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _adjacent_rope(model_cls, cfg, **extra_meta):
    """A llama-style model as llama.cpp's converter writes it: Q/K rows permuted for
    adjacent-pair RoPE."""
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    meta = _meta(cfg, head_dim, **{"rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
                                   **extra_meta})
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    permute = {}
    for i in range(cfg.num_hidden_layers):
        permute[f"model.layers.{i}.self_attn.q_proj.weight"] = cfg.num_attention_heads
        permute[f"model.layers.{i}.self_attn.k_proj.weight"] = cfg.num_key_value_heads
    return model_cls(cfg), meta, _layer_names(cfg, LLAMA_LAYER, names), permute


def llama():
    """The plain decoder."""
    from transformers import LlamaConfig, LlamaForCausalLM
    return _adjacent_rope(LlamaForCausalLM, LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        attn_implementation="eager"))


def llama31():
    """Llama 3.1's RoPE scaling (rope_type llama3) on a small original context (64), so
    that the factors span all three regimes at head dim 16; the GGUF's rope_freqs.weight
    is transformers' own: its default inverse frequencies over its llama3 ones."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="eager",
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                       "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})
    model, meta, names, permute = _adjacent_rope(LlamaForCausalLM, cfg)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    default = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    factors = (default / scaled.double()).float().numpy()
    assert factors.min() == 1.0 and abs(factors.max() - 8.0) < 1e-4 and len(set(factors)) > 2
    return model, meta, names, permute, {"rope_freqs.weight": factors}


def mistral():
    """Llama's decoder with a sliding window of 8 on every layer."""
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                        max_position_embeddings=512, rms_norm_eps=1e-5,
                        tie_word_embeddings=False, attn_implementation="eager")
    return _adjacent_rope(MistralForCausalLM, cfg, **{"attention.sliding_window": cfg.sliding_window})


def qwen2():
    """Q/K/V biases, NeoX RoPE, tied embeddings."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True,
                      attn_implementation="eager")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    meta = _meta(cfg, head_dim, **{"rope.freq_base": float(cfg.rope_parameters["rope_theta"])})
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight"}
    _layer_names(cfg, LLAMA_LAYER, names)
    _qkv_bias_names(cfg, names)
    return Qwen2ForCausalLM(cfg), meta, names


def qwen3_yarn():
    """qwen3 with YaRN RoPE scaling (factor 4 over an original context of 16, so that
    the ramp spans the 16 rotated pairs and the prompts run past the original context)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                       "original_max_position_embeddings": 16},
                      attn_implementation="eager")
    model, meta, names = qwen3()
    model = Qwen3ForCausalLM(cfg)
    meta.update({"context_length": cfg.max_position_embeddings, "rope.freq_base": 10000.0,
                 "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                 "rope.scaling.original_context_length": 16})
    return model, meta, names


def _moe_meta(cfg, head_dim, experts, used, expert_ffn, **extra):
    return _meta(cfg, head_dim, **{"rope.freq_base": float(cfg.rope_parameters["rope_theta"]),
                                   "expert_count": experts, "expert_used_count": used,
                                   "expert_feed_forward_length": expert_ffn, **extra})


MOE_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate": "ffn_gate_inp", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm"}


def qwen3moe():
    """Per-head QK-norm, head dim 32 beside hidden / heads = 16, 8 experts of which 4
    picked, their weights renormalised (norm_topk_prob, as llama.cpp reads qwen3moe)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                         moe_intermediate_size=32, num_experts=8, num_experts_per_tok=4,
                         norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                         rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         attn_implementation="eager")
    meta = _moe_meta(cfg, cfg.head_dim, 8, 4, cfg.moe_intermediate_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = dict(MOE_LAYER, **{"self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"})
    return Qwen3MoeForCausalLM(cfg), meta, _layer_names(cfg, layer, names)


def mixtral():
    """Llama with 8 experts, 2 picked and renormalised; Q/K permuted for adjacent RoPE."""
    from transformers import MixtralConfig, MixtralForCausalLM
    cfg = MixtralConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_local_experts=8,
                        num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                        rope_theta=1e6, tie_word_embeddings=False, attn_implementation="eager")
    model, meta, names, permute = _adjacent_rope(MixtralForCausalLM, cfg, **{
        "expert_count": 8, "expert_used_count": 2})
    names = {k: v for k, v in names.items() if ".mlp." not in k}
    for i in range(cfg.num_hidden_layers):
        names[f"model.layers.{i}.mlp.gate.weight"] = f"blk.{i}.ffn_gate_inp.weight"
    return model, meta, names, permute


def olmoe():
    """QK-norm over the whole projection, 8 experts of which 3 picked, not renormalised."""
    from transformers import OlmoeConfig, OlmoeForCausalLM
    cfg = OlmoeConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_experts=8,
                      num_experts_per_tok=3, norm_topk_prob=False, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, pad_token_id=1,
                      eos_token_id=2, bos_token_id=None, attn_implementation="eager")
    meta = _moe_meta(cfg, cfg.hidden_size // cfg.num_attention_heads, 8, 3, cfg.intermediate_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = dict(MOE_LAYER, **{"self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"})
    return OlmoeForCausalLM(cfg), meta, _layer_names(cfg, layer, names)


def qwen2moe():
    """Q/K/V biases, 8 experts of which 2 picked (not renormalised) and a shared expert
    of another width behind its sigmoid gate."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
    cfg = Qwen2MoeConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                         moe_intermediate_size=32, shared_expert_intermediate_size=96,
                         num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rope_theta=1e6, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, attn_implementation="eager")
    meta = _moe_meta(cfg, cfg.hidden_size // cfg.num_attention_heads, 8, 2,
                     cfg.moe_intermediate_size, expert_shared_count=1,
                     expert_shared_feed_forward_length=cfg.shared_expert_intermediate_size)
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = dict(MOE_LAYER, **{"mlp.shared_expert.gate_proj": "ffn_gate_shexp",
                               "mlp.shared_expert.up_proj": "ffn_up_shexp",
                               "mlp.shared_expert.down_proj": "ffn_down_shexp",
                               "mlp.shared_expert_gate": "ffn_gate_inp_shexp"})
    _layer_names(cfg, layer, names)
    _qkv_bias_names(cfg, names)
    return Qwen2MoeForCausalLM(cfg), meta, names


def gpt_oss():
    """gpt-oss: Q/K/V/O biases, attention sinks, a sliding window of 8 on every other
    layer (from layer 0), YaRN (factor 4 over an original context of 16, not truncated),
    8 experts of which 2 picked by a biased router with a softmax over the picked two,
    the experts' biases and the clamped SwiGLU (its gate and up weights drawn 5× larger
    so that the clamps at ±7 bind)."""
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = GptOssConfig(vocab_size=512, hidden_size=64, intermediate_size=32, num_local_experts=8,
                       num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=32, sliding_window=8,
                       max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                        "original_max_position_embeddings": 16},
                       attn_implementation="eager")
    assert cfg.layer_types == ["sliding_attention", "full_attention"]
    meta = _meta(cfg, cfg.head_dim, **{
        "rope.freq_base": 10000.0, "expert_count": 8, "expert_used_count": 2,
        "expert_feed_forward_length": cfg.intermediate_size,
        "attention.sliding_window": cfg.sliding_window, "rope.scaling.type": "yarn",
        "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 16})
    del meta["feed_forward_length"]  # llama.cpp's gpt-oss files give the experts' width only
    names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
             "model.norm.weight": "output_norm.weight"}
    layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.router": "ffn_gate_inp", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "post_attention_norm"}
    _layer_names(cfg, layer, names)
    for i in range(cfg.num_hidden_layers):
        for hf, g in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                      ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                      ("mlp.router", "ffn_gate_inp")):
            names[f"model.layers.{i}.{hf}.bias"] = f"blk.{i}.{g}.bias"
        names[f"model.layers.{i}.self_attn.sinks"] = f"blk.{i}.attn_sinks.weight"
    return GptOssForCausalLM(cfg), meta, names


def mixtral_split():
    """mixtral, its experts one tensor each (ffn_gate.E), as older Mixtral files hold them."""
    return mixtral()


ARCHS = {"llama": llama, "llama31": llama31, "qwen2": qwen2, "qwen3": qwen3, "gemma2": gemma2, "gemma3": gemma3, "phi3": phi3, "mistral": mistral,
         "qwen3moe": qwen3moe, "mixtral": mixtral, "mixtral_split": mixtral_split, "olmoe": olmoe,
         "qwen2moe": qwen2moe, "qwen3_yarn": qwen3_yarn, "gpt_oss": gpt_oss}
# general.architecture where it is not the golden's name.
GGUF_ARCH = {"llama31": "llama", "mixtral": "llama", "mixtral_split": "llama",
             "qwen3_yarn": "qwen3", "gpt_oss": "gpt-oss"}
# How each family's GGUF stores a norm weight w of the transformers model.
NORM_SHIFT = {"gemma2": 1.0, "gemma3": 1.0}


def randomize(model, gen, norm_center=1.0):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(norm_center + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))


def _expert_tensors(state, split):
    """The fused experts of transformers (gate_up_proj [E][2F][H], gate first;
    down_proj [E][H][F]) as llama.cpp's GGUF names them: stacked, or one per expert.
    gpt-oss's are transposed ([E][H][2F], gate and up interleaved; down [E][F][H]) and
    carry biases, which llama.cpp's converter de-interleaves as the weights."""
    out = {}
    for key in [k for k in state if k.endswith("mlp.experts.gate_up_proj_bias")]:
        i = int(key.split(".")[2])
        gate_up = state.pop(key[:-len("_bias")]).detach().numpy().astype(np.float32)
        bias = state.pop(key).detach().numpy().astype(np.float32)
        down = state.pop(key.replace("gate_up_proj_bias", "down_proj")).detach().numpy()
        down_bias = state.pop(key.replace("gate_up_proj_bias", "down_proj_bias")).detach().numpy()
        parts = {"ffn_gate_exps.weight": gate_up[:, :, 0::2].transpose(0, 2, 1),
                 "ffn_up_exps.weight": gate_up[:, :, 1::2].transpose(0, 2, 1),
                 "ffn_down_exps.weight": down.transpose(0, 2, 1),
                 "ffn_gate_exps.bias": bias[:, 0::2], "ffn_up_exps.bias": bias[:, 1::2],
                 "ffn_down_exps.bias": down_bias}
        for g, t in parts.items():
            out[f"blk.{i}.{g}"] = np.ascontiguousarray(t, dtype=np.float32)
    for key in [k for k in state if k.endswith("mlp.experts.gate_up_proj")]:
        i = int(key.split(".")[2])
        gate_up = state.pop(key).detach().numpy().astype(np.float32)
        down = state.pop(key.replace("gate_up_proj", "down_proj")).detach().numpy()
        f = gate_up.shape[1] // 2
        parts = {"ffn_gate": gate_up[:, :f], "ffn_up": gate_up[:, f:], "ffn_down": down}
        for g, t in parts.items():
            if split:
                for e in range(t.shape[0]):
                    out[f"blk.{i}.{g}.{e}.weight"] = np.ascontiguousarray(t[e], dtype=np.float32)
            else:
                out[f"blk.{i}.{g}_exps.weight"] = np.ascontiguousarray(t, dtype=np.float32)
    return out


def write_model(arch, model, meta, names, path, permute=None, norm_shift=0.0, extra=None):
    gguf_arch = GGUF_ARCH.get(arch, arch)
    w = gguf.GGUFWriter(path, arch=gguf_arch)
    w.add_name(f"tiny-random-{arch}")
    for key, value in meta.items():
        full = f"{gguf_arch}.{key}"
        if isinstance(value, str):
            w.add_string(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, value)
    state = {k: v for k, v in model.state_dict().items()
             if not (k == "lm_head.weight" and model.config.tie_word_embeddings)}
    experts = _expert_tensors(state, split=arch == "mixtral_split")
    assert set(state) == set(names), sorted(set(state) ^ set(names))
    for hf, g in names.items():
        t = state[hf].detach().numpy().astype(np.float32)
        if permute and hf in permute:
            t = _permute_for_adjacent_rope(t, permute[hf])
        if hf.endswith("norm.weight"):
            t = t + np.float32(norm_shift)
        if hf.endswith("shared_expert_gate.weight"):
            t = t.reshape(-1)  # [hidden], as llama.cpp's converter writes it
        w.add_tensor(g, t)
    for g, t in experts.items():
        w.add_tensor(g, t)
    for g, t in (extra or {}).items():
        w.add_tensor(g, np.asarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _router_gaps(model):
    """Hooks that record, per call of a router, the smallest gap between each token's
    k-th and (k+1)-th logit (a near-tie could pick other experts in float32)."""
    gaps = []

    def hook(module, args, output):
        logits = output[0] if isinstance(output, tuple) else output
        top = torch.sort(logits.float(), dim=-1, descending=True).values
        k = module.top_k
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for name, m in model.named_modules():
        if (name.endswith("mlp.gate") or name.endswith("mlp.router")) and hasattr(m, "top_k"):
            m.register_forward_hook(hook)
    return gaps


def main():
    import sys
    torch.set_num_threads(2)
    chosen = sys.argv[1:] or list(ARCHS)
    for arch in chosen:
        make = ARCHS[arch]
        gen = torch.Generator().manual_seed(SEED)
        model, meta, names, *rest = make()
        permute = rest[:1]
        extra = rest[1] if len(rest) > 1 else {}
        shift = NORM_SHIFT.get(arch, 0.0)
        # Norm weights near 1 as the model applies them (Gemma applies 1 + w).
        randomize(model, gen, norm_center=1.0 - shift)
        if arch == "gpt_oss":  # gate and up large enough that the SwiGLU's clamps bind
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("experts.gate_up_proj"):
                        p.mul_(5.0)
        model.eval()
        write_model(arch, model, meta, names, os.path.join(DATA, f"tiny_{arch}.gguf"),
                    permute[0] if permute else None, shift, extra)
        # The same weights as a Hugging Face directory (float32 safetensors; gemma3's in
        # shards with an index, as large checkpoints are).
        hf_dir = os.path.join(DATA, f"tiny_{arch}_hf")
        shutil.rmtree(hf_dir, ignore_errors=True)
        if arch != "mixtral_split":  # mixtral's directory holds the same model
            model.save_pretrained(hf_dir, safe_serialization=True,
                                  max_shard_size="300KB" if arch == "gemma3" else "50GB")
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(hf_dir, extra)):
                os.remove(os.path.join(hf_dir, extra))
        out = gguf.GGUFWriter(os.path.join(DATA, f"tiny_{arch}_golden.gguf"), arch="tandem-golden")
        out.add_uint32("n_prompts", len(PROMPT_LENGTHS))
        vocab = model.config.vocab_size
        gaps = _router_gaps(model)
        for i, n in enumerate(PROMPT_LENGTHS):
            # A prompt whose greedy continuation has no near-tie (margin < 2e-3), so that
            # float32 rounding cannot flip a token: drawn again until so.
            for _ in range(20):
                gaps.clear()
                tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
                with torch.no_grad():
                    for _ in range(N_NEW):
                        logits = model(torch.tensor([tokens])).logits[0, -1]
                        tokens.append(int(torch.argmax(logits)))
                    logits = model(torch.tensor([tokens])).logits[0].numpy().astype(np.float32)
                top2 = np.sort(logits, axis=1)[:, -2:]
                margin = (top2[:, 1] - top2[:, 0]).astype(np.float32)
                if margin[n - 1:n - 1 + N_NEW].min() >= 2e-3 and min(gaps, default=1) >= 1e-3:
                    break
            out.add_uint32(f"p{i}.n_prompt", n)
            out.add_tensor(f"p{i}.tokens", np.array(tokens, dtype=np.int32))
            out.add_tensor(f"p{i}.logits", logits)
            out.add_tensor(f"p{i}.margin", margin)
            print(f"{arch} prompt {i}: {n} + {N_NEW} tokens, logits in [{logits.min():.3f}, "
                  f"{logits.max():.3f}], smallest greedy margin "
                  f"{margin[n - 1:n - 1 + N_NEW].min():.4f}"
                  + (f", smallest router gap {min(gaps):.4f}" if gaps else ""))
        out.write_header_to_file()
        out.write_kv_data_to_file()
        out.write_tensors_to_file()
        out.close()


if __name__ == "__main__":
    main()

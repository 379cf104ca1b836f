"""Golden end-to-end logits for the whole engine: SmolLM2-135M-Instruct (Q4_1 GGUF) in float32.

Produces
    tests/data/engine_golden.gguf   (general.architecture = 'tandem-golden'; only a container)
        metadata  n_prompts (UINT32), n_new (UINT32, = 48), n_top (UINT32, = 64),
                  n_sample (UINT32, = 1024), near_tie_threshold (FLOAT32, = 1e-3),
                  p{i}.n_prompt (UINT32), p{i}.text (STRING, the prompt text)
        tensors   (numpy shapes; GGUF ne is the reverse, e.g. top_ids has ne = [64, n_pos])
          sample_ids         I32 [1024]        fixed random vocab ids (seed SAMPLE_SEED, sorted,
                                               distinct), the same for every position and prompt
          p{i}.tokens        I32 [n_pos]       prompt ids followed by the 48 greedy ids
                                               (n_pos = n_prompt + 48)
          p{i}.top_ids       I32 [n_pos, 64]   the 64 largest logits' vocab ids at each position,
                                               by descending logit (torch.topk, sorted=True)
          p{i}.top_logits    F32 [n_pos, 64]   their logits
          p{i}.sample_logits F32 [n_pos, 1024] logits at sample_ids
          p{i}.lse           F32 [n_pos]       logsumexp over the full vocab (computed in float64)
          p{i}.lse_f64       F64 [n_pos]       the same, float64
          p{i}.margin        F32 [n_pos]       logit[top1] - logit[top2]
          p{i}.greedy_margin F32 [48]          top-2 margin of the KV-cached greedy step that
                                               produced continuation token j (near-tie if < 1e-3)
        Position t (0-based) holds the logits computed after reading tokens[0..t], i.e. the
        prediction for tokens[t+1]; the last position predicts a token that is not stored.
        The argmax at position n_prompt-1+j is continuation token j (checked, see below).
    tests/data/engine_golden.json   for humans: prompt texts, prompt/continuation ids, decoded
        continuations, per-prompt margin stats, near-ties, versions, how the model was loaded.

Reference
    Hugging Face transformers' own GGUF loading (AutoModelForCausalLM.from_pretrained(models_dir,
    gguf_file=..., dtype=torch.float32, attn_implementation='eager')): it dequantizes every GGUF
    tensor with gguf-py's numpy dequantizer to float32 and un-permutes attn_q/attn_k back to HF
    layout (LlamaForCausalLM, tied lm_head = token_embd). The script asserts all parameters are
    float32. Prompts are tokenized with tests/reference/hf_tokenizer.py (load_reference_tokenizer,
    patched, add_special_tokens=False: no BOS, as the GGUF says).
    1. Greedy decoding of N_NEW=48 tokens with our own loop (argmax of the float32 logits at each
       step, KV cache via past_key_values, no sampling/penalties, EOS ignored, so always 48).
    2. ONE teacher-forced forward pass over prompt+continuation (no cache, all positions), from
       which every recorded number comes.
    Sanity checks printed at the end: positions per prompt, min greedy margin, and whether the
    teacher-forced argmax at n_prompt-1+j equals continuation token j for every j (exceptions
    are listed; they can only be near-ties between cached and uncached arithmetic).

How to run (from the repository root; CPU only, ~7 min on 2 cores, ~25 s of it loading)
    /tmp/refvenv/bin/python tests/reference/make_engine_golden.py \
        [--model models/smollm2-135m-instruct-q4_1.gguf] \
        [--out tests/data/engine_golden.gguf] [--json tests/data/engine_golden.json]

Requirements
    tests/reference/requirements.txt (gguf==0.19.0, transformers==5.24.0, tokenizers==0.23.3,
    numpy) plus torch and accelerate (transformers refuses GGUF model loading without
    accelerate). The checked-in files were made with torch 2.15.0+cu132 run on CPU,
    accelerate 1.15.0, numpy 2.4.6, Python 3.11.7 (also in the JSON "versions" field).
    No network. Deterministic: seeded sample ids, greedy decoding, torch.set_num_threads(2),
    float32 throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from hf_tokenizer import load_reference_tokenizer, reference_description  # noqa: E402

TORCH_VERSION_USED = "2.15.0+cu132"  # the run that produced the checked-in files (executed on CPU)

N_NEW = 48
N_TOP = 64
N_SAMPLE = 1024
SAMPLE_SEED = 20240531
NEAR_TIE = 1e-3

_LONG_PARAGRAPHS = [
    "The old lighthouse stood at the edge of the northern cliffs, where the land ended abruptly "
    "and the sea began its endless argument with the rocks. For more than a century it had guided "
    "fishing boats home through fog and storm, its lamp turning patiently through the long winter "
    "nights. The keeper, a quiet woman named Elena, had lived there for thirty years. She knew "
    "every sound the building made: the groan of the iron stairs in the cold, the whistle of the "
    "wind through the broken pane on the third landing, the soft ticking of the clockwork that "
    "rotated the great lens.",
    "One autumn evening a small sailboat appeared on the horizon, drifting without power as the "
    "clouds gathered over the water. Its radio was silent and its mast was bent. The automatic "
    "beacon blinked its short green signal, but the boat did not turn toward it. Elena watched "
    "through her binoculars as the vessel came closer to the reef, and she understood that its "
    "crew could not see the low light on the breakwater through the rain. She climbed the stairs "
    "faster than she had in years, opened the shutters of the great lens, and turned the old "
    "lamp to its brightest setting.",
    "The beam swept across the water, white and steady, and after a long minute the little boat "
    "began to turn toward the safe channel. In the morning, two exhausted students knocked on her "
    "door to thank her, still wearing their wet jackets. They had been sailing",
]

PROMPTS = [
    # 0: short factual
    "The capital of France is",
    # 1: ChatML chat prompt (special tokens <|im_start|>/<|im_end|> are single tokens)
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    # 2: code
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n",
    # 3: list / number heavy
    "Monthly sales report 2023:\n1. January: 12,450 units ($348,600)\n2. February: 11,982 units "
    "($335,496)\n3. March:",
    # 4: French
    "Il était une fois, dans un petit village au bord de la mer, une jeune fille qui rêvait de",
    # 5: Vietnamese
    "Hà Nội là thủ đô của Việt Nam. Thành phố nổi tiếng với",
    # 6: Chinese
    "中国的首都是北京。北京是一座历史悠久的城市，",
    # 7: single token
    "Hello",
    # 8: long prose (~300-400 tokens)
    "\n\n".join(_LONG_PARAGRAPHS),
    # 9: chat prompt, code question with a list (ChatML, no system)
    "<|im_start|>user\nList three prime numbers greater than 100 and write a Python one-liner that "
    "checks if 101 is prime.<|im_end|>\n<|im_start|>assistant\n",
]


def make_sample_ids(vocab: int) -> np.ndarray:
    rng = np.random.default_rng(SAMPLE_SEED)
    return np.sort(rng.choice(vocab, size=N_SAMPLE, replace=False)).astype(np.int32)


def greedy(model, torch, prompt_ids: list[int]):
    """Own greedy loop with KV cache. Returns (continuation ids, margin of each step)."""
    ids, margins = [], []
    with torch.no_grad():
        inp = torch.tensor([prompt_ids], dtype=torch.long)
        out = model(input_ids=inp, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
        for step in range(N_NEW):
            top2 = torch.topk(logits, 2)
            tok = int(torch.argmax(logits))
            assert tok == int(top2.indices[0]) or float(top2.values[0] - top2.values[1]) == 0.0
            ids.append(tok)
            margins.append(float(top2.values[0] - top2.values[1]))
            if step == N_NEW - 1:
                break
            out = model(input_ids=torch.tensor([[tok]], dtype=torch.long), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1]
    return ids, margins


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "engine_golden.gguf"))
    ap.add_argument("--json", default=os.path.join(ROOT, "tests", "data", "engine_golden.json"))
    ap.add_argument("--tokenize-only", action="store_true", help="print prompt token counts and exit")
    args = ap.parse_args()

    t0 = time.time()
    tok = load_reference_tokenizer(args.model)
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    for i, (p, ids) in enumerate(zip(PROMPTS, prompt_ids)):
        assert tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == p, i
    if args.tokenize_only:
        for i, ids in enumerate(prompt_ids):
            print(i, len(ids), ids[:12])
        return 0

    import gguf
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(args.model)),
        gguf_file=os.path.basename(args.model),
        dtype=torch.float32,
        attn_implementation="eager",
    )
    model.eval()
    cfg = model.config
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    assert dtypes == ["torch.float32"], dtypes
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert tied or torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    vocab = cfg.vocab_size
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None)}
    model_info = {
        "class": type(model).__name__,
        "loaded_by": "AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=..., dtype=torch.float32, "
        "attn_implementation='eager'); transformers dequantizes with gguf-py (numpy) to float32",
        "param_dtypes": dtypes,
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "lm_head_tied_to_embed_tokens": bool(tied),
        "num_hidden_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "intermediate_size": cfg.intermediate_size,
        "vocab_size": vocab,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope": {k: v for k, v in dict(rope).items() if isinstance(v, (int, float, str, type(None)))},
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
    }
    print("model:", json.dumps(model_info))
    t_load = time.time() - t0

    sample_ids = make_sample_ids(vocab)
    sample_idx_t = torch.from_numpy(sample_ids.astype(np.int64))

    w = gguf.GGUFWriter(args.out, arch="tandem-golden")
    w.add_name("engine-golden")
    w.add_description(
        "Teacher-forced float32 logits of SmolLM2-135M-Instruct (HF transformers from the Q4_1 GGUF) "
        "over prompt + 48 greedy tokens; see tests/reference/make_engine_golden.py"
    )
    w.add_uint32("n_prompts", len(PROMPTS))
    w.add_uint32("n_new", N_NEW)
    w.add_uint32("n_top", N_TOP)
    w.add_uint32("n_sample", N_SAMPLE)
    w.add_float32("near_tie_threshold", NEAR_TIE)
    w.add_tensor("sample_ids", sample_ids)

    cases, report = [], []
    for i, (text, pids) in enumerate(zip(PROMPTS, prompt_ids)):
        ts = time.time()
        cont, gmargins = greedy(model, torch, pids)
        tokens = pids + cont
        n_prompt, n_pos = len(pids), len(tokens)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens], dtype=torch.long), use_cache=False).logits[0]
        assert logits.dtype == torch.float32 and logits.shape == (n_pos, vocab)
        top = torch.topk(logits, N_TOP, dim=-1, sorted=True)
        top_ids = top.indices.to(torch.int32).numpy()
        top_logits = top.values.numpy().astype(np.float32)
        margin = (top.values[:, 0] - top.values[:, 1]).numpy().astype(np.float32)
        lse64 = torch.logsumexp(logits.double(), dim=-1).numpy()
        sample_logits = logits.index_select(1, sample_idx_t).numpy().astype(np.float32)
        argmax = torch.argmax(logits, dim=-1).numpy()

        mism = []
        for j, c in enumerate(cont):
            pos = n_prompt - 1 + j
            if int(argmax[pos]) != c:
                mism.append({"j": j, "pos": pos, "greedy": c, "teacher_forced": int(argmax[pos]),
                             "tf_margin": float(margin[pos]), "greedy_margin": gmargins[j]})
        near = [{"j": j, "margin": m} for j, m in enumerate(gmargins) if m < NEAR_TIE]

        w.add_uint32(f"p{i}.n_prompt", n_prompt)
        w.add_string(f"p{i}.text", text)
        w.add_tensor(f"p{i}.tokens", np.asarray(tokens, dtype=np.int32))
        w.add_tensor(f"p{i}.top_ids", np.ascontiguousarray(top_ids))
        w.add_tensor(f"p{i}.top_logits", np.ascontiguousarray(top_logits))
        w.add_tensor(f"p{i}.sample_logits", np.ascontiguousarray(sample_logits))
        w.add_tensor(f"p{i}.lse", lse64.astype(np.float32))
        w.add_tensor(f"p{i}.lse_f64", lse64.astype(np.float64))
        w.add_tensor(f"p{i}.margin", margin)
        w.add_tensor(f"p{i}.greedy_margin", np.asarray(gmargins, dtype=np.float32))

        tf_path_margin = margin[n_prompt - 1 : n_prompt - 1 + N_NEW]
        cases.append({
            "i": i,
            "text": text,
            "n_prompt": n_prompt,
            "n_pos": n_pos,
            "prompt_ids": pids,
            "continuation_ids": cont,
            "continuation_text": tok.decode(cont, skip_special_tokens=False, clean_up_tokenization_spaces=False),
            "greedy_margin_min": float(min(gmargins)),
            "greedy_margin_max": float(max(gmargins)),
            "tf_margin_min_all_positions": float(margin.min()),
            "tf_margin_median_all_positions": float(np.median(margin)),
            "tf_margin_max_all_positions": float(margin.max()),
            "tf_margin_min_on_greedy_path": float(tf_path_margin.min()),
            "near_ties": near,
            "greedy_vs_teacher_forced_mismatches": mism,
        })
        report.append((i, n_prompt, n_pos, min(gmargins), near, mism, time.time() - ts))
        print(f"p{i}: n_prompt={n_prompt} n_pos={n_pos} {time.time() - ts:.1f}s  "
              f"{cases[-1]['continuation_text']!r}", flush=True)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    doc = {
        "model_file": os.path.basename(args.model),
        "produced_by": "tests/reference/make_engine_golden.py",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
        },
        "tokenizer": reference_description(),
        "model": model_info,
        "n_new": N_NEW,
        "n_top": N_TOP,
        "n_sample": N_SAMPLE,
        "sample_seed": SAMPLE_SEED,
        "near_tie_threshold": NEAR_TIE,
        "margin_stats": {
            "greedy_margin_min_over_all": min(c["greedy_margin_min"] for c in cases),
            "tf_margin_max_over_all": max(c["tf_margin_max_all_positions"] for c in cases),
            "tf_margin_min_over_all": min(c["tf_margin_min_all_positions"] for c in cases),
            "n_near_ties": sum(len(c["near_ties"]) for c in cases),
            "n_mismatches": sum(len(c["greedy_vs_teacher_forced_mismatches"]) for c in cases),
        },
        "cases": cases,
    }
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")

    print("\n== sanity ==")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; load {t_load:.1f}s, "
          f"total {time.time() - t0:.1f}s")
    for i, n_prompt, n_pos, gmin, near, mism, dt in report:
        status = "OK" if not mism else f"{len(mism)} MISMATCH(ES): {mism}"
        print(f"p{i}: n_prompt={n_prompt:4d} n_pos={n_pos:4d} min_greedy_margin={gmin:.5f} "
              f"near_ties={len(near)} argmax==continuation: {status}")
    print(f"{args.out}: {os.path.getsize(args.out)} bytes; {args.json}: {os.path.getsize(args.json)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

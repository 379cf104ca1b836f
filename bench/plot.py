"""Plots for docs/performance.md from the benchmark tools' JSON.

    bench/plot.sh --prefill build/bench/prefill.json --batch build/bench/batch.json \
                  --compare build/bench/compare --out docs/img

Writes prefill_sweep.png (TTFT against prompt tokens with the line and quadratic fits),
batch_sweep.png (aggregate tokens/s and TPOT against batch size) and
latency_cdf_c<N>.png (TTFT and E2E CDFs of llama-server and tandem at each concurrency
of the side-by-side). matplotlib comes from PyPI (bench/plot-requirements.txt).
"""

import argparse
import glob
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def prefill(path, out):
    with open(path) as f:
        j = json.load(f)
    xs = [p["prompt_tokens"] for p in j["points"]]
    ys = [p["ttft_s"] for p in j["points"]]
    fit, quad = j["fit"], j.get("quadratic")
    grid = list(range(0, max(xs) + 1, max(1, max(xs) // 200)))
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(xs, ys, "o", label="measured TTFT (one output token)")
    ax.plot(grid, [fit["intercept_s"] + fit["slope_s_per_token"] * x for x in grid],
            label=f"line: {fit['intercept_s'] * 1e3:.0f} ms + {fit['slope_s_per_token'] * 1e3:.2f} ms/token")
    if quad:
        ax.plot(grid, [quad["c0_s"] + quad["c1_s_per_token"] * x + quad["c2_s_per_token2"] * x * x
                       for x in grid], "--", label="quadratic fit")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"Prefill sweep (MFU {j['mfu'] * 100:.0f} % of {j['machine_gemm_gflops']:.0f} GFLOP/s)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "prefill_sweep.png"), dpi=110)


def batch(path, out):
    with open(path) as f:
        j = json.load(f)
    b = [r["batch"] for r in j["rows"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(b, [r["tokens_per_s"] for r in j["rows"]], "o-", color="C0", label="tokens/s (all sequences)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (sequences decoding together)")
    ax.set_ylabel("aggregate tokens/s", color="C0")
    ax2 = ax.twinx()
    ax2.plot(b, [r["tpot_ms"] for r in j["rows"]], "s--", color="C1", label="TPOT")
    ax2.set_ylabel("TPOT (ms)", color="C1")
    if j.get("knee_batch"):
        ax.axvline(j["knee_batch"], color="grey", alpha=0.4)
    ax.set_title("Decode batch sweep")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "batch_sweep.png"), dpi=110)


def cdf(ax, values, label):
    v = sorted(values)
    ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=label)


def compare(directory, out):
    by_c = {}
    for path in glob.glob(os.path.join(directory, "*.c*.json")):
        m = re.match(r"(.+)\.c(\d+)\.json$", os.path.basename(path))
        if m:
            by_c.setdefault(int(m.group(2)), {})[m.group(1)] = path
    for c, runs in sorted(by_c.items()):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.6, 3.8))
        for label, path in sorted(runs.items()):
            with open(path) as f:
                reqs = [r for r in json.load(f)["requests"] if r["ok"]]
            cdf(a1, [r["ttft_s"] for r in reqs], label)
            cdf(a2, [r["e2e_s"] for r in reqs], label)
        for ax, name in ((a1, "TTFT (s)"), (a2, "E2E latency (s)")):
            ax.set_xlabel(name)
            ax.set_ylabel("fraction of requests")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"Latency CDFs at concurrency {c}")
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"latency_cdf_c{c}.png"), dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--prefill")
    p.add_argument("--batch")
    p.add_argument("--compare")
    p.add_argument("--out", default="docs/img")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.prefill:
        prefill(a.prefill, a.out)
    if a.batch:
        batch(a.batch, a.out)
    if a.compare:
        compare(a.compare, a.out)


if __name__ == "__main__":
    main()

"""The GPU's ceilings, measured in the same run as tandem's benchmarks (tests/gpu/run.sh):
a bf16 GEMM through torch (cuBLAS) at the Llama-3-8B prefill shape, device-to-device
copy bandwidth, and torch's scaled_dot_product_attention (flash backend) at 8k causal,
head dim 128 — the comparator of tandem's prefill attention. Prints one line per
figure; the last line is the summary run.sh shows."""
import time

import torch


def timed(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def main():
    dev = torch.device("cuda")
    m, k, n = 2048, 4096, 14336
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    s = timed(lambda: a @ b.t())
    tflops = 2 * m * n * k / s / 1e12
    print(f"bf16 GEMM {m}x{n}x{k}: {tflops:.0f} TFLOP/s")
    src = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src), reps=10)
    gbs = 2 * src.numel() / s / 1e9  # read + write
    print(f"device copy: {gbs:.0f} GB/s (read + write)")
    q = torch.randn(1, 32, 8192, 128, device=dev, dtype=torch.bfloat16)
    kk = torch.randn(1, 8, 8192, 128, device=dev, dtype=torch.bfloat16).repeat_interleave(4, 1)
    v = torch.randn_like(kk)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        s_attn = timed(
            lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True),
            reps=10)
    print(f"sdpa flash 8k causal d128: {s_attn * 1e3:.2f} ms")
    print(f"GEMM {tflops:.0f} TFLOP/s, copy {gbs:.0f} GB/s, sdpa 8k {s_attn * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

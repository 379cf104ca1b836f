"""Golden dequantization data: synthetic blocks of every supported type + slices of real tensors.

Produces
    tests/data/dequant_golden.gguf (~130 KB; general.architecture = 'tandem-test'), containing:

    Synthetic (seeded RNG, SEED below), for TYPE in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q5_0, Q5_1,
    IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS, MXFP4:
        synthetic.<TYPE>           the raw tensor, stored with its real ggml type.
                                   K-quants and IQ4_XS: 2 rows x 1024 (4 super-blocks of 256
                                   per row); Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL: 2 rows x 256
                                   (8 blocks of 32 per row);
                                   F32/F16/BF16: 2 rows x 256.
                                   (GGUF ne = [row length, 2]; numpy order (2, row length).)
        expected.synthetic.<TYPE>  F32, same logical shape: the reference dequantization.
        Quant bytes (and IQ4_XS's packed scales) are uniformly random; every float16
        scale/min field (d, m, dmin) is a finite
        value drawn from N(0, 0.05^2) (so some are negative) with ~10% set to exactly 0.
        F32/F16/BF16 contain, besides random normals, the special values +0, -0, +inf, -inf,
        NaN (quiet, negative, with payload), smallest/largest subnormals, smallest normal and
        +/- max finite, at the start of row 0. Compare NaNs by NaN-ness, not bits.

    Real tensors of models/smollm2-135m-instruct-q4_1.gguf:
        token_embd.weight (Q8_0), blk.0.attn_q.weight (Q4_1), blk.0.ffn_down.weight (Q4_1),
        blk.0.attn_norm.weight (F32), output_norm.weight (F32):
        expected.real.<name>       F32 1-D: the first 8192 elements (all if fewer) of the
                                   dequantized tensor in file order (row-major over ggml rows).
        metadata real.<name>.sum, real.<name>.sumsq   FLOAT64, computed in float64 over the
                                   WHOLE dequantized tensor (numpy pairwise summation).
        metadata real.<name>.n_elements (UINT64), real.<name>.type (STRING, ggml type name).

Reference
    gguf-py's numpy dequantizer, gguf.quants.dequantize(raw_uint8_rows, qtype) (gguf 0.19.0),
    which is independent of ggml's C code.

How to run (from the repository root)
    /tmp/refvenv/bin/python tests/reference/make_dequant_golden.py \
        [--model models/smollm2-135m-instruct-q4_1.gguf] [--out tests/data/dequant_golden.gguf]

Requirements
    tests/reference/requirements.txt (gguf==0.19.0, numpy). No torch, no network.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SEED = 7
N_REAL = 8192
ROWS = 2
REAL_TENSORS = [
    "token_embd.weight",
    "blk.0.attn_q.weight",
    "blk.0.ffn_down.weight",
    "blk.0.attn_norm.weight",
    "output_norm.weight",
]

# byte offsets (within one block) of the float16 scale/min fields, per type
F16_FIELDS = {
    T.Q8_0: [0],  # d, int8 qs[32]                               (34 bytes)
    T.Q4_0: [0],  # d, qs[16]                                    (18 bytes)
    T.Q4_1: [0, 2],  # d, m, qs[16]                              (20 bytes)
    T.Q4_K: [0, 2],  # d, dmin, scales[12], qs[128]              (144 bytes)
    T.Q6_K: [208],  # ql[128], qh[64], int8 scales[16], d        (210 bytes)
    T.Q5_0: [0],  # d, qh[4], qs[16]                             (22 bytes)
    T.Q5_1: [0, 2],  # d, m, qh[4], qs[16]                       (24 bytes)
    T.IQ4_NL: [0],  # d, qs[16]                                  (18 bytes)
    T.Q2_K: [80, 82],  # scales[16], qs[64], d, dmin             (84 bytes)
    T.Q3_K: [108],  # hmask[32], qs[64], scales[12], d           (110 bytes)
    T.Q5_K: [0, 2],  # d, dmin, scales[12], qh[32], qs[128]      (176 bytes)
    T.IQ4_XS: [0],  # d, scales_h (u16), scales_l[4], qs[128]    (136 bytes)
    T.MXFP4: [],  # u8 e (E8M0, random), qs[16]                   (17 bytes)
}


def f16_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    v = (rng.standard_normal(n) * 0.05).astype(np.float16)
    v[rng.random(n) < 0.1] = 0
    assert np.all(np.isfinite(v))
    return v


def synth_quant(rng: np.random.Generator, qtype: T, n_per_row: int) -> np.ndarray:
    block, tsize = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = ROWS * n_per_row // block
    raw = rng.integers(0, 256, size=(nblocks, tsize), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = f16_scales(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
    if qtype == T.MXFP4:  # the E8M0 edges: subnormal halves (0, 1), the first normal, the top
        raw[:5, 0] = [0, 1, 2, 254, 255]
    return raw.reshape(ROWS, n_per_row // block * tsize)


def synth_float(rng: np.random.Generator, qtype: T, n_per_row: int) -> np.ndarray:
    n = ROWS * n_per_row
    if qtype == T.F32:
        vals = (rng.standard_normal(n) * 3).astype(np.float32)
        bits = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FA12345,
                0x00000001, 0x007FFFFF, 0x80000001, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000]
        special = np.array(bits, dtype=np.uint32).view(np.float32)
    elif qtype == T.F16:
        vals = (rng.standard_normal(n) * 3).astype(np.float16)
        bits = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7D23,
                0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]
        special = np.array(bits, dtype=np.uint16).view(np.float16)
    elif qtype == T.BF16:
        # bf16 = upper 16 bits of a float32 (truncated random normals)
        vals = ((rng.standard_normal(n) * 3).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        bits = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7FA1,
                0x0001, 0x007F, 0x8001, 0x0080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80]
        special = np.array(bits, dtype=np.uint16)
    else:
        raise ValueError(qtype)
    vals[: len(special)] = special
    return vals.view(np.uint8).reshape(ROWS, -1)


SYNTH = [  # (type, elements per row)
    (T.F32, 256), (T.F16, 256), (T.BF16, 256),
    (T.Q8_0, 256), (T.Q4_0, 256), (T.Q4_1, 256),
    (T.Q4_K, 1024), (T.Q6_K, 1024),
    # Appended (after the types above, so their data stays the same for a given SEED).
    (T.Q5_0, 256), (T.Q5_1, 256), (T.IQ4_NL, 256),
    (T.Q2_K, 1024), (T.Q3_K, 1024), (T.Q5_K, 1024), (T.IQ4_XS, 1024),
    (T.MXFP4, 256),  # every E8M0 byte, 0 … 255: tiny subnormal to infinite values
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "dequant_golden.gguf"))
    args = ap.parse_args()

    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(args.out, arch="tandem-test")
    w.add_name("dequant-golden")
    w.add_description(
        "Golden dequantization data generated by tests/reference/make_dequant_golden.py; "
        "reference = gguf-py numpy gguf.quants.dequantize (gguf 0.19.0)."
    )
    print(f"{'tensor':40s} {'type':5s} {'shape':>12s}  summary")
    for qtype, n_per_row in SYNTH:
        if qtype in (T.F32, T.F16, T.BF16):
            raw = synth_float(rng, qtype, n_per_row)
        else:
            raw = synth_quant(rng, qtype, n_per_row)
        expected = dequantize(raw, qtype).astype(np.float32).reshape(ROWS, n_per_row)
        name = f"synthetic.{qtype.name}"
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        w.add_tensor("expected." + name, expected)
        fin = expected[np.isfinite(expected)]
        print(f"{name:40s} {qtype.name:5s} {str(expected.shape):>12s}  raw {raw.nbytes} B, "
              f"nan {int(np.isnan(expected).sum())}, inf {int(np.isinf(expected).sum())}, "
              f"finite min {fin.min():.6g} max {fin.max():.6g}")

    reader = gguf.GGUFReader(args.model)
    by_name = {t.name: t for t in reader.tensors}
    for tname in REAL_TENSORS:
        t = by_name[tname]
        full = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
        assert full.size == int(t.n_elements), (tname, full.size, t.n_elements)
        s = float(np.sum(full, dtype=np.float64))
        ss = float(np.sum(np.square(full.astype(np.float64))))
        w.add_tensor(f"expected.real.{tname}", np.ascontiguousarray(full[:N_REAL]))
        w.add_float64(f"real.{tname}.sum", s)
        w.add_float64(f"real.{tname}.sumsq", ss)
        w.add_uint64(f"real.{tname}.n_elements", int(full.size))
        w.add_string(f"real.{tname}.type", t.tensor_type.name)
        print(f"expected.real.{tname:26s} {t.tensor_type.name:5s} {str(min(N_REAL, full.size)):>12s}  "
              f"of {full.size}: sum {s:.17g} sumsq {ss:.17g}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

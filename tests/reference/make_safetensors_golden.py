"""A safetensors file written by the `safetensors` package, for the reader's tests.

Produces tests/data/safetensors_golden.safetensors (a few KB):
    f32      float32 [2, 3, 4], value i * 0.5 - 3 at flat index i
    f16      float16 [8],       value i - 2.5
    i64      int64   [3, 2],    value i * 1000 - 2
    u8       uint8   [5],       value 250 + i
    flags    bool    [4],       True, False, True, True
    scalar   float32 [],        7.25
    empty    float32 [0, 4]
  metadata {"format": "pt", "made_by": "tests/reference/make_safetensors_golden.py"}

The package (Hugging Face's own implementation, independent of tandem's reader) decides
the header's layout, ordering, padding and offsets; safetensors_file_test.cc recomputes
the values above and checks that the reader finds them where the package put them.

    /tmp/refvenv/bin/python tests/reference/make_safetensors_golden.py
"""
import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "data", "safetensors_golden.safetensors")

tensors = {
    "f32": (np.arange(24, dtype=np.float32) * 0.5 - 3).reshape(2, 3, 4),
    "f16": np.arange(8, dtype=np.float16) - np.float16(2.5),
    "i64": (np.arange(6, dtype=np.int64) * 1000 - 2).reshape(3, 2),
    "u8": np.arange(250, 255, dtype=np.uint8),
    "flags": np.array([True, False, True, True]),
    "scalar": np.array(7.25, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
}
save_file(tensors, OUT, metadata={"format": "pt", "made_by": "tests/reference/make_safetensors_golden.py"})
print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")

"""Golden tensor list of the default model, read by the `gguf` package's GGUFReader.

Produces
    tests/data/smollm2_tensors.json: [{"name": str, "type": "Q4_1", "shape": [ne0, ne1, ...],
                                       "bytes": int}, ...] in file order.
    `shape` is in GGUF order (ne0 first, the fastest-varying dimension), which is what
    `tandem inspect` prints.

How to run (from the repository root)
    scripts/fetch-model.sh
    /tmp/refvenv/bin/python tests/reference/make_tensor_list.py

Requirements
    tests/reference/requirements.txt (gguf==0.19.0, numpy).
"""

import json
import os

import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "data", "smollm2_tensors.json")


def main() -> None:
    reader = gguf.GGUFReader(MODEL)
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    with open(OUT, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(t) for t in tensors) + "\n]\n")
    print(f"wrote {len(tensors)} tensors to {OUT}")


if __name__ == "__main__":
    main()

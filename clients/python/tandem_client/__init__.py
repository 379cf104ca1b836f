"""Python client for tandem's public gRPC API (``tandem.v1.Generation``).

Generate the stubs first (``clients/python/generate_stubs.sh``), then, with
``clients/python`` on ``sys.path`` and the stub venv's interpreter::

    from tandem_client import TandemClient

    with TandemClient("127.0.0.1:50051") as client:
        client.wait_ready(timeout=60)
        print(client.complete("The capital of France is", max_tokens=8).text)

The generated modules import each other as ``tandem.v1.<name>_pb2``, so this package
puts its ``_gen`` directory at the front of ``sys.path`` on import.
"""

from __future__ import annotations

import os
import sys

_GEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_gen")

if not os.path.isfile(os.path.join(_GEN_DIR, "tandem", "v1", "generation_pb2.py")):
    raise ImportError(
        f"tandem_client: generated stubs not found in {_GEN_DIR}; "
        "run clients/python/generate_stubs.sh first"
    )
if _GEN_DIR not in sys.path:
    sys.path.insert(0, _GEN_DIR)

from .client import (  # noqa: E402  (needs _gen on sys.path)
    Chunk,
    Completion,
    Result,
    TandemClient,
    TandemError,
)

__all__ = ["Chunk", "Completion", "Result", "TandemClient", "TandemError"]

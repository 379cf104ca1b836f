"""Typed Python SDK for tandem's public gRPC API (``tandem.v1.Generation``).

::

    from tandem_client import TandemClient

    with TandemClient("127.0.0.1:50051") as client:
        stream = client.generate_stream(messages=[{"role": "user", "content": "Hi!"}])
        for chunk in stream:
            print(chunk.text, end="", flush=True)
        print(stream.completion.usage)

Install it with ``pip install ./clients/python`` (the gRPC stubs are generated from
``proto/`` at build time), or, in a checkout, run ``clients/python/generate_stubs.sh``
and put ``clients/python`` on ``sys.path``. The raw generated modules are
:mod:`tandem_client.generation_pb2` and :mod:`tandem_client.generation_pb2_grpc`.
"""

from __future__ import annotations

try:
    from ._gen.tandem.v1 import generation_pb2, generation_pb2_grpc
except ModuleNotFoundError as _err:  # pragma: no cover - only in an unprepared checkout
    if _err.name is None or not _err.name.startswith(__name__ + "._gen"):
        raise
    raise ImportError(
        "tandem_client: the generated gRPC stubs are missing; install the package "
        "(pip install ./clients/python) or run clients/python/generate_stubs.sh"
    ) from _err

from .client import SERVICE_NAME, GenerationStream, TandemClient
from .errors import TandemError
from .types import (
    ChatMessage,
    Chunk,
    Completion,
    FinishReason,
    Message,
    ModelInfo,
    ServerInfo,
    Timings,
    TokenLogprob,
    TopLogprob,
    Usage,
    WorkerInfo,
)

__version__ = "0.1.0"

__all__ = [
    "SERVICE_NAME",
    "ChatMessage",
    "Chunk",
    "Completion",
    "FinishReason",
    "GenerationStream",
    "Message",
    "ModelInfo",
    "ServerInfo",
    "TandemClient",
    "TandemError",
    "Timings",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "WorkerInfo",
    "__version__",
    "generation_pb2",
    "generation_pb2_grpc",
]

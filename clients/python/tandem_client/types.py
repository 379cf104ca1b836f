"""The typed values that :class:`tandem_client.TandemClient` returns.

All are plain dataclasses built from the gRPC responses; none holds a reference to a
protobuf message, so they can be kept, compared, pickled and printed freely.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict, Union

__all__ = [
    "ChatMessage",
    "Chunk",
    "Completion",
    "FinishReason",
    "Message",
    "ModelInfo",
    "ServerInfo",
    "Timings",
    "TokenLogprob",
    "TopLogprob",
    "Usage",
    "WorkerInfo",
]

#: Why a generation ended: ``"stop"`` (end-of-sequence token, a stop token id or a
#: stop string) or ``"length"`` (``max_tokens`` reached, or the context is full).
#: ``"unspecified"`` only appears if a server sends no reason.
FinishReason = Literal["stop", "length", "unspecified"]


class ChatMessage(TypedDict):
    """One turn of a chat: ``{"role": "system" | "user" | "assistant", "content": text}``."""

    role: str
    content: str


#: What ``messages=`` accepts per turn: a :class:`ChatMessage` or any mapping with
#: ``"role"`` and ``"content"`` (``content`` may also be UTF-8 ``bytes``).
Message = Union[ChatMessage, Mapping[str, Union[str, bytes]]]


@dataclass(frozen=True)
class TopLogprob:
    """One of the most likely tokens at a position.

    Attributes:
        token_id: The token.
        logprob: Its log-probability.
    """

    token_id: int
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probabilities at one generated position.

    Attributes:
        token_id: The sampled token.
        logprob: Its log-probability.
        top_logprobs: The most likely tokens, most likely first (as many as requested
            with ``logprobs=``).
    """

    token_id: int
    logprob: float
    top_logprobs: list[TopLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class Chunk:
    """New output of a streaming generation.

    Attributes:
        text: The new text: complete UTF-8, and never the start of a stop string
            (so it may lag ``token_ids`` by a few tokens).
        token_ids: Token ids generated since the previous chunk (the end-of-sequence
            token included when it ended the request).
        logprobs: One entry per token id when ``logprobs`` was requested, else empty.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class Usage:
    """Token counts of one request.

    Attributes:
        prompt_tokens: Tokens in the prompt.
        completion_tokens: Tokens generated.
        cached_tokens: Prompt tokens whose KV came from the prefix cache.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """``prompt_tokens + completion_tokens``."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Timings:
    """Where a request's time went, in milliseconds.

    Attributes:
        queue_ms: Waiting in the router's admission queue.
        prefill_ms: Reserving decode memory, prefill compute and KV transfer.
        kv_transfer_ms: Of ``prefill_ms``: pushing KV blocks to the decode worker.
        time_to_first_token_ms: From arrival at the router to the first token leaving it.
        decode_ms: From the first token to the last.
        e2e_ms: From arrival to completion.
        prefill_compute_ms: Of ``prefill_ms``: the prefill worker's forward pass.
        prefill_queue_ms: Of ``prefill_ms``: waiting in the prefill worker's queue.
    """

    queue_ms: float = 0.0
    prefill_ms: float = 0.0
    kv_transfer_ms: float = 0.0
    time_to_first_token_ms: float = 0.0
    decode_ms: float = 0.0
    e2e_ms: float = 0.0
    prefill_compute_ms: float = 0.0
    prefill_queue_ms: float = 0.0


@dataclass(frozen=True)
class Completion:
    """A finished generation: its whole output, why it ended and what it cost.

    :meth:`TandemClient.generate` returns one; a
    :class:`~tandem_client.GenerationStream` offers one as ``stream.completion``
    once it has ended (its ``text`` and ``token_ids`` are then the concatenation of
    every chunk).

    Attributes:
        text: The generated text (stop strings excluded).
        token_ids: The generated token ids.
        finish_reason: ``"stop"`` or ``"length"`` (see :data:`FinishReason`).
        stop_reason: The stop string that ended it, else ``""``.
        usage: Token counts.
        timings: Milliseconds per stage.
        request_id: The request's id (the router's when the caller gave none).
        logprobs: One entry per generated token when ``logprobs`` was requested.
    """

    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    stop_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    timings: Timings = field(default_factory=Timings)
    request_id: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class ModelInfo:
    """The model a tandem cluster serves.

    Attributes:
        model_name: Its name (from its file).
        architecture: ``"llama"``, ``"qwen2"``, ...
        vocab_size: Vocabulary size; token ids are in ``[0, vocab_size)``.
        max_context_length: Maximum tokens per sequence (prompt + output).
        eos_token_id: The end-of-sequence token id.
        num_layers: Transformer layers.
        hidden_size: Hidden size.
        kv_bytes_per_token: KV-cache bytes per token.
    """

    model_name: str
    architecture: str
    vocab_size: int
    max_context_length: int
    eos_token_id: int
    num_layers: int
    hidden_size: int
    kv_bytes_per_token: int


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the router sees it.

    Attributes:
        address: ``host:port``.
        healthy: Whether it answered its last health check.
        in_flight: Requests the router has in flight there.
        free_blocks: Free KV blocks at the last poll (decode workers).
    """

    address: str
    healthy: bool
    in_flight: int
    free_blocks: int


@dataclass(frozen=True)
class ServerInfo:
    """The router, its queue and its workers.

    Attributes:
        version: tandem's version.
        queued_requests: Requests waiting in the admission queue.
        queued_tokens: Prompt tokens waiting in the admission queue.
        running_requests: Requests past the queue (prefilling or decoding).
        prefill_workers: The prefill workers.
        decode_workers: The decode workers.
    """

    version: str
    queued_requests: int
    queued_tokens: int
    running_requests: int
    prefill_workers: list[WorkerInfo] = field(default_factory=list)
    decode_workers: list[WorkerInfo] = field(default_factory=list)

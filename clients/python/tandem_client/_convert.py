"""Conversions between the SDK's Python values and tandem's protobuf messages.

Internal: :class:`tandem_client.TandemClient` uses these; they are separate so that
they can be tested without a server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Union

from ._gen.tandem.v1 import generation_pb2 as pb
from .types import (
    Chunk,
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

#: A PEM given as its bytes (or text), or as the path of a file holding it.
PemSource = Union[bytes, str, "os.PathLike[str]"]

_FINISH_REASONS: dict[int, FinishReason] = {
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
}

_PEM_MARKER = b"-----BEGIN "


def utf8(text: str | bytes) -> bytes:
    """Text fields travel as UTF-8 bytes; ``bytes`` pass through unchanged (the server
    checks them and names the field when they are not valid UTF-8)."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def chat_to_proto(messages: Iterable[Message]) -> pb.Chat:
    """Builds a ``Chat`` from ``[{"role": ..., "content": ...}, ...]``.

    Raises:
        ValueError: a turn is not a mapping with string ``role`` and ``content``.
    """
    if isinstance(messages, (str, bytes)):
        raise ValueError("messages must be a list of {'role', 'content'} mappings, not a string")
    chat = pb.Chat()
    for i, message in enumerate(messages):
        try:
            role, content = message["role"], message["content"]
        except (KeyError, TypeError):
            raise ValueError(f"messages[{i}] must be a mapping with 'role' and 'content'") from None
        if not isinstance(role, str):
            raise ValueError(f"messages[{i}]['role'] must be a str")
        if not isinstance(content, (str, bytes)):
            raise ValueError(f"messages[{i}]['content'] must be a str or UTF-8 bytes")
        chat.messages.add(role=role, content=utf8(content))
    return chat


def build_generate_request(
    prompt: str | bytes | None = None,
    *,
    token_ids: Sequence[int] | None = None,
    messages: Iterable[Message] | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    stop: str | bytes | Sequence[str | bytes] | None = None,
    stop_token_ids: Sequence[int] | None = None,
    repetition_penalty: float | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    logprobs: int | None = None,
    ignore_eos: bool = False,
    priority: int | None = None,
    disable_speculation: bool = False,
    request_id: str | None = None,
    cache_salt: str | bytes | None = None,
    stream: bool = True,
) -> pb.GenerateRequest:
    """Builds a ``GenerateRequest``.

    Exactly one of ``prompt``, ``token_ids`` and ``messages`` must be given (an empty
    one still counts: the server then answers ``INVALID_ARGUMENT``). Options left
    ``None`` stay unset in the request, so the server applies its defaults.

    Raises:
        ValueError: not exactly one prompt, or a malformed chat turn.
    """
    given = [
        name
        for name, value in (("prompt", prompt), ("token_ids", token_ids), ("messages", messages))
        if value is not None
    ]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of prompt, token_ids and messages"
            + (f" (got {', '.join(given)})" if given else "")
        )

    params = pb.SamplingParams(
        ignore_eos=bool(ignore_eos), disable_speculation=bool(disable_speculation)
    )
    # Optional scalars: set only what the caller gave, so that the rest stay unset.
    for name, value in (
        ("max_tokens", max_tokens),
        ("temperature", temperature),
        ("top_k", top_k),
        ("top_p", top_p),
        ("min_p", min_p),
        ("seed", seed),
        ("repetition_penalty", repetition_penalty),
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
        ("logprobs", logprobs),
        ("priority", priority),
    ):
        if value is not None:
            setattr(params, name, value)
    if stop is not None:
        stops = [stop] if isinstance(stop, (str, bytes)) else list(stop)
        params.stop.extend(utf8(s) for s in stops)
    if stop_token_ids is not None:
        params.stop_token_ids.extend(stop_token_ids)

    request = pb.GenerateRequest(request_id=request_id or "", sampling_params=params, stream=stream)
    if cache_salt is not None:
        request.cache_salt = utf8(cache_salt)
    if prompt is not None:
        request.text = utf8(prompt)  # set even when empty: the oneof records it
    elif token_ids is not None:
        request.token_ids.SetInParent()  # an empty list is still a token_ids prompt
        request.token_ids.ids.extend(token_ids)
    else:
        assert messages is not None
        request.chat.SetInParent()  # an empty chat is still a chat prompt
        request.chat.CopyFrom(chat_to_proto(messages))
    return request


def build_tokenize_request(
    text: str | bytes | None = None, messages: Iterable[Message] | None = None
) -> pb.TokenizeRequest:
    """Builds a ``TokenizeRequest`` from exactly one of ``text`` and ``messages``."""
    if (text is None) == (messages is None):
        raise ValueError("give exactly one of text and messages")
    if text is not None:
        return pb.TokenizeRequest(text=utf8(text))
    assert messages is not None
    request = pb.TokenizeRequest()
    request.chat.SetInParent()
    request.chat.CopyFrom(chat_to_proto(messages))
    return request


def logprobs_from_proto(items: Iterable[pb.TokenLogprob]) -> list[TokenLogprob]:
    return [
        TokenLogprob(
            token_id=lp.token_id,
            logprob=lp.logprob,
            top_logprobs=[TopLogprob(t.token_id, t.logprob) for t in lp.top_logprobs],
        )
        for lp in items
    ]


def chunk_from_proto(chunk: pb.GenerateChunk) -> Chunk:
    return Chunk(
        text=chunk.text,
        token_ids=list(chunk.token_ids),
        logprobs=logprobs_from_proto(chunk.logprobs),
    )


def finish_reason_from_proto(value: int) -> FinishReason:
    return _FINISH_REASONS.get(value, "unspecified")


def usage_from_proto(usage: pb.Usage) -> Usage:
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
    )


def timings_from_proto(t: pb.Timings) -> Timings:
    return Timings(
        queue_ms=t.queue_ms,
        prefill_ms=t.prefill_ms,
        kv_transfer_ms=t.kv_transfer_ms,
        time_to_first_token_ms=t.time_to_first_token_ms,
        decode_ms=t.decode_ms,
        e2e_ms=t.e2e_ms,
        prefill_compute_ms=t.prefill_compute_ms,
        prefill_queue_ms=t.prefill_queue_ms,
    )


def model_info_from_proto(m: pb.GetModelInfoResponse) -> ModelInfo:
    return ModelInfo(
        model_name=m.model_name,
        architecture=m.architecture,
        vocab_size=m.vocab_size,
        max_context_length=m.max_context_length,
        eos_token_id=m.eos_token_id,
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        kv_bytes_per_token=m.kv_bytes_per_token,
    )


def _worker_from_proto(w: pb.WorkerInfo) -> WorkerInfo:
    return WorkerInfo(
        address=w.address, healthy=w.healthy, in_flight=w.in_flight, free_blocks=w.free_blocks
    )


def server_info_from_proto(s: pb.GetServerInfoResponse) -> ServerInfo:
    return ServerInfo(
        version=s.version,
        queued_requests=s.queued_requests,
        queued_tokens=s.queued_tokens,
        running_requests=s.running_requests,
        prefill_workers=[_worker_from_proto(w) for w in s.prefill_workers],
        decode_workers=[_worker_from_proto(w) for w in s.decode_workers],
    )


def auth_metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    """The gRPC metadata that carries ``api_key``: ``(("authorization", "Bearer <key>"),)``,
    or nothing when there is no key.

    Raises:
        ValueError: an empty key, or one that cannot travel in a header (not
            printable ASCII, or with surrounding whitespace).
    """
    if api_key is None:
        return ()
    if not isinstance(api_key, str):
        raise TypeError("api_key must be a str")
    if not api_key:
        raise ValueError("api_key must not be empty (pass None for no key)")
    if api_key != api_key.strip() or not all(0x20 < ord(c) < 0x7F or c == " " for c in api_key):
        raise ValueError("api_key must be printable ASCII without surrounding whitespace")
    return (("authorization", f"Bearer {api_key}"),)


def load_pem(source: PemSource | None, what: str) -> bytes | None:
    """Returns the PEM bytes of ``source``: ``bytes`` (or ``str``) holding a PEM
    (``-----BEGIN ...``) as they are, anything else as the path of a file to read.

    Raises:
        ValueError: the file cannot be read, or holds no PEM block.
    """
    if source is None:
        return None
    if isinstance(source, bytes) and _PEM_MARKER in source:
        return source
    if isinstance(source, str) and _PEM_MARKER.decode() in source:
        return source.encode("ascii")
    try:
        path = os.fsdecode(source)
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, TypeError) as err:
        raise ValueError(f"{what}: not PEM data and not a readable file ({err})") from err
    if _PEM_MARKER not in data:
        raise ValueError(f"{what}: {path} holds no PEM block")
    return data

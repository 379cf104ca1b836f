"""A small synchronous client for tandem's ``tandem.v1.Generation`` gRPC service.

Every RPC carries a deadline (the call's ``timeout``, else the client's), and every
gRPC failure surfaces as :class:`TandemError` with the status code and details the
server sent (``INVALID_ARGUMENT`` names the bad field, ``RESOURCE_EXHAUSTED`` means
the admission queue is full, ``UNAVAILABLE`` means no worker could serve it).
Mistakes the client can see without asking the server (no prompt, two prompts, a
chat turn without a role) raise :class:`ValueError` instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tandem.v1 import generation_pb2 as pb
from tandem.v1 import generation_pb2_grpc as pb_grpc

#: The service name that tandem reports through the standard gRPC health service.
SERVICE_NAME = "tandem.v1.Generation"

_FINISH_REASONS = {
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
}

_DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # Prompts given as token ids and tokenizations of long texts can be large.
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # Keep reconnection quick while a local server is still starting up, so that
    # wait_ready() notices it within a couple of seconds.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class TandemError(Exception):
    """A gRPC call to tandem failed.

    Attributes:
        code: The :class:`grpc.StatusCode` of the failure.
        details: The status message (for ``INVALID_ARGUMENT``, it names the field).
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> TandemError:
        """Wraps the :class:`grpc.RpcError` that a stub raised."""
        code_fn = getattr(err, "code", None)
        details_fn = getattr(err, "details", None)
        code = code_fn() if callable(code_fn) else None
        details = details_fn() if callable(details_fn) else None
        return cls(code or grpc.StatusCode.UNKNOWN, details or str(err))


@dataclass
class Chunk:
    """New output of a streaming generation.

    Attributes:
        token_ids: Token ids generated since the previous chunk (the end-of-sequence
            token included when it ended the request).
        text: Their text; complete UTF-8, and never the start of a stop string.
        logprobs: One dict per token id when ``logprobs`` was requested:
            ``{"token_id", "logprob", "top_logprobs": [{"token_id", "logprob"}, ...]}``.
    """

    token_ids: list[int]
    text: str
    logprobs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Completion:
    """The last item of a generation: why it ended and what it cost.

    Attributes:
        finish_reason: ``"stop"`` (end-of-sequence token, stop token id or stop
            string) or ``"length"`` (``max_tokens`` reached or the context is full).
        stop_reason: The stop string that ended it, else ``""``.
        prompt_tokens: Tokens in the prompt.
        completion_tokens: Tokens generated.
        cached_tokens: Prompt tokens whose KV came from a prefix cache.
        timings: Milliseconds per stage: ``queue_ms``, ``prefill_ms``,
            ``kv_transfer_ms``, ``time_to_first_token_ms``, ``decode_ms``, ``e2e_ms``.
        request_id: The request's id (the router's when the caller gave none).
    """

    finish_reason: str
    stop_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timings: dict[str, float]
    request_id: str

    @property
    def usage(self) -> dict[str, int]:
        """The token counts as a dict."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }


@dataclass
class Result:
    """A whole generation, as :meth:`TandemClient.complete` returns it.

    Attributes:
        text: The generated text (stop strings excluded).
        token_ids: The generated token ids.
        finish_reason: ``"stop"`` or ``"length"`` (see :class:`Completion`).
        usage: ``{"prompt_tokens", "completion_tokens", "cached_tokens"}``.
        timings: Milliseconds per stage (see :class:`Completion`).
        stop_reason: The stop string that ended it, else ``""``.
        request_id: The request's id.
        logprobs: One dict per token id when ``logprobs`` was requested.
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    usage: dict[str, int]
    timings: dict[str, float]
    stop_reason: str = ""
    request_id: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class TandemClient:
    """A connection to a tandem router.

    Args:
        endpoint: ``host:port`` of the router's gRPC port.
        timeout: Default deadline in seconds for every call; a call's own
            ``timeout`` overrides it. For :meth:`generate` it bounds the whole stream.
        credentials: TLS credentials; plaintext when ``None``.
        options: Extra gRPC channel options, applied after the client's defaults.

    The client is thread-safe (it wraps one gRPC channel) and a context manager::

        with TandemClient("127.0.0.1:50051") as client:
            for item in client.generate("Once upon a time", max_tokens=32):
                ...
    """

    def __init__(
        self,
        endpoint: str,
        timeout: float = 60.0,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        channel_options = list(_DEFAULT_CHANNEL_OPTIONS) + list(options)
        if credentials is None:
            self._channel = grpc.insecure_channel(endpoint, options=channel_options)
        else:
            self._channel = grpc.secure_channel(endpoint, credentials, options=channel_options)
        self._stub = pb_grpc.GenerationStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> TandemClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TandemClient({self.endpoint!r}, timeout={self.timeout})"

    # -- generation ----------------------------------------------------------------

    def generate(
        self,
        prompt: str | None = None,
        *,
        token_ids: Sequence[int] | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        stop_token_ids: Sequence[int] | None = None,
        repetition_penalty: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logprobs: int | None = None,
        ignore_eos: bool = False,
        request_id: str = "",
        timeout: float | None = None,
        stream: bool = True,
    ) -> Iterator[Chunk | Completion]:
        """Generates a completion, streaming it.

        Give exactly one prompt: ``prompt`` (text, tokenized with the model's BOS when
        it adds one), ``token_ids`` (used as they are) or ``messages`` (a chat: a list
        of ``{"role": ..., "content": ...}`` dicts, rendered with the model's chat
        template). The sampling options follow vLLM's names and ranges; those left
        ``None`` stay unset and take the server's defaults (``max_tokens`` 16,
        ``temperature`` 1, ...). A single string for ``stop`` means one stop string.

        Returns an iterator that yields :class:`Chunk` objects as tokens arrive and
        then exactly one :class:`Completion`. The RPC starts on the first ``next()``;
        a failure raises :class:`TandemError` from the iterator. Closing the iterator
        early (``break``, ``close()``, garbage collection) cancels the request.

        ``timeout`` bounds the whole stream. ``stream=False`` asks the server for one
        chunk holding everything instead of one per step.

        Raises:
            ValueError: not exactly one prompt, or a malformed chat turn.
        """
        request = self._generate_request(
            prompt,
            token_ids=token_ids,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            seed=seed,
            stop=stop,
            stop_token_ids=stop_token_ids,
            repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logprobs=logprobs,
            ignore_eos=ignore_eos,
            request_id=request_id,
            stream=stream,
        )
        return self._stream(request, self._deadline(timeout))

    def complete(
        self,
        prompt: str | None = None,
        *,
        token_ids: Sequence[int] | None = None,
        messages: Sequence[Mapping[str, str]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        stop_token_ids: Sequence[int] | None = None,
        repetition_penalty: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logprobs: int | None = None,
        ignore_eos: bool = False,
        request_id: str = "",
        timeout: float | None = None,
    ) -> Result:
        """Generates a completion and returns it whole.

        Takes the same arguments as :meth:`generate` (and asks the server not to
        stream). Raises :class:`TandemError` when the call fails.
        """
        texts: list[str] = []
        ids: list[int] = []
        lps: list[dict[str, Any]] = []
        completion: Completion | None = None
        for item in self.generate(
            prompt,
            token_ids=token_ids,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            seed=seed,
            stop=stop,
            stop_token_ids=stop_token_ids,
            repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logprobs=logprobs,
            ignore_eos=ignore_eos,
            request_id=request_id,
            timeout=timeout,
            stream=False,
        ):
            if isinstance(item, Chunk):
                texts.append(item.text)
                ids.extend(item.token_ids)
                lps.extend(item.logprobs)
            else:
                completion = item
        assert completion is not None  # _stream raises when the stream lacks one
        return Result(
            text="".join(texts),
            token_ids=ids,
            finish_reason=completion.finish_reason,
            usage=completion.usage,
            timings=completion.timings,
            stop_reason=completion.stop_reason,
            request_id=completion.request_id,
            logprobs=lps,
        )

    def abort(self, request_id: str, *, timeout: float | None = None) -> bool:
        """Ends a running request by id; returns False when none has that id."""
        response = self._unary(
            self._stub.Abort, pb.AbortRequest(request_id=request_id), timeout
        )
        return response.found

    # -- other RPCs ----------------------------------------------------------------

    def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Sequence[Mapping[str, str]] | None = None,
        timeout: float | None = None,
    ) -> list[int]:
        """Returns the model's token ids for ``text``, or for a chat (``messages``)."""
        if (text is None) == (messages is None):
            raise ValueError("give exactly one of text and messages")
        if text is not None:
            request = pb.TokenizeRequest(text=_utf8(text))
        else:
            request = pb.TokenizeRequest(chat=_chat(messages))
        return list(self._unary(self._stub.Tokenize, request, timeout).token_ids)

    def model_info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The served model: ``model_name``, ``architecture``, ``vocab_size``,
        ``max_context_length``, ``eos_token_id``, ``num_layers``, ``hidden_size``,
        ``kv_bytes_per_token``."""
        return _message_to_dict(
            self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), timeout)
        )

    def server_info(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The router: ``version``, ``queued_requests``, ``queued_tokens``,
        ``running_requests``, and ``prefill_workers`` / ``decode_workers`` as lists of
        ``{"address", "healthy", "in_flight", "free_blocks"}``."""
        return _message_to_dict(
            self._unary(self._stub.GetServerInfo, pb.GetServerInfoRequest(), timeout)
        )

    def health(self, *, timeout: float | None = None) -> str:
        """The gRPC health status of ``tandem.v1.Generation``: ``"SERVING"``,
        ``"NOT_SERVING"``, ``"SERVICE_UNKNOWN"`` or ``"UNKNOWN"``."""
        response = self._unary(
            self._health.Check, health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout
        )
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout: float = 60.0, *, poll_interval: float = 0.2) -> None:
        """Polls the gRPC health service until ``tandem.v1.Generation`` is SERVING.

        Connection failures (the server not listening yet) and statuses other than
        SERVING are retried every ``poll_interval`` seconds.

        Raises:
            TandemError: with code ``DEADLINE_EXCEEDED`` when it is not SERVING
                within ``timeout`` seconds; the details give the last answer.
        """
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TandemError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"{SERVICE_NAME} at {self.endpoint} not SERVING after {timeout:g} s "
                    f"(last: {last})",
                )
            try:
                status = self.health(timeout=max(min(remaining, 5.0), 0.05))
                if status == "SERVING":
                    return
                last = status
            except TandemError as err:
                last = f"{err.code.name}: {err.details}"
            time.sleep(max(0.0, min(poll_interval, deadline - time.monotonic())))

    # -- internals -----------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float:
        value = self.timeout if timeout is None else float(timeout)
        if value <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        return value

    def _unary(self, method: Any, request: Message, timeout: float | None) -> Any:
        try:
            return method(request, timeout=self._deadline(timeout))
        except grpc.RpcError as err:
            raise TandemError.from_rpc_error(err) from err

    def _stream(self, request: pb.GenerateRequest, timeout: float) -> Iterator[Chunk | Completion]:
        call = self._stub.Generate(request, timeout=timeout)
        completed = False
        try:
            for response in call:
                kind = response.WhichOneof("response")
                if kind == "chunk":
                    chunk = response.chunk
                    yield Chunk(
                        token_ids=list(chunk.token_ids),
                        text=chunk.text,
                        logprobs=[_message_to_dict(lp) for lp in chunk.logprobs],
                    )
                elif kind == "complete":
                    completed = True
                    yield _completion(response.complete)
        except grpc.RpcError as err:
            raise TandemError.from_rpc_error(err) from err
        finally:
            call.cancel()  # a no-op once the stream has ended
        if not completed:
            raise TandemError(
                grpc.StatusCode.INTERNAL, "the Generate stream ended without a complete message"
            )

    @staticmethod
    def _generate_request(
        prompt: str | None,
        *,
        token_ids: Sequence[int] | None,
        messages: Sequence[Mapping[str, str]] | None,
        max_tokens: int | None,
        temperature: float | None,
        top_k: int | None,
        top_p: float | None,
        min_p: float | None,
        seed: int | None,
        stop: str | Sequence[str] | None,
        stop_token_ids: Sequence[int] | None,
        repetition_penalty: float | None,
        presence_penalty: float | None,
        frequency_penalty: float | None,
        logprobs: int | None,
        ignore_eos: bool,
        request_id: str,
        stream: bool,
    ) -> pb.GenerateRequest:
        given = [name for name, value in (("prompt", prompt), ("token_ids", token_ids),
                                          ("messages", messages)) if value is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of prompt, token_ids and messages"
                + (f" (got {', '.join(given)})" if given else "")
            )

        params = pb.SamplingParams(ignore_eos=bool(ignore_eos))
        # Optional scalars: set only what the caller gave, so the rest stay unset.
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
        ):
            if value is not None:
                setattr(params, name, value)
        if stop is not None:
            stops = [stop] if isinstance(stop, (str, bytes)) else list(stop)
            params.stop.extend(_utf8(s) for s in stops)
        if stop_token_ids is not None:
            params.stop_token_ids.extend(stop_token_ids)

        request = pb.GenerateRequest(request_id=request_id, sampling_params=params, stream=stream)
        if prompt is not None:
            request.text = _utf8(prompt)  # set even when empty: the oneof records it
        elif token_ids is not None:
            request.token_ids.ids.extend(token_ids)
            request.token_ids.SetInParent()  # an empty list is still a token_ids prompt
        else:
            request.chat.SetInParent()  # an empty chat is still a chat prompt
            request.chat.CopyFrom(_chat(messages))
        return request


def _chat(messages: Sequence[Mapping[str, str]] | None) -> pb.Chat:
    """Builds a Chat from ``[{"role": ..., "content": ...}, ...]``."""
    chat = pb.Chat()
    for i, message in enumerate(messages or ()):
        try:
            role, content = message["role"], message["content"]
        except (KeyError, TypeError):
            raise ValueError(
                f"messages[{i}] must be a mapping with 'role' and 'content'"
            ) from None
        chat.messages.add(role=role, content=_utf8(content))
    return chat


def _utf8(text: str | bytes) -> bytes:
    """Text fields travel as UTF-8 bytes (the server checks them and names the field
    when they are not valid UTF-8); bytes pass through unchanged."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _completion(complete: pb.GenerateComplete) -> Completion:
    return Completion(
        finish_reason=_FINISH_REASONS.get(complete.finish_reason, "unspecified"),
        stop_reason=complete.stop_reason,
        prompt_tokens=complete.usage.prompt_tokens,
        completion_tokens=complete.usage.completion_tokens,
        cached_tokens=complete.usage.cached_tokens,
        timings=_message_to_dict(complete.timings),
        request_id=complete.request_id,
    )


def _is_repeated(fd: Any) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)
    if isinstance(is_repeated, bool):
        return is_repeated
    return fd.label == fd.LABEL_REPEATED


def _enum_name(fd: Any, number: int) -> str | int:
    enum_value = fd.enum_type.values_by_number.get(number)
    return enum_value.name if enum_value is not None else number


def _message_to_dict(message: Message) -> dict[str, Any]:
    """Converts a message to a dict keyed by proto field names, defaults included
    (unlike json_format.MessageToDict: 64-bit integers stay ints, enums become names)."""
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.message_type is not None:
            value = (
                [_message_to_dict(m) for m in value]
                if _is_repeated(fd)
                else _message_to_dict(value)
            )
        elif fd.enum_type is not None:
            value = (
                [_enum_name(fd, v) for v in value]
                if _is_repeated(fd)
                else _enum_name(fd, value)
            )
        elif _is_repeated(fd):
            value = list(value)
        out[fd.name] = value
    return out

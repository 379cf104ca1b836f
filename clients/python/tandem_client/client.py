"""A synchronous, typed client for tandem's ``tandem.v1.Generation`` gRPC service.

Every gRPC failure surfaces as :class:`~tandem_client.TandemError` with the status
code and message the server sent. Mistakes the client can see without asking the
server (no prompt, two prompts, a chat turn without a role, a malformed API key or
certificate) raise :class:`ValueError` instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Callable

import grpc
from google.protobuf.message import Message as ProtoMessage
from grpc_health.v1 import health_pb2, health_pb2_grpc

from . import _convert
from ._convert import PemSource
from ._gen.tandem.v1 import generation_pb2 as pb
from ._gen.tandem.v1 import generation_pb2_grpc as pb_grpc
from .errors import TandemError
from .types import Chunk, Completion, Message, ModelInfo, ServerInfo, TokenLogprob

__all__ = ["SERVICE_NAME", "GenerationStream", "TandemClient"]

#: The service name that tandem reports through the standard gRPC health service.
SERVICE_NAME = "tandem.v1.Generation"

_DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    # Prompts given as token ids and tokenizations of long texts can be large.
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    # Retry a refused connection quickly (a server still starting up), at most every
    # 2 s. (Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the timeout of a
    # connection attempt, TLS handshake included, whose 20 s default must stay.)
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class GenerationStream(Iterator[Chunk]):
    """A running generation: iterate it for :class:`Chunk` objects, then read
    :attr:`completion`.

    ::

        stream = client.generate_stream("Once upon a time", max_tokens=32)
        for chunk in stream:
            print(chunk.text, end="", flush=True)
        print(stream.completion.finish_reason, stream.completion.usage)

    The RPC starts when the stream is created. Iteration raises
    :class:`TandemError` when the call fails (``CANCELLED`` after an
    :meth:`TandemClient.abort` or :meth:`cancel`) and stops after the server's final
    message. :attr:`completion` waits for the end of the stream, reading any chunks
    not iterated yet; its ``text`` and ``token_ids`` hold the whole output either way.

    A stream is also a context manager: leaving the ``with`` block cancels the
    request if it is still running. :meth:`cancel` may be called from any thread.
    """

    def __init__(self, call: Any, request_id: str = "") -> None:
        """Wraps a server-streaming ``Generate`` call (made by :class:`TandemClient`)."""
        self._call = call
        self._request_id = request_id
        self._texts: list[str] = []
        self._token_ids: list[int] = []
        self._logprobs: list[TokenLogprob] = []
        self._completion: Completion | None = None
        self._error: TandemError | None = None
        self._finished = False
        self._lock = threading.Lock()  # one reader at a time

    # -- iteration -----------------------------------------------------------------

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> Chunk:
        with self._lock:
            return self._next_locked()

    def _next_locked(self) -> Chunk:
        while True:
            if self._finished:
                raise StopIteration
            try:
                response = next(self._call)
            except StopIteration:
                self._finished = True
                self._error = TandemError(
                    grpc.StatusCode.INTERNAL,
                    "the Generate stream ended without its complete message",
                )
                raise self._error from None
            except grpc.RpcError as err:
                self._finished = True
                self._error = TandemError.from_rpc_error(err)
                raise self._error from err
            kind = response.WhichOneof("response")
            if kind == "chunk":
                chunk = _convert.chunk_from_proto(response.chunk)
                self._texts.append(chunk.text)
                self._token_ids.extend(chunk.token_ids)
                self._logprobs.extend(chunk.logprobs)
                return chunk
            if kind == "complete":
                self._completion = self._build_completion(response.complete)
                self._finished = True
                self._read_trailer()
                raise StopIteration
            # An unknown response kind (a newer server): skip it.

    def _build_completion(self, complete: pb.GenerateComplete) -> Completion:
        return Completion(
            text="".join(self._texts),
            token_ids=list(self._token_ids),
            finish_reason=_convert.finish_reason_from_proto(complete.finish_reason),
            stop_reason=complete.stop_reason,
            usage=_convert.usage_from_proto(complete.usage),
            timings=_convert.timings_from_proto(complete.timings),
            request_id=complete.request_id or self._request_id,
            logprobs=list(self._logprobs),
        )

    def _read_trailer(self) -> None:
        """Reads the stream's end (the OK status that follows the complete message)."""
        try:
            for _ in self._call:
                pass
        except grpc.RpcError:
            pass  # the complete message has arrived; a late status changes nothing

    # -- results -------------------------------------------------------------------

    @property
    def completion(self) -> Completion:
        """The finished generation; waits for the end of the stream.

        Chunks not iterated yet are read (and land in ``completion.text``).

        Raises:
            TandemError: the call failed or was cancelled.
        """
        for _ in self:
            pass
        if self._error is not None:
            raise self._error
        assert self._completion is not None
        return self._completion

    @property
    def done(self) -> bool:
        """Whether the stream has ended (completed, failed or cancelled and read)."""
        return self._finished

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._texts)

    @property
    def token_ids(self) -> list[int]:
        """The token ids received so far."""
        return list(self._token_ids)

    @property
    def request_id(self) -> str:
        """The request id: the caller's, or the router's once the stream completed
        (``""`` before that when the caller gave none)."""
        if self._completion is not None and self._completion.request_id:
            return self._completion.request_id
        return self._request_id

    # -- cancellation --------------------------------------------------------------

    def cancel(self) -> None:
        """Cancels the request (from any thread); iteration then raises
        ``TandemError(CANCELLED)``. A no-op once the stream has ended."""
        self._call.cancel()

    def close(self) -> None:
        """Cancels the request if it is still running."""
        if not self._finished:
            self._call.cancel()

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "done" if self._finished else "running"
        return f"<GenerationStream {self.request_id or '?'} {state}, {len(self._token_ids)} tokens>"


class TandemClient:
    """A connection to a tandem router.

    Args:
        endpoint: ``host:port`` of the router's gRPC port.
        api_key: Sent on every call as the metadata ``authorization: Bearer <key>``
            (for a router started with ``--api-key``). Travels in the clear unless
            the channel uses TLS.
        root_certificates: The CA certificate(s) that signed the server's
            certificate, as PEM bytes or a file path. When given, the channel uses
            TLS; otherwise it is plaintext.
        certificate_chain: The client's certificate (PEM bytes or a path), for mutual
            TLS (a router started with ``--tls-client-ca``). Needs ``private_key``
            and ``root_certificates``.
        private_key: The client certificate's private key (PEM bytes or a path).
        timeout: Default deadline in seconds for every call (``None``: no deadline);
            each method's own ``timeout`` overrides it. For a generation it bounds
            the whole stream.
        credentials: Ready-made :class:`grpc.ChannelCredentials` (e.g.
            ``grpc.ssl_channel_credentials()`` for the system's CAs) instead of
            ``root_certificates``/``certificate_chain``/``private_key``.
        options: Extra gRPC channel options, applied after the client's own, e.g.
            ``[("grpc.ssl_target_name_override", "localhost")]`` when the server's
            certificate names another host than ``endpoint``.

    The client wraps one gRPC channel and is safe to share between threads. Use it as
    a context manager, or call :meth:`close`::

        with TandemClient("127.0.0.1:50051") as client:
            print(client.generate("The capital of France is", max_tokens=8).text)

    Raises:
        ValueError: a malformed ``api_key``, an unreadable certificate, a client
            certificate without its key (or without ``root_certificates``), or
            ``credentials`` together with certificates.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        root_certificates: PemSource | None = None,
        certificate_chain: PemSource | None = None,
        private_key: PemSource | None = None,
        timeout: float | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds (or None)")
        self.endpoint = endpoint
        self.timeout: float | None = None if timeout is None else float(timeout)
        self._metadata = _convert.auth_metadata(api_key)

        root = _convert.load_pem(root_certificates, "root_certificates")
        chain = _convert.load_pem(certificate_chain, "certificate_chain")
        key = _convert.load_pem(private_key, "private_key")
        if (chain is None) != (key is None):
            raise ValueError("certificate_chain and private_key must be given together")
        if chain is not None and root is None:
            raise ValueError("a client certificate needs TLS: give root_certificates too")
        if credentials is not None and root is not None:
            raise ValueError("give either credentials or root_certificates, not both")
        if credentials is None and root is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=key, certificate_chain=chain
            )
        self.tls = credentials is not None

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        extras = ", tls=True" if self.tls else ""
        extras += ", api_key=***" if self._metadata else ""
        extras += f", timeout={self.timeout:g}" if self.timeout is not None else ""
        return f"TandemClient({self.endpoint!r}{extras})"

    # -- generation ----------------------------------------------------------------

    def generate_stream(
        self,
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
        timeout: float | None = None,
    ) -> GenerationStream:
        """Starts a generation and streams it, chunk by chunk.

        Give exactly one prompt: ``prompt`` (text, tokenized with the model's BOS when
        it adds one), ``token_ids`` (used as they are) or ``messages`` (a chat: a list
        of ``{"role": ..., "content": ...}`` dicts, rendered with the model's chat
        template).

        Args:
            max_tokens: Tokens to generate at most, >= 1 (server default 16).
            temperature: >= 0; 0 is greedy (server default 1).
            top_p: In (0, 1] (default 1).
            top_k: 0 or -1 = off, else in [1, vocab size].
            min_p: In [0, 1] (default 0).
            seed: Sampling seed; the same seed gives the same tokens.
            stop: Stop string(s), excluded from the output (at most 16).
            stop_token_ids: Token ids that end generation (kept in the output).
            repetition_penalty: In (0, 10]; 1 = off.
            presence_penalty: In [-2, 2].
            frequency_penalty: In [-2, 2].
            logprobs: Return the sampled token's log-probability plus the top n
                (n in [0, 20]) for every generated token.
            ignore_eos: Keep generating past the end-of-sequence token.
            priority: Lower runs first (vLLM's meaning; default 0): the router's
                admission order, bounded by its ``--priority-max-wait-ms``.
            disable_speculation: Decode plainly where the decode workers speculate
                (same tokens; spares the draft's compute).
            request_id: Your id for the request (for :meth:`abort` and logs); the
                router picks one when it is empty.
            cache_salt: Prefix-cache namespace: only requests with the same salt share
                cached prompt prefixes (e.g. one salt per tenant).
            timeout: Deadline in seconds for the whole stream (default: the client's).

        Options left ``None`` stay unset and take the server's defaults (vLLM's).

        Returns:
            A :class:`GenerationStream` (iterate it, then read ``.completion``).

        Raises:
            ValueError: not exactly one prompt, or a malformed chat turn. Server-side
                failures (``INVALID_ARGUMENT`` naming the field, ...) are raised as
                :class:`TandemError` by the stream's iteration.
        """
        request = _convert.build_generate_request(
            prompt,
            token_ids=token_ids,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            seed=seed,
            stop=stop,
            stop_token_ids=stop_token_ids,
            repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logprobs=logprobs,
            ignore_eos=ignore_eos,
            priority=priority,
            disable_speculation=disable_speculation,
            request_id=request_id,
            cache_salt=cache_salt,
            stream=True,
        )
        return self._start(request, timeout)

    def generate(
        self,
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
        timeout: float | None = None,
    ) -> Completion:
        """Generates a completion and returns it whole.

        Takes the same arguments as :meth:`generate_stream` (and asks the server for
        one chunk instead of a stream).

        Returns:
            The :class:`Completion`: ``text``, ``token_ids``, ``finish_reason``,
            ``stop_reason``, ``usage``, ``timings``, ``request_id``, ``logprobs``.

        Raises:
            TandemError: the call failed.
            ValueError: not exactly one prompt, or a malformed chat turn.
        """
        request = _convert.build_generate_request(
            prompt,
            token_ids=token_ids,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            seed=seed,
            stop=stop,
            stop_token_ids=stop_token_ids,
            repetition_penalty=repetition_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            logprobs=logprobs,
            ignore_eos=ignore_eos,
            priority=priority,
            disable_speculation=disable_speculation,
            request_id=request_id,
            cache_salt=cache_salt,
            stream=False,
        )
        with self._start(request, timeout) as stream:
            return stream.completion

    def abort(self, request_id: str, *, timeout: float | None = None) -> bool:
        """Ends a running request by id (its stream then fails with ``CANCELLED``).

        Returns:
            False when no running request has that id.
        """
        response = self._unary(self._stub.Abort, pb.AbortRequest(request_id=request_id), timeout)
        return bool(response.found)

    # -- other RPCs ----------------------------------------------------------------

    def tokenize(
        self,
        text: str | bytes | None = None,
        messages: Iterable[Message] | None = None,
        *,
        timeout: float | None = None,
    ) -> list[int]:
        """Returns the model's token ids for ``text``, or for a chat (``messages``,
        rendered with the chat template and its generation prompt).

        Raises:
            ValueError: not exactly one of ``text`` and ``messages``.
        """
        request = _convert.build_tokenize_request(text, messages)
        return list(self._unary(self._stub.Tokenize, request, timeout).token_ids)

    def model_info(self, *, timeout: float | None = None) -> ModelInfo:
        """The served model (name, architecture, vocabulary, context length, ...)."""
        response = self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), timeout)
        return _convert.model_info_from_proto(response)

    def server_info(self, *, timeout: float | None = None) -> ServerInfo:
        """The router: its version, queue and workers."""
        response = self._unary(self._stub.GetServerInfo, pb.GetServerInfoRequest(), timeout)
        return _convert.server_info_from_proto(response)

    def health(self, *, timeout: float | None = None) -> str:
        """The gRPC health status of ``tandem.v1.Generation``: ``"SERVING"``,
        ``"NOT_SERVING"``, ``"SERVICE_UNKNOWN"`` or ``"UNKNOWN"``."""
        return self._health_check(timeout, wait_for_ready=False)

    def wait_ready(self, timeout: float = 60.0, *, poll_interval: float = 0.2) -> None:
        """Waits until the server answers and ``tandem.v1.Generation`` is SERVING.

        The health checks wait for the channel to connect (gRPC ``wait_for_ready``),
        so a server that is still starting is picked up as soon as it listens;
        statuses other than SERVING are polled again every ``poll_interval`` seconds.

        Raises:
            TandemError: ``DEADLINE_EXCEEDED`` when it is not SERVING within
                ``timeout`` seconds (the message gives the last answer), or
                ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` at once.
        """
        deadline = time.monotonic() + timeout
        last = "no connection"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TandemError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"{SERVICE_NAME} at {self.endpoint} not SERVING after {timeout:g} s "
                    f"(last: {last})",
                )
            try:
                status = self._health_check(max(min(remaining, 5.0), 0.05), wait_for_ready=True)
                if status == "SERVING":
                    return
                last = status
            except TandemError as err:
                if err.code in (
                    grpc.StatusCode.UNAUTHENTICATED,
                    grpc.StatusCode.PERMISSION_DENIED,
                ):
                    raise
                if err.code != grpc.StatusCode.DEADLINE_EXCEEDED:
                    last = str(err)
                continue  # a deadline here means no connection yet: ask again at once
            time.sleep(max(0.0, min(poll_interval, deadline - time.monotonic())))

    # -- internals -----------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float | None:
        value = self.timeout if timeout is None else float(timeout)
        if value is not None and value <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        return value

    def _unary(
        self,
        method: Callable[..., Any],
        request: ProtoMessage,
        timeout: float | None,
        *,
        wait_for_ready: bool = False,
    ) -> Any:
        try:
            return method(
                request,
                timeout=self._deadline(timeout),
                metadata=self._metadata,
                wait_for_ready=wait_for_ready,
            )
        except grpc.RpcError as err:
            raise TandemError.from_rpc_error(err) from err

    def _health_check(self, timeout: float | None, *, wait_for_ready: bool) -> str:
        request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
        response = self._unary(self._health.Check, request, timeout, wait_for_ready=wait_for_ready)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    def _start(self, request: pb.GenerateRequest, timeout: float | None) -> GenerationStream:
        call = self._stub.Generate(
            request, timeout=self._deadline(timeout), metadata=self._metadata
        )
        return GenerationStream(call, request.request_id)

"""The exception every failed tandem call raises."""

from __future__ import annotations

import grpc

__all__ = ["TandemError"]


class TandemError(Exception):
    """A gRPC call to tandem failed (or a stream ended without its last message).

    The server's status comes through unchanged: ``INVALID_ARGUMENT`` names the bad
    field, ``RESOURCE_EXHAUSTED`` means the admission queue is full, ``UNAVAILABLE``
    that no worker could serve the request (or the server cannot be reached),
    ``UNAUTHENTICATED`` a missing or wrong API key, ``CANCELLED`` that the request was
    aborted, ``DEADLINE_EXCEEDED`` that the call's timeout passed.

    Attributes:
        code: The :class:`grpc.StatusCode`.
        code_name: Its name, e.g. ``"INVALID_ARGUMENT"``.
        message: The status message the server sent (also as :attr:`details`).

    ``str(err)`` is ``"<CODE_NAME>: <message>"``.
    """

    code: grpc.StatusCode
    message: str

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message

    @property
    def code_name(self) -> str:
        """The status code's name, e.g. ``"INVALID_ARGUMENT"``."""
        return str(self.code.name)

    @property
    def details(self) -> str:
        """The status message (the name gRPC gives it)."""
        return self.message

    def __reduce__(self) -> tuple[type[TandemError], tuple[grpc.StatusCode, str]]:
        return (type(self), (self.code, self.message))

    def __repr__(self) -> str:
        return f"TandemError({self.code_name}, {self.message!r})"

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> TandemError:
        """Wraps the :class:`grpc.RpcError` that a stub raised."""
        code_fn = getattr(err, "code", None)
        details_fn = getattr(err, "details", None)
        code = code_fn() if callable(code_fn) else None
        details = details_fn() if callable(details_fn) else None
        if not isinstance(code, grpc.StatusCode):
            code = grpc.StatusCode.UNKNOWN
        return cls(code, details if isinstance(details, str) and details else str(err))

"""Typed client errors, mapped from what Triton answers over HTTP and gRPC.

    TritonClientError              base class; `.status` and `.message` keep Triton's own,
    │                              `.retry_after_s` the server's Retry-After (HTTP only)
    ├── InvalidInputError          refused as malformed (HTTP 400, INVALID_ARGUMENT), or by
    │                              the SDK before sending; also a `ValueError`
    │   └── RequestTooLargeError   over the front door's body limit (HTTP 413, RESOURCE_EXHAUSTED)
    ├── AccessDeniedError          no or a wrong API key (HTTP 401, UNAUTHENTICATED), or a
    │                              restricted admin API without the admin key (HTTP 403,
    │                              UNAVAILABLE "This protocol is restricted")
    ├── ModelNotFoundError         unknown model or version (HTTP 404/400, NOT_FOUND)
    ├── ModelNotReadyError         known but not ready, e.g. loading or unloaded   [retriable]
    ├── UnavailableError           the server cannot take the request now (HTTP 503)  [retriable]
    │   ├── QueueFullError         "Exceeds maximum queue size" for this priority     [retriable]
    │   └── RateLimitedError       the front door's per-key rate (HTTP 429)            [retriable]
    ├── DeadlineExceededError      the call's `timeout=` passed (client side, any protocol),
    │                              or Triton's queue timeout (`timeout_ms`) expired
    ├── ServerUnreachableError     connection refused, reset, or the call cancelled   [retriable]
    └── ServerError                anything else, including HTTP 500
"""

from __future__ import annotations

from tmr_client import messages
from tmr_client.messages import FailureKind


class TritonClientError(Exception):
    """An inference or control call failed; `status` is Triton's code, `message` its text."""

    retriable = False
    retry_after_s: float | None = None  # the answer's Retry-After (HTTP 429/503), if any

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message if status is None else f"[{status}] {message}")
        self.message = message
        self.status = status


class InvalidInputError(TritonClientError, ValueError):
    """The input or an option is wrong: refused by the SDK before sending, or by the server
    (wrong dtype or shape, bad text, batch too large). Also a `ValueError`."""


class RequestTooLargeError(InvalidInputError):
    """The front door refused a body over its size limit."""


class AccessDeniedError(TritonClientError):
    """A missing or unknown API key, or a restricted API called without the admin key."""


class ModelNotFoundError(TritonClientError):
    """The model or the requested version does not exist on the server."""


class ModelNotReadyError(TritonClientError):
    """The model exists but is not ready (loading, unloading or unavailable)."""

    retriable = True


class UnavailableError(TritonClientError):
    """The server is overloaded or shedding load; retry later."""

    retriable = True


class QueueFullError(UnavailableError):
    """The model's queue for this priority level is full."""


class RateLimitedError(UnavailableError):
    """The front door's rate limit for this API key; retry after a while."""


class DeadlineExceededError(TritonClientError):
    """The call's `timeout=` passed, or the request timed out in the server's queue."""


class ServerUnreachableError(TritonClientError):
    """No connection to the server."""

    retriable = True


class ServerError(TritonClientError):
    """An unexpected server-side failure (HTTP 500, gRPC INTERNAL)."""


_BY_KIND: dict[FailureKind, type[TritonClientError]] = {
    # Triton's restricted APIs answer gRPC UNAVAILABLE, which must not be retried.
    FailureKind.RESTRICTED: AccessDeniedError,
    FailureKind.RATE_LIMITED: RateLimitedError,
    FailureKind.TOO_LARGE: RequestTooLargeError,
    FailureKind.QUEUE_FULL: QueueFullError,
    FailureKind.TIMEOUT: DeadlineExceededError,
    FailureKind.NOT_READY: ModelNotReadyError,
    FailureKind.NOT_FOUND: ModelNotFoundError,
    FailureKind.UNREACHABLE: ServerUnreachableError,
}

_BY_STATUS: dict[str, type[TritonClientError]] = {
    "400": InvalidInputError,
    "StatusCode.INVALID_ARGUMENT": InvalidInputError,
    "401": AccessDeniedError,
    "403": AccessDeniedError,
    "StatusCode.UNAUTHENTICATED": AccessDeniedError,
    "StatusCode.PERMISSION_DENIED": AccessDeniedError,
    "413": RequestTooLargeError,
    "429": RateLimitedError,
    "404": ModelNotFoundError,
    "StatusCode.NOT_FOUND": ModelNotFoundError,
    "503": UnavailableError,
    "StatusCode.UNAVAILABLE": UnavailableError,
    "StatusCode.DEADLINE_EXCEEDED": DeadlineExceededError,
    "499": DeadlineExceededError,
    # The server closed the call under us (it is stopping, or the connection dropped).
    "StatusCode.CANCELLED": ServerUnreachableError,
}


def classify(status: str | None, message: str) -> type[TritonClientError]:
    """The error class for a Triton status and message (what the message says wins)."""
    kind = messages.kind_of(message)
    by_kind = _BY_KIND.get(kind) if kind is not None else None
    return by_kind or _BY_STATUS.get(status or "", ServerError)


def from_exception(exc: BaseException) -> TritonClientError:
    """Wrap a tritonclient or transport exception into a typed error."""
    if isinstance(exc, TritonClientError):
        return exc
    status_fn = getattr(exc, "status", None)
    message_fn = getattr(exc, "message", None)
    if callable(status_fn) and callable(message_fn):
        status, message = status_fn(), message_fn() or str(exc)
        return classify(status, message)(message, status)
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return ServerUnreachableError(f"{type(exc).__name__}: {exc}")
    return ServerError(f"{type(exc).__name__}: {exc}")

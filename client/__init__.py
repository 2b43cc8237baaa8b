"""Thin SDK over `tritonclient` for the repository's front models: sync and asyncio, HTTP
and gRPC, typed errors, retries, bounded bulk calls.

    from client import Client
    with Client("localhost:8000", protocol="http") as c:
        vectors = c.embed(["a sentence", "another"], priority=1, timeout_ms=500)
        best = c.classify([jpeg_bytes], model=image_front).predictions[0][0]

`model=` names the front model (per client or per call): any front of the repository,
whatever its family; the SDK knows none of them by name but its default, `embed`.

`EmbedClient` and `AsyncEmbedClient` are the old names of `Client` and `AsyncClient`
(kept for one release).

Names are imported on first use, so `core.messages` (the table of Triton's error
messages, which the Python backend shares) imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see
    from client.aio import AsyncClient, AsyncEmbedClient
    from client.core import ClassifyResult, EmbedResult, InferResult, Prediction
    from client.errors import (
        AccessDeniedError,
        DeadlineExceededError,
        InvalidInputError,
        ModelNotFoundError,
        ModelNotReadyError,
        QueueFullError,
        RateLimitedError,
        RequestTooLargeError,
        ServerError,
        ServerUnreachableError,
        TritonClientError,
        UnavailableError,
    )
    from client.retry import NO_RETRY, RetryPolicy
    from client.sync import Client, EmbedClient

_EXPORTS = {
    "AsyncClient": "client.aio",
    "AsyncEmbedClient": "client.aio",
    "Client": "client.sync",
    "EmbedClient": "client.sync",
    "EmbedResult": "client.core",
    "ClassifyResult": "client.core",
    "InferResult": "client.core",
    "Prediction": "client.core",
    "NO_RETRY": "client.retry",
    "RetryPolicy": "client.retry",
    **{name: "client.errors" for name in (
        "AccessDeniedError", "DeadlineExceededError", "InvalidInputError",
        "ModelNotFoundError", "ModelNotReadyError", "QueueFullError", "RateLimitedError",
        "RequestTooLargeError", "ServerError", "ServerUnreachableError", "TritonClientError",
        "UnavailableError")},
}

__all__ = [
    "NO_RETRY",
    "AccessDeniedError",
    "AsyncClient",
    "AsyncEmbedClient",
    "ClassifyResult",
    "Client",
    "DeadlineExceededError",
    "EmbedClient",
    "EmbedResult",
    "InferResult",
    "InvalidInputError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "Prediction",
    "QueueFullError",
    "RateLimitedError",
    "RequestTooLargeError",
    "RetryPolicy",
    "ServerError",
    "ServerUnreachableError",
    "TritonClientError",
    "UnavailableError",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

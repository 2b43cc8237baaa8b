"""Thin SDK over `tritonclient` for the `embed` model: sync and asyncio, HTTP and gRPC.

    from client import EmbedClient
    with EmbedClient("localhost:8000", protocol="http") as c:
        vectors = c.embed(["a sentence", "another"], priority=1, timeout_ms=500)
"""

from client.aio import AsyncEmbedClient
from client.core import EmbedResult
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
from client.sync import EmbedClient

__all__ = [
    "NO_RETRY",
    "AccessDeniedError",
    "AsyncEmbedClient",
    "DeadlineExceededError",
    "EmbedClient",
    "EmbedResult",
    "InvalidInputError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "QueueFullError",
    "RateLimitedError",
    "RequestTooLargeError",
    "RetryPolicy",
    "ServerError",
    "ServerUnreachableError",
    "TritonClientError",
    "UnavailableError",
]

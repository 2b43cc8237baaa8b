"""Thin SDK over `tritonclient` for the repository's front models: sync and asyncio, HTTP
and gRPC, typed errors, deadlines, retries, bounded bulk calls (docs/sdk.md).

    from tmr_client import CallOptions, Client
    with Client("http://localhost:8000", timeout=5) as c:
        vectors = c.embed(["a sentence", "another"], priority=1)
        same = c.embed(["a sentence", "another"], options=CallOptions(priority=1))
        best = c.classify([jpeg_bytes], model=image_front).predictions[0][0]
        top = c.rerank("a query", ["doc one", "doc two"], model=reranker, top_n=1)[0]

`model=` names the front model (per client or per call): any front of the repository,
whatever its family; the SDK knows none of them by name but its default, `embed`.

It installs on its own (`pip install ./client`: tritonclient and numpy only). Names are
imported on first use, so `tmr_client.contract` and `tmr_client.messages` (the wire
contract and Triton's error messages, which the project's `core` re-exports for the
Python backend) import nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see
    from tmr_client.aio import AsyncClient
    from tmr_client.errors import (
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
    from tmr_client.options import (
        BulkKeywords,
        CallOptions,
        ClassifyKeywords,
        CommonKeywords,
        CountKeywords,
        EmbedKeywords,
        InferKeywords,
        RerankKeywords,
        SimilarityKeywords,
    )
    from tmr_client.ranking import Ranked, RerankResult
    from tmr_client.results import (
        ClassifyResult,
        EmbedResult,
        InferResult,
        Prediction,
        SimilarityResult,
        TokenCount,
        TokenCounts,
    )
    from tmr_client.retry import NO_RETRY, RetryPolicy
    from tmr_client.sync import Client

_EXPORTS = {
    "AsyncClient": "tmr_client.aio",
    "Client": "tmr_client.sync",
    "EmbedResult": "tmr_client.results",
    "ClassifyResult": "tmr_client.results",
    "InferResult": "tmr_client.results",
    "Prediction": "tmr_client.results",
    "SimilarityResult": "tmr_client.results",
    "TokenCount": "tmr_client.results",
    "TokenCounts": "tmr_client.results",
    "Ranked": "tmr_client.ranking",
    "RerankResult": "tmr_client.ranking",
    **{name: "tmr_client.options" for name in (
        "BulkKeywords", "CallOptions", "ClassifyKeywords", "CommonKeywords", "CountKeywords",
        "EmbedKeywords", "InferKeywords", "RerankKeywords", "SimilarityKeywords")},
    "NO_RETRY": "tmr_client.retry",
    "RetryPolicy": "tmr_client.retry",
    **{name: "tmr_client.errors" for name in (
        "AccessDeniedError", "DeadlineExceededError", "InvalidInputError",
        "ModelNotFoundError", "ModelNotReadyError", "QueueFullError", "RateLimitedError",
        "RequestTooLargeError", "ServerError", "ServerUnreachableError", "TritonClientError",
        "UnavailableError")},
}

__all__ = [
    "NO_RETRY",
    "AccessDeniedError",
    "AsyncClient",
    "BulkKeywords",
    "CallOptions",
    "ClassifyKeywords",
    "ClassifyResult",
    "Client",
    "CommonKeywords",
    "CountKeywords",
    "DeadlineExceededError",
    "EmbedKeywords",
    "EmbedResult",
    "InferKeywords",
    "InferResult",
    "InvalidInputError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "Prediction",
    "QueueFullError",
    "Ranked",
    "RateLimitedError",
    "RequestTooLargeError",
    "RerankKeywords",
    "RerankResult",
    "RetryPolicy",
    "ServerError",
    "ServerUnreachableError",
    "SimilarityKeywords",
    "SimilarityResult",
    "TokenCount",
    "TokenCounts",
    "TritonClientError",
    "UnavailableError",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tmr_client' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

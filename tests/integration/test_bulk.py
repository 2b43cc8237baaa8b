"""A bulk call through the async SDK: bounded in flight, reported progress, no degradation."""

from __future__ import annotations

import asyncio

import numpy as np
from tmr_client import AsyncClient, Client

from core.families import TEXT_EMBEDDING
from tests.integration.helpers import fresh
from tests.load import LevelSampler

TEXTS = 2_000  # 250 chunks of the front's preferred batch (8): 150+ queued without the bound


def corpus(n: int) -> list[str]:
    return fresh(*(f"bulk text {i}: a short sentence of a corpus being embedded"
                   for i in range(n)))


def test_async_bulk_call_at_default_priority_succeeds_without_degrading(triton) -> None:
    texts = corpus(TEXTS)
    progress: list[tuple[int, int]] = []

    async def run() -> tuple[np.ndarray, int]:
        async with AsyncClient(triton.http_url, protocol="http") as client:
            vectors = await client.embed(texts, on_progress=lambda d, t: progress.append((d, t)))
            return vectors, client.max_in_flight

    with LevelSampler(triton.metrics_url, period_s=0.1) as sampler:
        vectors, in_flight = asyncio.run(run())
    assert vectors.shape == (TEXTS, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert in_flight == 2  # one per instance of embed
    done = [d for d, _ in progress]
    assert done == sorted(done) and done[-1] == TEXTS and {t for _, t in progress} == {TEXTS}
    levels = [level for _, level in sampler.samples]
    print(f"\nbulk: level samples {len(levels)}, max {max(levels, default=0)}")
    assert levels and max(levels) == 0, "the client's own bulk traffic degraded the router"


def test_sync_and_async_bulk_calls_agree_row_for_row(triton) -> None:
    texts = corpus(300)
    with Client(triton.grpc_url, protocol="grpc") as client:
        steps: list[int] = []
        sync = client.embed(texts, on_progress=lambda done, total: steps.append(done))

    async def run() -> np.ndarray:
        async with AsyncClient(triton.grpc_url, protocol="grpc", max_in_flight=2) as c:
            return await c.embed(texts)

    rows = TEXT_EMBEDDING.serving.front_batching.request_rows(TEXT_EMBEDDING.serving.max_batch_size)
    assert steps == [*range(rows, 300, rows), 300]
    assert np.allclose(asyncio.run(run()), sync, atol=1e-5)

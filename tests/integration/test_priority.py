"""Priority levels and queue policies of `embed`: high jumps the queue, low is shed first."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import (
    NO_RETRY,
    AsyncEmbedClient,
    DeadlineExceededError,
    QueueFullError,
    TritonClientError,
)
from tests.integration.helpers import assert_serving

LONG_TEXT = "priority queues shed low value work first under overload " * 20  # 222 tokens
LOW, HIGH = 2, 1
LOW_FLOOD = 400  # well over the low level's max_queue_size (128) plus two executing batches


async def timed(coro) -> tuple[float, object]:
    try:
        result = await coro
    except TritonClientError as err:
        result = err
    return time.monotonic(), result


async def flood_then_high(url: str) -> tuple[list, list, object]:
    async with AsyncEmbedClient(url, protocol="grpc", retry=NO_RETRY) as client:
        await client.max_batch_size()
        lows = [asyncio.ensure_future(timed(client.embed([LONG_TEXT], priority=LOW)))
                for _ in range(LOW_FLOOD)]
        await asyncio.sleep(0.5)  # the low queue is now full and executing
        highs = [asyncio.ensure_future(timed(client.embed([LONG_TEXT], priority=HIGH)))
                 for _ in range(8)]
        expired = asyncio.ensure_future(timed(
            client.embed([LONG_TEXT], priority=HIGH, timeout_ms=1)))
        return await asyncio.gather(*lows), await asyncio.gather(*highs), (await expired)[1]


@pytest.fixture(scope="module")
def overload(triton) -> tuple[list, list, object]:
    result = asyncio.run(flood_then_high(triton.grpc_url))
    assert_serving(triton.http_url)
    return result


def test_high_priority_requests_finish_ahead_of_queued_low_ones(overload) -> None:
    lows, highs, _ = overload
    assert all(not isinstance(r, Exception) for _, r in highs), [r for _, r in highs]
    last_high = max(t for t, _ in highs)
    # A low request that ends after the last high one (served, or expired when an instance
    # freed up) was still queued when the highs arrived: the highs overtook it. Queue-full
    # rejections end at once and prove nothing either way.
    overtaken = [t for t, r in lows if t > last_high and not isinstance(r, QueueFullError)]
    assert len(overtaken) >= 8, "high-priority requests waited behind the low-priority backlog"


def test_full_low_priority_queue_rejects_with_queue_full_error(overload) -> None:
    lows, _, _ = overload
    errors = [r for _, r in lows if isinstance(r, Exception)]
    full = [e for e in errors if isinstance(e, QueueFullError)]
    assert full, "a flood of 400 low-priority requests never filled the queue"
    assert all("Exceeds maximum queue size" in e.message for e in full)
    assert all(isinstance(e, QueueFullError | DeadlineExceededError) for e in errors), errors


def test_client_timeout_expires_in_queue_as_deadline_exceeded(overload) -> None:
    _, _, expired = overload
    assert isinstance(expired, DeadlineExceededError), expired
    assert "Request timeout expired" in expired.message

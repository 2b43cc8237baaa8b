"""Priority levels and queue policies of `embed`: high jumps the queue, low is shed first."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from tmr_client import (
    NO_RETRY,
    AsyncClient,
    DeadlineExceededError,
    QueueFullError,
    TritonClientError,
)

from tests.integration.helpers import assert_serving, reset_router

TEXT = "priority queues shed low value work first when the server is overloaded"
HIGH, LOW = 1, 2
# Triton's own ordering on the shared front: the SDK's lanes=False keeps priority 1 there
# (with lanes, it goes to the model's interactive lane: tests/integration/test_lanes.py).
# The SDK cuts each call of 64 short texts into requests of the front's preferred batch
# (one execution each), at most one per instance in flight, so a call's requests queue
# behind other calls' at their priority. Short texts keep the whole backlog well inside
# the low level's 2 s queue timeout, even on a loaded CI machine. Every request's texts
# are unique, so Triton's response cache cannot answer any of them.


def full_batch(tag: str) -> list[str]:
    return [f"short text {tag}"] * 64



BACKLOG = 12  # low calls of 64 texts; 3 instances take 3 requests at once, the rest wait
FLOOD = 600  # single-text low requests: more than 3 executing batches + 128 queued


async def timed(coro) -> tuple[float, object]:
    try:
        result = await coro
    except TritonClientError as err:
        result = err
    return time.monotonic(), result


async def backlog_then_high(url: str) -> tuple[list, list]:
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY, lanes=False) as client:
        await client.max_batch_size()
        lows = [asyncio.ensure_future(timed(client.embed(full_batch(f"low {i}"), priority=LOW)))
                for i in range(BACKLOG)]
        await asyncio.sleep(0.05)
        highs = [asyncio.ensure_future(timed(client.embed(full_batch(f"high {i}"),
                                                          priority=HIGH)))
                 for i in range(2)]
        return await asyncio.gather(*lows), await asyncio.gather(*highs)


async def queue_is_full(lows: list[asyncio.Future], limit_s: float = 30.0) -> None:
    """Return once some low request was refused with QueueFullError."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if any(f.done() and isinstance(f.result()[1], QueueFullError) for f in lows):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{FLOOD} low-priority requests never filled the queue")


async def flood_with_expiring_highs(url: str) -> tuple[list, list]:
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY, lanes=False) as client:
        await client.max_batch_size()
        lows = [asyncio.ensure_future(timed(client.embed([f"{TEXT} {i}"], priority=LOW)))
                for i in range(FLOOD)]
        await queue_is_full(lows)  # every instance busy: the next requests must wait
        # A 1 ms queue timeout expires unless an instance frees up within that 1 ms, which
        # can happen; several tries spread over the flood make at least one expiry certain.
        expiring = []
        for i in range(5):
            expiring.append(asyncio.ensure_future(
                timed(client.embed(full_batch(f"expiring {i}"), priority=HIGH, timeout_ms=1))))
            await asyncio.sleep(0.05)
        return await asyncio.gather(*lows), [r for _, r in await asyncio.gather(*expiring)]


def test_high_priority_requests_finish_ahead_of_queued_low_ones(triton) -> None:
    lows, highs = asyncio.run(backlog_then_high(triton.grpc_url))
    assert all(not isinstance(r, Exception) for _, r in highs), [r for _, r in highs]
    last_high = max(t for t, _ in highs)
    # A low request that ends after the last high one (served, or expired when an instance
    # freed up) was queued before the highs arrived and was overtaken by them.
    overtaken = [t for t, r in lows if t > last_high and not isinstance(r, QueueFullError)]
    assert len(overtaken) >= 4, "high-priority requests waited behind the low-priority backlog"
    assert all(not isinstance(r, Exception) for t, r in lows if t > last_high)
    assert_serving(triton.http_url)


@pytest.fixture(scope="module")
def flood(triton) -> Iterator[tuple[list, list]]:
    result = asyncio.run(flood_with_expiring_highs(triton.grpc_url))
    assert_serving(triton.http_url)
    yield result
    reset_router(triton.http_url)


def test_full_low_priority_queue_rejects_with_queue_full_error(flood) -> None:
    lows, _ = flood
    errors = [r for _, r in lows if isinstance(r, Exception)]
    full = [e for e in errors if isinstance(e, QueueFullError)]
    assert full, f"a flood of {FLOOD} low-priority requests never filled the queue"
    assert all("Exceeds maximum queue size" in e.message for e in full)
    assert all(isinstance(e, QueueFullError | DeadlineExceededError) for e in errors), errors


def test_client_timeout_expires_in_queue_as_deadline_exceeded(flood) -> None:
    _, expiring = flood
    failed = [r for r in expiring if isinstance(r, Exception)]
    assert failed, "no request with a 1 ms queue timeout expired while the queue was full"
    assert all(isinstance(e, DeadlineExceededError) for e in failed), failed
    assert all("Request timeout expired" in e.message for e in failed)

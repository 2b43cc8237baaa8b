"""Priority through the SDK on `embed`: high (the SDK sends it to the lane) jumps the bulk
backlog, a full queue sheds with QueueFullError, a request whose timeout passes in the
front's queue ends as DeadlineExceededError."""

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

from tests.integration.helpers import assert_serving, reloaded_with, reset_router

TEXT = "priority queues shed low value work first when the server is overloaded"
HIGH, LOW = 1, 2
# The front's workers hold its queue (docs/serving.md, "One model, one process"): the
# SDK's priority 1 goes to the model's interactive lane, served by the front's interactive
# worker; `lanes=False` keeps a call on the front, in arrival order with the bulk work.
# The SDK cuts each call of 64 short texts into requests of the front's preferred batch,
# a few in flight at once. Every request's texts are unique, so no cache answers them.


def full_batch(tag: str) -> list[str]:
    return [f"short text {tag}"] * 64



BACKLOG = 12  # low calls of 64 texts; 3 instances take 3 requests at once, the rest wait
FLOOD = 600  # single-text low requests: more than the workers' batches + 64 queued


async def timed(coro) -> tuple[float, object]:
    try:
        result = await coro
    except TritonClientError as err:
        result = err
    return time.monotonic(), result


async def backlog_then_high(url: str) -> tuple[list, list]:
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY, lanes=False) as bulk, \
            AsyncClient(url, protocol="grpc", retry=NO_RETRY) as client:
        await bulk.max_batch_size()
        await client.embed(["warm the lane"], priority=HIGH)
        lows = [asyncio.ensure_future(timed(bulk.embed(full_batch(f"low {i}"), priority=LOW)))
                for i in range(BACKLOG)]
        await asyncio.sleep(0.05)
        highs = [asyncio.ensure_future(timed(client.embed([f"high {i} {time.time()}"],
                                                          priority=HIGH)))
                 for i in range(2)]
        return await asyncio.gather(*lows), await asyncio.gather(*highs)


async def flood_then(url: str, tries: int = 0) -> tuple[list, list]:
    """FLOOD single-text requests at once; with `tries`, first a backlog of BACKLOG calls
    of 64 texts, then `tries` calls with a 1 ms timeout spread over it: such a call
    expires in the front's queue unless a worker takes it within that 1 ms, so several
    tries behind a busy backlog make an expiry certain. (the lows, the tries' outcomes)"""
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY, lanes=False) as client:
        await client.max_batch_size()
        if tries:
            backlog = [asyncio.ensure_future(client.embed(full_batch(f"backlog {i}"),
                                                          priority=LOW))
                       for i in range(BACKLOG)]
            await asyncio.sleep(0.1)
            expiring = []
            for i in range(tries):
                expiring.append(asyncio.ensure_future(timed(client.embed(
                    [f"expiring {i} {time.time()}"], priority=HIGH, timeout_ms=1))))
                await asyncio.sleep(0.05)
            await asyncio.gather(*backlog, return_exceptions=True)
            return [], [r for _, r in await asyncio.gather(*expiring)]
        lows = [asyncio.ensure_future(timed(client.embed([f"{TEXT} {i}"], priority=LOW)))
                for i in range(FLOOD)]
        return await asyncio.gather(*lows), []


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
    # a bulk queue of 64 (512 shipped) that the flood fills on any host
    with reloaded_with(triton, "embed", {"worker_queue": "64"}):
        lows, _ = asyncio.run(flood_then(triton.grpc_url))
    _, expiring = asyncio.run(flood_then(triton.grpc_url, tries=5))
    result = (lows, expiring)
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
    expired = [e for e in failed if isinstance(e, DeadlineExceededError)]
    assert expired, f"no request with a 1 ms timeout expired in the queue: {failed}"
    assert all("Request timeout expired" in e.message for e in expired)
    assert all(isinstance(e, DeadlineExceededError | QueueFullError) for e in failed), failed

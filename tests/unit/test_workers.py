"""The front's worker pool (python_backends/workers.py): batches, refusals, deadlines and
stops, each request answered exactly once. The senders here are plain recorders: the pool
is plain Python, and the integration tests run it inside the real server."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import pytest

from python_backends.workers import (
    QUEUE_FULL,
    TIMED_OUT,
    Job,
    WorkerPool,
    deadline_of,
    expired,
    take,
)
from runtime.errors import ModelError


def job(rows: int, deadline: float | None = None) -> Job:
    return Job(request=object(), sender=object(), rows=rows, queued_at=0.0,
               deadline=deadline)


def test_take_fills_up_to_max_rows_oldest_first() -> None:
    waiting = deque([job(3), job(4), job(2), job(1)])
    first = take(waiting, 8)
    assert [j.rows for j in first] == [3, 4]
    assert [j.rows for j in take(waiting, 8)] == [2, 1]
    assert not waiting


def test_take_serves_an_oversized_request_alone() -> None:
    waiting = deque([job(20), job(1)])
    assert [j.rows for j in take(waiting, 8)] == [20]
    assert [j.rows for j in take(waiting, 8)] == [1]


def test_expired_splits_by_deadline() -> None:
    live, late = expired([job(1), job(1, deadline=5.0), job(1, deadline=15.0)], now=10.0)
    assert [j.deadline for j in live] == [None, 15.0]
    assert [j.deadline for j in late] == [5.0]


class Request:
    """What the pool reads of a request: its timeout (microseconds)."""

    def __init__(self, value: int, timeout_us: int = 0) -> None:
        self.value, self.timeout_us = value, timeout_us

    def timeout(self) -> int:
        return self.timeout_us


class Sender:
    """Records every response sent through it."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.done = threading.Event()


def send(sender: Sender, response: Any) -> None:
    sender.sent.append(response)
    sender.done.set()


def refusal(err: ModelError) -> tuple[str, str]:
    return ("error", str(err))


def pool_of(serve: Any, threads: int = 2, max_rows: int = 4, max_queue: int = 64
            ) -> WorkerPool:
    return WorkerPool("m", threads, max_rows, max_queue, serve, send, refusal)


def held_serve() -> tuple[threading.Event, Any]:
    """A batch path that answers once the event is set."""
    release = threading.Event()

    def serve(requests: list[Request]) -> list[Any]:
        release.wait(10)
        return [("ok", r.value) for r in requests]

    return release, serve


def held_pool(threads: int, max_rows: int, n: int, rows: int = 1
              ) -> tuple[threading.Event, WorkerPool, list[Sender]]:
    """A pool whose batches wait for the event, given `n` requests of `rows` rows."""
    release, serve = held_serve()
    pool = pool_of(serve, threads=threads, max_rows=max_rows)
    senders = [Sender() for _ in range(n)]
    for i, s in enumerate(senders):
        pool.submit(Request(i), s, rows=rows)
    return release, pool, senders


def wait_in_flight(pool: WorkerPool, n: int) -> None:
    """Until the workers hold `n` requests (at most 5 s)."""
    deadline = time.monotonic() + 5
    while pool.stats.in_flight < n and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_all(senders: list[Sender], timeout: float = 10.0) -> None:
    for s in senders:
        assert s.done.wait(timeout), "a request was never answered"


@pytest.mark.timeout(30)
def test_every_request_is_answered_once_in_batches_of_max_rows() -> None:
    batches: list[int] = []

    def serve(requests: list[Request]) -> list[Any]:
        batches.append(len(requests))
        return [("ok", r.value) for r in requests]

    pool = pool_of(serve)
    senders = [Sender() for _ in range(40)]
    for i, s in enumerate(senders):
        pool.submit(Request(i), s, rows=1)
    wait_all(senders)
    assert [s.sent for s in senders] == [[("ok", i)] for i in range(40)]
    assert max(batches) <= 4 and sum(batches) == 40
    assert pool.stop() == 0


@pytest.mark.timeout(30)
def test_a_batch_that_raises_answers_each_request_with_the_error() -> None:
    def serve(requests: list[Request]) -> list[Any]:
        raise RuntimeError("encoder exploded")

    pool = pool_of(serve)
    senders = [Sender() for _ in range(5)]
    for s in senders:
        pool.submit(Request(0), s, rows=1)
    wait_all(senders)
    for s in senders:
        assert len(s.sent) == 1
        assert s.sent[0][0] == "error" and "RuntimeError: encoder exploded" in s.sent[0][1]
    pool.stop()


@pytest.mark.timeout(30)
def test_a_missing_response_is_made_good() -> None:
    pool = pool_of(lambda requests: [None] * len(requests))
    s = Sender()
    pool.submit(Request(0), s, rows=1)
    wait_all([s])
    assert s.sent[0][0] == "error" and "no response" in s.sent[0][1]
    pool.stop()


@pytest.mark.timeout(30)
def test_a_full_queue_refuses_at_once_with_tritons_wording() -> None:
    release, serve = held_serve()
    pool = pool_of(serve, threads=1, max_rows=1, max_queue=2)
    busy = Sender()
    pool.submit(Request(0), busy, rows=1)
    wait_in_flight(pool, 1)
    queued = [Sender(), Sender()]
    for s in queued:
        pool.submit(Request(1), s, rows=1)
    refused = Sender()
    pool.submit(Request(2), refused, rows=1)
    assert refused.done.is_set()  # at once, not after the busy batch
    assert refused.sent[0][0] == "error" and QUEUE_FULL in refused.sent[0][1]
    release.set()
    wait_all([busy, *queued])
    assert all(len(s.sent) == 1 and s.sent[0][0] == "ok" for s in [busy, *queued])
    pool.stop()


@pytest.mark.timeout(30)
def test_a_request_past_its_timeout_in_the_queue_gets_tritons_timeout_wording() -> None:
    release, serve = held_serve()
    pool = pool_of(serve, threads=1, max_rows=1)
    first = Sender()
    pool.submit(Request(0), first, rows=1)
    late = Sender()
    pool.submit(Request(1, timeout_us=20_000), late, rows=1)  # 20 ms
    time.sleep(0.1)
    release.set()
    wait_all([first, late])
    assert late.sent[0][0] == "error" and TIMED_OUT in late.sent[0][1]
    assert pool.stats.expired == 1
    pool.stop()


@pytest.mark.timeout(30)
def test_a_stop_serves_what_it_can_in_its_grace_and_refuses_the_rest() -> None:
    def serve(requests: list[Request]) -> list[Any]:
        time.sleep(0.2)
        return [("ok", r.value) for r in requests]

    pool = pool_of(serve, threads=1, max_rows=1)
    senders = [Sender() for _ in range(10)]
    for i, s in enumerate(senders):
        pool.submit(Request(i), s, rows=1)
    refused = pool.stop(grace_s=0.5)
    assert refused > 0
    for s in senders:  # every one answered exactly once: served, or refused
        assert len(s.sent) == 1
    assert sum(s.sent[0][0] == "ok" for s in senders) == 10 - refused
    late = Sender()
    pool.submit(Request(99), late, rows=1)
    assert late.sent[0][0] == "error" and "stopping" in late.sent[0][1]


@pytest.mark.timeout(30)
def test_a_sender_that_fails_does_not_stop_the_worker() -> None:
    calls = []

    def flaky(sender: Sender, response: Any) -> None:
        calls.append(response)
        if len(calls) == 1:
            raise RuntimeError("client went away")
        send(sender, response)

    pool = WorkerPool("m", 1, 1, 8, lambda rs: [("ok", r.value) for r in rs], flaky, refusal)
    gone, kept = Sender(), Sender()
    pool.submit(Request(0), gone, rows=1)
    pool.submit(Request(1), kept, rows=1)
    wait_all([kept])
    assert kept.sent == [("ok", 1)]
    pool.stop()


@pytest.mark.timeout(30)
def test_the_backlog_share_counts_only_what_waits_beyond_a_round_of_the_workers() -> None:
    release, pool, senders = held_pool(2, 4, 2, rows=4)  # one batch a worker, both held
    wait_in_flight(pool, 2)
    assert pool.backlog_share() == 0.0
    waiting = [Sender() for _ in range(3)]
    for s in waiting:  # 12 rows waiting: one round of both workers (8) and 4 beyond
        pool.submit(Request(1), s, rows=4)
    assert pool.backlog_share() == 1.0
    release.set()
    wait_all([*senders, *waiting])
    pool.stop()


def test_a_deadline_is_the_shorter_of_the_requests_timeout_and_the_queues() -> None:
    assert deadline_of(Request(0, timeout_us=0), now=100.0) is None
    assert deadline_of(Request(0, timeout_us=0), now=100.0, default_s=2.0) == 102.0
    assert deadline_of(Request(0, timeout_us=500_000), now=100.0, default_s=2.0) == 100.5
    assert deadline_of(Request(0, timeout_us=5_000_000), now=100.0, default_s=2.0) == 102.0
    assert deadline_of(Request(0, timeout_us=5_000_000), now=100.0) == 105.0


@pytest.mark.timeout(30)
def test_hold_waits_until_a_worker_takes_what_waits() -> None:
    release, pool, (busy,) = held_pool(1, 1, 1)
    wait_in_flight(pool, 1)
    queued = Sender()
    pool.submit(Request(1), queued, rows=1)  # waits: the one worker is busy
    took: list[float] = []
    holder = threading.Thread(target=lambda: took.append(pool.hold(1, 10.0)))
    holder.start()
    time.sleep(0.2)
    assert holder.is_alive()  # still held: a request waits for the worker
    release.set()  # the worker finishes and takes the waiting one
    holder.join(5)
    assert not holder.is_alive() and 0.15 < took[0] < 5
    wait_all([busy, queued])
    pool.stop()


@pytest.mark.timeout(30)
def test_hold_is_bounded_and_lets_go_at_a_stop() -> None:
    release, pool, senders = held_pool(1, 1, 3)
    assert 0.05 <= pool.hold(1, 0.1) < 2  # bounded by longest_s
    assert pool.hold(5, 10.0) < 0.5  # fewer rows wait than the bound: no hold
    stopper = threading.Timer(0.2, lambda: pool.stop(grace_s=0.1))
    stopper.start()
    assert pool.hold(1, 10.0) < 5  # a stop lets execute go
    release.set()
    stopper.join()
    wait_all(senders)


@pytest.mark.timeout(30)
def test_a_late_request_is_answered_at_its_deadline_while_every_worker_is_busy() -> None:
    release, pool, (busy,) = held_pool(1, 1, 1)
    late, began = Sender(), time.monotonic()
    pool.submit(Request(1, timeout_us=100_000), late, rows=1)  # 100 ms; the worker is held
    assert late.done.wait(5), "the late request waited for the worker"
    assert time.monotonic() - began < 2 and not busy.done.is_set()
    assert late.sent[0][0] == "error" and TIMED_OUT in late.sent[0][1]
    release.set()
    wait_all([busy])
    assert len(late.sent) == 1
    pool.stop()

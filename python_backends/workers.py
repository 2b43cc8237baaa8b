"""Requests answered after `execute` returns: a front's own queue and worker threads.

A Python-backend instance is one process whose `execute` calls run one at a time. Since
Triton 24.06 a model that is not decoupled may return from `execute` at once and send
each request's one final response later, from a thread of its own, through
`request.get_response_sender()` (python_backend's README; r24.10's QA,
`qa/L0_backend_python/response_sender`). So one process can serve concurrently with one
copy of its weights: `execute` hands each request to a worker pool here and returns, and
`threads` workers form their own batches (up to `max_rows` rows of requests that wait),
serve them through the model, and send every answer.

Nothing that reached a worker is dropped: a full queue refuses at once with Triton's
full-queue wording (which the SDK and the front door already handle); a request whose
own `timeout` passed while it waited here is answered with Triton's timeout wording; a
batch that raises answers each of its requests with the error; a stop serves what is
queued for up to its grace, then refuses the rest. Pure logic (`take`, `expired`) is
separate from the threads for the unit tests.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.errors import ModelError, UnavailableError

QUEUE_FULL = "Exceeds maximum queue size"  # Triton's wording, matched by the SDK and door
TIMED_OUT = "Request timeout expired"  # Triton's wording for a queue timeout
STOP_GRACE_S = 5.0  # what a stop waits for queued requests before refusing the rest
REAP_S = 0.05  # how late past its deadline a waiting request may be answered


@dataclass
class Job:
    """One request waiting in the pool: its response sender, its rows (batch size) and
    when it must be answered by (monotonic seconds; None: no deadline of its own)."""

    request: Any
    sender: Any
    rows: int
    queued_at: float
    deadline: float | None = None


def take(waiting: deque[Job], max_rows: int) -> list[Job]:
    """The next batch: the oldest jobs up to `max_rows` rows in all, and always the oldest
    one (a request larger than `max_rows` is served alone, as Triton would pass it)."""
    batch: list[Job] = []
    rows = 0
    while waiting and (not batch or rows + waiting[0].rows <= max_rows):
        job = waiting.popleft()
        batch.append(job)
        rows += job.rows
    return batch


def expired(batch: Sequence[Job], now: float) -> tuple[list[Job], list[Job]]:
    """(jobs still within their deadline, jobs past it)."""
    live = [j for j in batch if j.deadline is None or now <= j.deadline]
    late = [j for j in batch if j.deadline is not None and now > j.deadline]
    return live, late


def deadline_of(request: Any, now: float, default_s: float = 0.0) -> float | None:
    """When a request must leave the queue (monotonic): its own timeout (microseconds,
    Triton's `timeout` of the request) where shorter than the queue's `default_s`, as
    Triton's `allow_timeout_override` does; None when neither is set."""
    try:
        timeout_s = int(request.timeout()) / 1e6
    except (AttributeError, TypeError, ValueError):
        timeout_s = 0.0
    limits = [t for t in (timeout_s, default_s) if t > 0]
    return now + min(limits) if limits else None


@dataclass
class PoolStats:
    """What the pool did, for tests and the log: requests in, answered, refused, expired."""

    submitted: int = 0
    answered: int = 0
    refused: int = 0
    expired: int = 0
    batches: int = 0
    in_flight: int = 0


class WorkerPool:
    """`threads` workers over one bounded queue, serving batches through `serve`.

    `serve(requests) -> responses` is the model's own batch path (one response per
    request, or an exception for all); `send(sender, response)` sends one final response;
    `refusal(message)` builds an error response. The workers' CPU policy is the model's
    (python_backends/base.py `yield_cpu`); the reaper's stays normal (Pools.normal_threads):
    it answers late requests, which a starved reaper would leave waiting."""

    def __init__(self, name: str, threads: int, max_rows: int, max_queue: int,
                 serve: Callable[[list[Any]], list[Any]],
                 send: Callable[[Any, Any], None],
                 refusal: Callable[[ModelError], Any],
                 log: Callable[[str], None] = lambda _m: None,
                 full: str = "", timeout_s: float = 0.0) -> None:
        """`full`: what a refusal for a full queue says after Triton's wording;
        `timeout_s`: the longest a request waits here (0: its own timeout only)."""
        self.timeout_s = timeout_s
        self.name, self.max_rows, self.max_queue = name, max(1, max_rows), max_queue
        self.serve, self.send_one, self.refusal = serve, send, refusal
        self.log = log
        self.full = full or (f"{name} holds {max_queue} requests waiting; retry later or "
                             "at another priority")
        self.waiting: deque[Job] = deque()
        lock = threading.Lock()
        self.ready = threading.Condition(lock)  # the workers wait on it for jobs
        self.room = threading.Condition(lock)  # `hold` waits on it for the queue to drain
        self.arrived = threading.Condition(lock)  # the reaper waits on it for a job
        self.stopping = False
        self.stats = PoolStats()
        self.workers = [threading.Thread(target=self._work, name=f"tmr-{name}-{i}",
                                         daemon=True) for i in range(max(1, threads))]
        self.reaper = threading.Thread(target=self._reap, name=f"tmr-{name}-reaper",
                                       daemon=True)
        for thread in (*self.workers, self.reaper):
            thread.start()  # returns once the thread runs, its native_id set

    def thread_ids(self) -> set[int]:
        """The workers' native ids (they run at the model's CPU policy)."""
        return {int(w.native_id or 0) for w in self.workers}

    # -- the stub's execute thread ------------------------------------------------------
    def submit(self, request: Any, sender: Any, rows: int) -> None:
        """Queue one request, or refuse it at once (full queue, stopping)."""
        now = time.monotonic()
        with self.ready:
            self.stats.submitted += 1
            if self.stopping:
                why = f"{self.name} is stopping"
            elif len(self.waiting) >= self.max_queue:
                why = f"{QUEUE_FULL}: {self.full}"
            else:
                self.waiting.append(Job(request, sender, max(1, rows), now,
                                        deadline_of(request, now, self.timeout_s)))
                self.ready.notify()
                if len(self.waiting) == 1:  # the reaper sleeps while nothing waits
                    self.arrived.notify()
                return
            self.stats.refused += 1
        self._send(sender, self.refusal(UnavailableError(why)))

    def _refuse_late(self, now: float) -> None:
        """Answer every waiting job past its deadline now, not when a worker reaches it:
        under a long backlog that could be many batches later (the reaper's round)."""
        with self.ready:
            if not any(j.deadline is not None and now > j.deadline for j in self.waiting):
                return
            live, late = expired(list(self.waiting), now)
            self.waiting = deque(live)
            self.stats.expired += len(late)
            self.room.notify_all()
        for job in late:
            self._send(job.sender, self._late(job, now))

    def _reap(self) -> None:
        """While jobs wait, answer the late ones at their deadline (within REAP_S), also
        when every worker is busy and nothing arrives."""
        while True:
            with self.arrived:
                while not self.waiting and not self.stopping:
                    self.arrived.wait()
                if self.stopping:
                    return
                self.arrived.wait(REAP_S)  # a round; a stop wakes it sooner
            self._refuse_late(time.monotonic())

    def _late(self, job: Job, now: float) -> Any:
        return self.refusal(UnavailableError(
            f"{TIMED_OUT}: waited {(now - job.queued_at) * 1000:.0f} ms in {self.name}'s "
            "queue, past its timeout"))

    # -- the workers --------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self.ready:
                while not self.waiting and not self.stopping:
                    self.ready.wait()
                if not self.waiting:
                    return
                batch = take(self.waiting, self.max_rows)
                self.stats.in_flight += len(batch)
                self.room.notify_all()
            self._serve_batch(batch)

    def _serve_batch(self, batch: list[Job]) -> None:
        now = time.monotonic()
        live, late = expired(batch, now)
        for job in late:
            self._send(job.sender, self._late(job, now))
        responses: list[Any] = []
        if live:
            try:
                responses = list(self.serve([j.request for j in live]) or [])
            except Exception as err:  # the model's batch path raised: answer each request
                failure = err if isinstance(err, ModelError) else ModelError(
                    f"{self.name} failed: {type(err).__name__}: {err}")
                responses = [self.refusal(failure) for _ in live]
        for i, job in enumerate(live):
            response = responses[i] if i < len(responses) and responses[i] is not None \
                else self.refusal(ModelError(f"{self.name} produced no response"))
            self._send(job.sender, response)
        with self.ready:
            self.stats.in_flight -= len(batch)
            self.stats.expired += len(late)
            self.stats.batches += 1
            self.ready.notify_all()

    def _send(self, sender: Any, response: Any) -> None:
        try:
            self.send_one(sender, response)
        except Exception as err:  # a client gone, a cancelled request: nothing to answer
            self.log(f"{self.name}: a response could not be sent: {err}")
        with self.ready:
            self.stats.answered += 1

    # -- stopping ---------------------------------------------------------------------------
    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """Serve what is queued for up to `grace_s`, then refuse what is left; the number
        refused."""
        deadline = time.monotonic() + grace_s
        with self.ready:
            self.stopping = True
            self.ready.notify_all()
            self.room.notify_all()
            self.arrived.notify_all()
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        with self.ready:
            left = list(self.waiting)
            self.waiting.clear()
            self.stats.refused += len(left)
        for job in left:
            self._send(job.sender, self.refusal(UnavailableError(
                f"{self.name} stopped before this request was served; retry")))
        for worker in self.workers:  # the batches under way are answered, not cut off
            worker.join(grace_s)
        return len(left)

    def hold(self, rows: int, longest_s: float) -> float:
        """Wait while `rows` or more rows wait here (at most `longest_s`, and never while
        stopping): the caller is `execute`, so what arrives meanwhile waits in Triton's
        queue, ordered by its priority levels, instead of in arrival order here. The
        seconds held."""
        began = time.monotonic()
        until = began + longest_s
        with self.room:
            while (not self.stopping and sum(job.rows for job in self.waiting) >= rows
                   and time.monotonic() < until):
                self.room.wait(until - time.monotonic())
        return time.monotonic() - began

    def depth(self) -> int:
        """Requests waiting (not yet taken by a worker)."""
        with self.ready:
            return len(self.waiting)

    def backlog_share(self) -> float:
        """The rows waiting beyond one batch for every worker, as a share of a batch
        (capped at 1): what the ladder reads as requests that wait (degradation.py). A
        closed-loop client's steady queue, within one round of the workers, reads 0."""
        with self.ready:
            rows = sum(job.rows for job in self.waiting)
        beyond = rows - len(self.workers) * self.max_rows
        return min(max(beyond, 0) / self.max_rows, 1.0)


class Pools:
    """A front's two classes of work: bulk (`bulk`, every request on the front's own
    inputs, at the server's bulk CPU policy) and interactive (`interactive`, requests its
    ensemble lane sends on the `_INTERACTIVE` inputs, at normal priority); None where the
    config asks for no interactive workers."""

    def __init__(self, bulk: WorkerPool, interactive: WorkerPool | None,
                 is_interactive: Callable[[Any], bool], gauges: Mapping[str, Any],
                 counters: Mapping[str, Any]) -> None:
        """`gauges` and `counters`: by priority ("1" the lane's, "2" the bulk's), the
        requests waiting (set by `report`) and those each class took."""
        self.bulk, self.interactive, self.is_interactive = bulk, interactive, is_interactive
        self.gauges, self.counters = gauges, counters

    def report(self) -> None:
        """The requests waiting in each queue, on the gauges (sent with the batch's)."""
        self.gauges["2"].set(self.bulk.depth())
        self.gauges["1"].set(self.interactive.depth() if self.interactive else 0)

    def submit(self, request: Any, sender: Any, rows: int) -> None:
        lane = self.interactive is not None and self.is_interactive(request)
        self.counters["1" if lane else "2"].inc()
        (self.interactive if lane else self.bulk).submit(request, sender, rows)  # type: ignore[union-attr]

    def normal_threads(self) -> set[int]:
        """The threads that keep normal priority: both reapers and the interactive
        workers."""
        reapers = {int(p.reaper.native_id or 0) for p in (self.bulk, self.interactive)
                   if p is not None}
        return reapers | (self.interactive.thread_ids() if self.interactive else set())

    def stop(self) -> int:
        """Both pools stopped (workers.WorkerPool.stop); the requests refused."""
        return sum(pool.stop() for pool in (self.interactive, self.bulk) if pool is not None)

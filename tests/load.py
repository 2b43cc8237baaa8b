"""In-process load for the tests that provoke overload: an open loop through the SDK, the
closed loop of server/goodput.py with only Triton's standard `priority`, the router's level
sampled beside them, and what each priority got.

A `Send` asks the server one text at one priority and returns its `Outcome`; the loops
only decide when to send. (The perf runs use Locust: perf/README.md.)
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tmr_client import NO_RETRY, AsyncClient, TritonClientError

from core.families import TEXT_EMBEDDING
from core.families.catalog import catalog
from server.goodput import Outcome, Send, closed_loop, percentile, standard_sender
from server.prometheus import samples
from server.settings import admin_key
from tests.conftest import REPOSITORY

NORMAL = ((0, 4),)  # (priority, closed-loop clients); priority 0: the model's default


def short_texts(tag: str = "load") -> Iterator[str]:
    """Short numbered sentences: `tag` names the run."""
    for i in itertools.count():
        yield f"{tag} request {i}: the server under pressure keeps answering"


async def open_loop(send: Send, rate: float, seconds: float, high_share: float = 0.2,
                    seed: int = 0) -> list[Outcome]:
    """Requests arrive at `rate` a second whatever the server does, for `seconds`;
    `high_share` of them at priority 1 (from a generator seeded with `seed`), the rest at 2."""
    texts, rng = short_texts(f"load {seed}"), random.Random(seed)
    outcomes: list[Outcome] = []
    pending: set[asyncio.Task] = set()

    async def one(text: str, priority: int) -> None:
        outcomes.append(await send(text, priority))

    start = last = time.monotonic()
    due, sent = 0.0, 0
    while (now := time.monotonic()) < start + seconds:
        due, last = due + rate * (now - last), now
        while sent < int(due):
            priority = 1 if rng.random() < high_share else 2
            task = asyncio.ensure_future(one(next(texts), priority))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        await asyncio.sleep(0.002)
    await asyncio.gather(*pending)
    return outcomes


async def sdk_open_loop(grpc_url: str, rate: float, seconds: float, high_share: float = 0.2,
                        seed: int = 0, bulk_texts: int = 1) -> list[Outcome]:
    """The open loop through the SDK over gRPC, without retries; a failure is its error
    class. A priority-2 request carries `bulk_texts` texts (a re-index job's batch), each
    its own row: the front serves a repeated row once (`dedupe_rows`)."""
    async with AsyncClient(grpc_url, protocol="grpc", retry=NO_RETRY,
                           admin_key=admin_key()) as client:
        await client.max_batch_size()  # the first call's set-up is not a request's latency

        async def send(text: str, priority: int) -> Outcome:
            sent, error = time.monotonic(), None
            try:
                rows = [f"{text}, row {i} of a re-index job's batch" for i in
                        range(bulk_texts)] if priority == 2 else [text]
                await client.embed(rows, priority=priority)
            except TritonClientError as err:
                error = type(err).__name__
            return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error)

        return await open_loop(send, rate, seconds, high_share, seed)


async def standard_closed_loop(url: str, groups: Sequence[tuple[int, int]], seconds: float,
                               tag: str) -> list[Outcome]:
    """The closed loop over HTTP at the text-embedding front with only Triton's standard
    `priority`; `groups` of (priority, clients)."""
    front = next(m.front for m in catalog(REPOSITORY)
                 if m.family is TEXT_EMBEDDING and m.front)
    async with standard_sender(url, front, conn_limit=sum(n for _, n in groups) + 8) as send:
        return await closed_loop(send, groups, seconds, short_texts(tag))


class LevelSampler(threading.Thread):
    """Samples the highest degradation level of any front instance every `period_s`."""

    def __init__(self, metrics_url: str, period_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.metrics_url, self.period_s = metrics_url, period_s
        self.samples: list[tuple[float, float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            levels = [s.value for s in samples(self.metrics_url)
                      if s.name == "tmr_degradation_level"]
            self.samples.append((time.monotonic(), max(levels, default=0.0)))

    def __enter__(self) -> LevelSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.join()


@dataclass(frozen=True)
class PrioritySummary:
    """What one priority level got during a run (or one phase of it)."""

    phase: str
    priority: int
    requests: int
    served: int
    offered_rps: float
    goodput_rps: float
    p50_ms: float
    p99_ms: float
    failures: dict[str, int] = field(default_factory=dict)  # Outcome.failure -> count

    @property
    def success_ratio(self) -> float:
        return self.served / self.requests if self.requests else math.nan


def by_priority(outcomes: Sequence[Outcome], seconds: float,
                phase: str = "") -> list[PrioritySummary]:
    """Per priority: requests, served, offered and served rate, percentiles of the served
    requests' latencies, failures by status and error."""
    rows = []
    for priority in sorted({o.priority for o in outcomes}):
        mine = [o for o in outcomes if o.priority == priority]
        ok = [o.latency_ms for o in mine if o.error is None]
        rows.append(PrioritySummary(
            phase, priority, len(mine), len(ok), len(mine) / seconds, len(ok) / seconds,
            percentile(ok, 50), percentile(ok, 99),
            dict(Counter(o.failure for o in mine if o.error))))
    return rows

"""Goodput of a served front: closed-loop load of new texts over plain tritonclient HTTP,
each run summarised as a `LoadPoint`, and the requests/s at which the p99 reaches the
objective. `tmr tune` measures a host by it (server/tune.py), `make bench` the SDK's rate;
perf's other loads run on Locust (perf/locust_run.py), and its tables on the LoadPoint.

    async with standard_sender(url, "embed") as send:
        outcomes = await closed_loop(send, [(0, 8)], 2.5, unique_texts(input_texts()))
    point = load_point(8, outcomes, 2.5)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import numpy as np
from tmr_client.errors import from_exception

from core.families import TEXT_EMBEDDING
from core.paths import PROJECT_ROOT

INPUTS = PROJECT_ROOT / "perf" / "inputs"  # perf_analyzer input data, one file per family


@dataclass(frozen=True)
class Outcome:
    """One request: when it was sent (monotonic s), its priority, how long it took, and how
    it ended."""

    sent: float
    priority: int
    latency_ms: float
    error: str | None  # the error's kind (SDK error class, "HTTP 503", ...), None if served
    status: str = ""  # Triton's status of a failure (HTTP code or gRPC StatusCode)

    @property
    def failure(self) -> str:
        """`status error` of a failure ("" for a served request), status only when known."""
        return f"{self.status} {self.error}".strip() if self.error else ""


@dataclass(frozen=True)
class LoadPoint:
    """One closed-loop run at one concurrency: answered requests/s and their latencies."""

    concurrency: int
    seconds: float
    requests: int  # answered with status 200 and a well-formed vector
    errors: int
    rps: float  # answered requests / seconds
    p50_ms: float
    p95_ms: float
    p99_ms: float
    error_kinds: dict[str, int] = field(default_factory=dict)
    foreign_cpu: float | None = None  # share of the cores other work used meanwhile (host_cpu.py)


Send = Callable[[str, int], Awaitable[Outcome]]  # (text, priority) -> how it ended
SendTexts = Callable[[Sequence[str | bytes], int], Awaitable[Outcome]]  # (rows, priority)
Record = Callable[[Outcome], None]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default);
    NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(concurrency: int, latencies_ms: Sequence[float], errors: Counter[str],
              seconds: float) -> LoadPoint:
    """A LoadPoint from the latencies of answered requests and the errors by kind."""
    if seconds <= 0:
        raise ValueError("a load point needs a positive duration")
    return LoadPoint(
        concurrency=concurrency, seconds=seconds, requests=len(latencies_ms),
        errors=sum(errors.values()), rps=len(latencies_ms) / seconds,
        p50_ms=percentile(latencies_ms, 50), p95_ms=percentile(latencies_ms, 95),
        p99_ms=percentile(latencies_ms, 99), error_kinds=dict(errors),
    )


def load_point(concurrency: int, outcomes: Sequence[Outcome], seconds: float) -> LoadPoint:
    """The LoadPoint of a closed-loop run's outcomes."""
    errors = Counter(o.error for o in outcomes if o.error)
    return summarize(concurrency, [o.latency_ms for o in outcomes if o.error is None], errors,
                     seconds)


def interpolated_goodput(points: Sequence[LoadPoint], p99_budget_ms: float) -> float:
    """Requests/s where the p99 reaches the budget, linear between the two concurrencies
    around it (closed-loop points, no errors); the best rate when none exceeds it, 0 when
    even the first does."""
    ordered = sorted(points, key=lambda p: p.concurrency)
    best = 0.0
    for low, high in zip([None, *ordered], ordered):
        if high.errors or high.p99_ms > p99_budget_ms:
            if low is None:
                return 0.0
            share = (p99_budget_ms - low.p99_ms) / (high.p99_ms - low.p99_ms)
            return max(best, low.rps + share * (high.rps - low.rps))
        best = max(best, high.rps)
    return best


def input_texts(family_inputs: str = TEXT_EMBEDDING.perf_inputs) -> list[str]:
    """The texts of the family's perf_analyzer input data."""
    data = json.loads((INPUTS / family_inputs).read_text())["data"]
    name = TEXT_EMBEDDING.contract.front_inputs[0].name
    return [d[name]["content"][0] for d in data]


def unique_texts(texts: Sequence[str], nonce: str | None = None) -> Iterator[str]:
    """The base texts in turn, each with a suffix no other request of any run carries, so
    Triton's response cache answers none of them."""
    nonce = nonce or uuid.uuid4().hex[:8]
    for i in itertools.count():
        yield f"{texts[i % len(texts)]} ({nonce}-{i})"


async def closed_loop(send: Send, clients: Sequence[tuple[int, int]], seconds: float,
                      texts: Iterator[str], record: Record | None = None) -> list[Outcome]:
    """`clients` as (priority, how many): each client sends one request and waits for its
    answer, starting new ones for `seconds`. The outcomes, or none when `record` takes
    them as they come."""
    outcomes: list[Outcome] = []
    keep = record or outcomes.append
    deadline = time.monotonic() + seconds

    async def client(priority: int) -> None:
        while time.monotonic() < deadline:
            keep(await send(next(texts), priority))

    await asyncio.gather(*(client(p) for p, n in clients for _ in range(n)))
    return outcomes


async def timed_call(priority: int, call: Awaitable[object]) -> Outcome:
    """How one call ended: its latency, or its error's class and status (a tritonclient
    or SDK exception, classified by tmr_client.errors)."""
    sent = time.monotonic()
    error, status = None, "200"
    try:
        await call
    except Exception as exc:  # tritonclient raises its own types; each is classified
        typed = from_exception(exc)
        error, status = type(typed).__name__, str(typed.status)
    return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error, status)


@asynccontextmanager
async def standard_texts_sender(url: str, model: str, conn_limit: int = 512,
                                input_name: str | None = None) -> AsyncIterator[SendTexts]:
    """Send requests of one or more rows (texts, or encoded images as bytes, to the front
    input `input_name`: by default the text family's) over tritonclient's HTTP asyncio
    client with only Triton's standard request `priority` (0: the model's default),
    nothing project-specific."""
    import tritonclient.http.aio as httpaio

    client = httpaio.InferenceServerClient(url, conn_limit=conn_limit)
    name = input_name or TEXT_EMBEDDING.contract.front_inputs[0].name

    def send(rows: Sequence[str | bytes], priority: int) -> Awaitable[Outcome]:
        tensor = httpaio.InferInput(name, [len(rows), 1], "BYTES")
        tensor.set_data_from_numpy(np.array(
            [[r.encode() if isinstance(r, str) else r] for r in rows], dtype=np.object_))
        return timed_call(priority, client.infer(model, [tensor], priority=priority))

    try:
        yield send
    finally:
        await client.close()


@asynccontextmanager
async def standard_sender(url: str, model: str, conn_limit: int = 512,
                          input_name: str | None = None) -> AsyncIterator[Send]:
    """standard_texts_sender, one row a request."""
    async with standard_texts_sender(url, model, conn_limit, input_name) as send:
        yield lambda text, priority: send([text], priority)

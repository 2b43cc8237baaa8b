"""Open-loop load with a priority mix, built on the SDK (perf_analyzer aborts on rejections).

Requests arrive at a fixed rate whatever the server does, so overload is real overload.
Each outcome is recorded with its priority, latency and error type; `summarize()` turns
them into per-priority goodput, percentiles and rejections by reason.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from client import NO_RETRY, AsyncEmbedClient, TritonClientError


@dataclass(frozen=True)
class Outcome:
    """One request: when it was sent, its priority, how long it took, and how it ended."""

    sent: float
    priority: int
    latency_ms: float
    error: str | None  # the SDK error class name, or None when served
    served_by: str = ""
    status: str = ""  # Triton's status of a failure (HTTP code or gRPC StatusCode)


@dataclass
class PrioritySummary:
    """What one priority level got during a run."""

    priority: int
    offered_rps: float
    goodput_rps: float
    success_ratio: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int] = field(default_factory=dict)


def summarize(outcomes: list[Outcome], seconds: float) -> list[PrioritySummary]:
    """Per priority: offered and served rate, latency percentiles of served requests."""
    rows = []
    for priority in sorted({o.priority for o in outcomes}):
        mine = [o for o in outcomes if o.priority == priority]
        ok = [o.latency_ms for o in mine if o.error is None]
        rows.append(PrioritySummary(
            priority=priority, offered_rps=len(mine) / seconds,
            goodput_rps=len(ok) / seconds, success_ratio=len(ok) / len(mine),
            p50_ms=float(np.percentile(ok, 50)) if ok else float("nan"),
            p99_ms=float(np.percentile(ok, 99)) if ok else float("nan"),
            errors=dict(Counter(o.error for o in mine if o.error)),
        ))
    return rows


async def _one(client: AsyncEmbedClient, text: str, priority: int,
               outcomes: list[Outcome]) -> None:
    sent = time.monotonic()
    try:
        result = await client.embed_with_info([text], priority=priority)
        error, served = None, result.served_by[0] if result.served_by else ""
    except TritonClientError as err:
        error, served = type(err).__name__, ""
    outcomes.append(Outcome(sent, priority, (time.monotonic() - sent) * 1000, error, served))


async def open_loop(url: str, rate_rps: float, seconds: float, high_share: float = 0.2,
                    seed: int = 0, protocol: str = "grpc") -> list[Outcome]:
    """Send `rate_rps` requests a second for `seconds`, `high_share` of them priority 1.

    Texts are unique, so Triton's response cache cannot answer them.
    """
    rng = random.Random(seed)
    outcomes: list[Outcome] = []
    async with AsyncEmbedClient(url, protocol=protocol, retry=NO_RETRY) as client:
        await client.max_batch_size()
        start, tasks, n = time.monotonic(), [], 0
        while (now := time.monotonic()) < start + seconds:
            due = int((now - start) * rate_rps)
            while n < due:
                priority = 1 if rng.random() < high_share else 2
                text = f"load {seed} request {n}: the server under pressure keeps answering"
                tasks.append(asyncio.ensure_future(_one(client, text, priority, outcomes)))
                n += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
    return outcomes


class LevelSampler(threading.Thread):
    """Samples the highest degradation level of any embed instance every `period_s`."""

    def __init__(self, metrics_url: str, period_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.metrics_url, self.period_s = metrics_url, period_s
        self.samples: list[tuple[float, float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
                text = r.read().decode()
            levels = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                      if s.name == "tmr_degradation_level"]
            self.samples.append((time.monotonic(), max(levels, default=0.0)))

"""The load generators: the open loop, the SDK sender, and the closed loop and standard
senders of server/goodput.py that `tmr tune` measures with.

A `Send` asks the server one text at one priority and returns its `Outcome`; the loops
only decide when to send. Every text is new (`unique_texts`), so Triton's response cache
answers none of them. perf_analyzer stays for plain sweeps; these loops are for what it
cannot do here: a per-request priority mix, and going on through rejections.

    async with sdk_sender(url) as send:
        outcomes = await open_loop(send, 200.0, 10.0)    # 200 req/s, 20% priority 1
        outcomes = await closed_loop(send, [(1, 16)], 5.0, short_texts())  # 16 at priority 1
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager

from tmr_client import NO_RETRY, AsyncClient, TritonClientError

from perf import subjects
from server import goodput
from server.goodput import Outcome, Record, Send, closed_loop
from server.prometheus import samples
from server.settings import admin_key

Rate = float | Callable[[float], float]  # requests/s, or requests/s at t seconds in


def short_texts(tag: str = "load") -> Iterator[str]:
    """Short numbered sentences, the open loop's default: `tag` names the run."""
    for i in itertools.count():
        yield f"{tag} request {i}: the server under pressure keeps answering"


def unique_texts(texts: Sequence[str] | None = None, nonce: str | None = None) -> Iterator[str]:
    """goodput.unique_texts of `texts`, by default the text family's perf inputs."""
    return goodput.unique_texts(texts or subjects.texts(), nonce)


def high_or_low(high_share: float, seed: int) -> Callable[[], int]:
    """Priority 1 with probability `high_share`, else 2, from a seeded generator."""
    rng = random.Random(seed)
    return lambda: 1 if rng.random() < high_share else 2


async def open_loop(send: Send, rate: Rate, seconds: float, high_share: float = 0.2,
                    seed: int = 0, texts: Iterator[str] | None = None,
                    record: Record | None = None) -> list[Outcome]:
    """Requests arrive at `rate` whatever the server does, for `seconds`; `high_share`
    of them at priority 1, the rest at 2. The outcomes, or none when `record` takes them
    (a long run then holds no history)."""
    pool, priority = texts or short_texts(f"load {seed}"), high_or_low(high_share, seed)
    rate_at = rate if callable(rate) else (lambda _t, r=rate: r)
    outcomes: list[Outcome] = []
    keep = record or outcomes.append
    pending: set[asyncio.Task] = set()

    async def one(text: str, level: int) -> None:
        keep(await send(text, level))

    start = last = time.monotonic()
    due, sent = 0.0, 0
    while (now := time.monotonic()) < start + seconds:
        due, last = due + rate_at(now - start) * (now - last), now
        while sent < int(due):
            task = asyncio.ensure_future(one(next(pool), priority()))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent += 1
        await asyncio.sleep(0.002)
    await asyncio.gather(*pending)
    return outcomes


async def sdk_open_loop(url: str, rate: Rate, seconds: float, high_share: float = 0.2,
                        seed: int = 0, protocol: str = "grpc") -> list[Outcome]:
    """The open loop through the SDK at one server."""
    async with sdk_sender(url, protocol=protocol) as send:
        return await open_loop(send, rate, seconds, high_share, seed)


async def sdk_call(client: AsyncClient, text: str, priority: int) -> Outcome:
    """One embed call through the SDK; a failure is its error class."""
    sent = time.monotonic()
    try:
        await client.embed([text], priority=priority or None)
        error = None
    except TritonClientError as err:
        error = type(err).__name__
    return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error)


@asynccontextmanager
async def sdk_sender(*urls: tuple[str, str] | str, protocol: str = "grpc") -> AsyncIterator[Send]:
    """Send through the SDK (no retries); each url a `host:port` of `protocol`, or a
    (protocol, host:port) pair. With several, requests take them in turn."""
    pairs = [(protocol, u) if isinstance(u, str) else u for u in urls]
    clients = [AsyncClient(u, protocol=p, retry=NO_RETRY, admin_key=admin_key())
               for p, u in pairs]
    for c in clients:
        await c.max_batch_size()  # the first call's set-up is not a request's latency
    turn = itertools.cycle(clients)
    try:
        yield lambda text, priority: sdk_call(next(turn), text, priority)
    finally:
        for c in clients:
            await c.close()


def served_rate(outcomes: Sequence[Outcome], seconds: float) -> float:
    """Served requests a second."""
    return sum(o.error is None for o in outcomes) / seconds


async def capacity_rps(url: str, seconds: float = 5.0, in_flight: int = 16,
                       protocol: str = "grpc", priority: int = 1,
                       texts: Iterator[str] | None = None) -> float:
    """Served requests a second through the SDK with `in_flight` requests at `priority`
    outstanding (0: the model's default)."""
    async with sdk_sender(url, protocol=protocol) as send:
        outcomes = await closed_loop(send, [(priority, in_flight)], seconds,
                                     texts or short_texts("capacity"))
    return served_rate(outcomes, seconds)


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

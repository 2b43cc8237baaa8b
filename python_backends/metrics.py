"""Custom Prometheus metrics from inside the Python backend (`pb_utils.MetricFamily`).

Outside Triton the metrics are plain in-process numbers, so the same code runs in unit
tests and tooling. Families are shared by name within a stub process; counters with the
same labels add up across instances in Triton's registry.

Every `increment` is a round trip over the stub's IPC to Triton, so counters are sent in
`flush()`, once per batch (BaseModel.execute) for each counter that moved, instead of once
per increment: a batch of long texts counted its histogram buckets text by text, and a
rollout's latency buckets call by call, in hundreds of round trips.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from python_backends.pb import pb_utils


class _Metric:
    kind = "COUNTER"
    _families: ClassVar[dict[str, Any]] = {}

    def __init__(self, name: str, description: str, labels: dict[str, str]) -> None:
        self.value = 0.0
        self._metric = None
        if pb_utils is not None:
            family = self._families.get(name)
            if family is None:
                family = pb_utils.MetricFamily(
                    name=name, description=description,
                    kind=getattr(pb_utils.MetricFamily, self.kind))
                self._families[name] = family
            self._metric = family.Metric(labels=labels)


class Counter(_Metric):
    """One labelled counter; a MetricFamily counter inside Triton, sent by `flush()`."""

    _unsent = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount
        if self._metric is None or not amount:
            return
        with _LOCK:
            if not self._unsent:
                _PENDING.append(self)
            self._unsent += amount

    def take(self) -> Callable[[], None]:
        """The news to send (under the lock), as a call to make outside it."""
        amount, self._unsent = self._unsent, 0.0
        return lambda: self._metric.increment(amount)  # type: ignore[union-attr]


class Gauge(_Metric):
    """One labelled gauge, sent by `flush()` when its value changed."""

    kind = "GAUGE"
    _sent: float | None = None
    _queued = False

    def set(self, value: float) -> None:
        self.value = value
        if self._metric is None or value == self._sent:
            return
        with _LOCK:
            if not self._queued:
                _PENDING.append(self)
                self._queued = True

    def take(self) -> Callable[[], None]:
        value = self.value
        self._queued, self._sent = False, value
        return lambda: self._metric.set(value)  # type: ignore[union-attr]


_PENDING: list[Counter | Gauge] = []  # metrics with news Triton has not been sent
_LOCK = threading.Lock()  # the version reader's thread counts and sets too


def flush() -> None:
    """Send every metric's news since the last flush, in the order it was first counted,
    one round trip each. Only the thread that executes batches calls it (BaseModel.execute):
    the stub's IPC is not used from other threads (the version reader's rollout gauges and
    counters wait for the next batch)."""
    with _LOCK:
        sends = [metric.take() for metric in _PENDING]
        _PENDING.clear()
    for send in sends:
        send()


class CounterFamily:
    """Counters of one name whose extra labels (reason, priority...) vary at runtime."""

    def __init__(self, name: str, description: str, base: dict[str, str]) -> None:
        self.name, self.description, self.base = name, description, base
        self._counters: dict[tuple, Counter] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        counter = self._counters.get(key)
        if counter is None:
            counter = Counter(self.name, self.description, {**self.base, **labels})
            self._counters[key] = counter
        counter.inc(amount)


INF = float("inf")  # the +Inf bucket every Prometheus histogram has (histogram_quantile)


class Histogram:
    """Cumulative `le` counters, `_count` and `_sum`: Prometheus's histogram layout, from
    counters (the Python backend of 24.10 exports counters and gauges only)."""

    def __init__(self, name: str, description: str, labels: dict[str, str],
                 buckets: Sequence[float]) -> None:
        self.buckets = [(upper, Counter(f"{name}_bucket", description,
                                        {**labels, "le": "+Inf" if upper == INF else repr(upper)}))
                        for upper in (*buckets, INF)]
        self.count = Counter(f"{name}_count", description, labels)
        self.sum = Counter(f"{name}_sum", description, labels)

    def observe(self, value: float) -> None:
        for upper, counter in self.buckets:
            if value <= upper:
                counter.inc()
        self.count.inc()
        self.sum.inc(value)

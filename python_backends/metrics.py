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
from collections.abc import Sequence
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


_PENDING: list[Counter] = []  # counters with increments Triton has not been sent
_LOCK = threading.Lock()  # the version reader's thread counts too (a rollout's outcome)


def flush() -> None:
    """Send every counter's increments since the last flush, in the order they were first
    counted, one round trip per counter."""
    with _LOCK:
        amounts = [(counter, counter._unsent) for counter in _PENDING]
        for counter in _PENDING:
            counter._unsent = 0.0
        _PENDING.clear()
    for counter, amount in amounts:
        counter._metric.increment(amount)  # type: ignore[union-attr]


class Gauge(_Metric):
    """One labelled gauge."""

    kind = "GAUGE"

    def set(self, value: float) -> None:
        """Set it; Triton is told only when the value changes (a background reader sets
        some every second)."""
        if value == self.value and self._metric is not None and self._sent:
            return
        self.value = value
        if self._metric is not None:
            self._metric.set(value)
            self._sent = True

    _sent = False


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

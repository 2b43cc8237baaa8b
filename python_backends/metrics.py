"""Custom Prometheus metrics from inside the Python backend (`pb_utils.MetricFamily`).

Outside Triton the counters are plain in-process numbers, so the same code runs in
unit tests and tooling.
"""

from __future__ import annotations

from typing import ClassVar

from python_backends.pb import pb_utils


class Counter:
    """One labelled counter; a MetricFamily counter inside Triton."""

    _families: ClassVar[dict[str, object]] = {}

    def __init__(self, name: str, description: str, labels: dict[str, str]) -> None:
        self.value = 0.0
        self._metric = None
        if pb_utils is not None:
            family = self._families.get(name)
            if family is None:
                family = pb_utils.MetricFamily(
                    name=name, description=description, kind=pb_utils.MetricFamily.COUNTER
                )
                self._families[name] = family
            self._metric = family.Metric(labels=labels)

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount
        if self._metric is not None:
            self._metric.increment(amount)

"""A front model's Prometheus metrics in one place (`pb_utils.MetricFamily` inside Triton)."""

from __future__ import annotations

from typing import Any

from python_backends.degradation import Transition
from python_backends.metrics import Counter, CounterFamily, Gauge
from python_backends.queues import queue_capacities
from python_backends.routing import OUT_OF_SERVICE


class FrontMetrics:
    """Level, transitions, fallbacks, cache hits, refusals and queue capacities of one
    front model instance."""

    def __init__(self, model: str, instance: str, config: dict[str, Any]) -> None:
        base = {"model": model}
        self.level = Gauge("tmr_degradation_level", "Current degradation level of the router",
                           {**base, "instance": instance})
        self.transitions = CounterFamily("tmr_degradation_transitions_total",
                                         "Degradation level changes", base)
        self.fallbacks = CounterFamily("tmr_degradation_fallbacks_total",
                                       "Encoder failures that sent a batch elsewhere, by reason",
                                       base)
        self.cache_hits = Counter("tmr_router_cache_hits_total",
                                  "Texts answered from the router's cache", base)
        self.duplicates = Counter("tmr_duplicate_rows_total",
                                  "Rows not encoded: an identical row of the same dynamic "
                                  "batch was (dedupe_rows)", base)
        self.rejections = CounterFamily("tmr_rejections_total",
                                        "Requests refused by the router, by reason", base)
        self.rejections.inc(0, reason=OUT_OF_SERVICE)  # so rates and ratios exist at once
        # `tmr_queue_capacity` per priority, from this model's own queue policies; kept on
        # self: a metric goes away with its Python object.
        self.queue_capacity = []
        for priority, size in queue_capacities(config).items():
            gauge = Gauge("tmr_queue_capacity", "max_queue_size of the model's queue, per priority",
                          {**base, "priority": priority})
            gauge.set(size)
            self.queue_capacity.append(gauge)

    def transition(self, change: Transition) -> None:
        self.transitions.inc(**{"from": str(change.old), "to": str(change.new)})
        self.level.set(change.new)

"""Batch planning arithmetic (pure): the seeds' rules turned into config values.

- max_batch_size = memory budget x (1 - headroom) / peak memory per sample (headroom 20%)
- preferred_batch_size = where the latency curve's throughput stops rising (the knee)
- max_queue_delay = latency budget - compute time of that batch, capped by the time the
  arrival rate needs to fill it
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise


@dataclass(frozen=True)
class BatchPoint:
    """One in-process measurement: batch size, median latency, peak memory above idle."""

    batch: int
    latency_ms: float
    peak_mb: float

    @property
    def throughput(self) -> float:
        return self.batch / self.latency_ms * 1000


def per_sample_mb(points: Sequence[BatchPoint]) -> float:
    """Peak memory per sample: the steepest memory/batch slope, or the largest batch's
    average, whichever is larger (conservative)."""
    ordered = sorted(points, key=lambda p: p.batch)
    slopes = [(b.peak_mb - a.peak_mb) / (b.batch - a.batch)
              for a, b in pairwise(ordered) if b.batch > a.batch]
    largest = max([ordered[-1].peak_mb / ordered[-1].batch, *slopes])
    return max(largest, 1e-3)


def max_batch_from_memory(budget_mb: float, sample_mb: float, headroom: float = 0.2) -> int:
    """The largest batch that fits the budget with `headroom` kept free (at least 1)."""
    return max(1, math.floor(budget_mb * (1 - headroom) / sample_mb))


def preferred_batch(points: Sequence[BatchPoint], min_gain: float = 0.05) -> int:
    """The knee: the smallest batch within `min_gain` of the best throughput (a local dip
    from noise does not stop the search; larger batches only add latency after it)."""
    best = max(p.throughput for p in points)
    return min(p.batch for p in points if p.throughput >= best * (1 - min_gain))


def queue_delay_us(budget_ms: float, compute_ms: float, arrival_rps: float, batch: int) -> int:
    """Queue delay that keeps budget for compute and never waits longer than filling takes."""
    spare_ms = max(budget_ms - compute_ms, 0.0)
    fill_ms = batch / arrival_rps * 1000 if arrival_rps > 0 else spare_ms
    return int(min(spare_ms, fill_ms) * 1000)


@dataclass(frozen=True)
class Plan:
    max_batch_size: int
    preferred_batch_size: int
    max_queue_delay_microseconds: int
    per_sample_mb: float
    predicted_latency_ms: float
    predicted_throughput: float


def plan(points: Sequence[BatchPoint], memory_budget_mb: float, latency_budget_ms: float,
         arrival_rps: float, headroom: float = 0.2) -> Plan:
    sample = per_sample_mb(points)
    # Never propose a batch larger than was measured: beyond it the curve is a guess.
    max_batch = min(max_batch_from_memory(memory_budget_mb, sample, headroom),
                    max(p.batch for p in points))
    fitting = [p for p in points if p.batch <= max_batch and p.latency_ms <= latency_budget_ms]
    preferred = preferred_batch(fitting or [min(points, key=lambda p: p.batch)])
    point = next(p for p in points if p.batch == preferred)
    return Plan(max_batch, preferred,
                queue_delay_us(latency_budget_ms, point.latency_ms, arrival_rps, preferred),
                sample, point.latency_ms, point.throughput)


def check_table(proposal: Plan, latency_budget_ms: float, measured_rps: float,
                measured_p99_ms: float, measured_batch: float) -> str:
    """Predicted against measured, side by side (Markdown). The predicted p99 is the
    batch's compute time plus the full queue delay: the worst a lone batch waits."""
    predicted_p99 = proposal.predicted_latency_ms + proposal.max_queue_delay_microseconds / 1000
    rows = [
        ("throughput (infer/s)", proposal.predicted_throughput, measured_rps),
        ("p99 latency (ms)", predicted_p99, measured_p99_ms),
        ("executed batch size", float(proposal.preferred_batch_size), measured_batch),
    ]
    lines = ["| figure | predicted | measured | measured / predicted |",
             "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {p:.1f} | {m:.1f} | {m / p:.2f} |" if p > 0 else
              f"| {name} | {p:.1f} | {m:.1f} | - |" for name, p, m in rows]
    verdict = "within" if measured_p99_ms <= latency_budget_ms else "over"
    return "\n".join(lines) + f"\n\nmeasured p99 is {verdict} the {latency_budget_ms:g} ms budget"

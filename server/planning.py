"""Batch planning arithmetic (pure): the seeds' rules turned into config values.

- max_batch_size = memory budget x (1 - headroom) / peak memory per sample (headroom 20%)
- preferred_batch_size = where the latency curve's throughput stops rising (the knee)
- max_queue_delay = latency budget - compute time of that batch, capped by the time the
  arrival rate needs to fill it
- replicas = ceil(target peak x (1 + headroom) / goodput of one replica), the goodput being
  the throughput at the highest swept concurrency whose p99 is within the objective
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from core.paths import P99_OBJECTIVE_MS
from server.perf_analyzer import PerfRow


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


# -- Capacity: replicas for a target peak ---------------------------------------------------


class CapacityError(ValueError):
    """Raised when a target or a sweep gives no replica count (the message says why)."""


@dataclass(frozen=True)
class Hpa:
    """The HorizontalPodAutoscaler and PodDisruptionBudget figures of the manifest."""

    min_replicas: int
    max_replicas: int
    queue_target_us: int
    pdb_max_unavailable: int


@dataclass(frozen=True)
class Capacity:
    """Replicas for a target peak: ceil(target x (1 + headroom) / goodput of one replica)."""

    target_rps: float
    goodput_rps: float
    concurrency: int  # the sweep level the goodput was measured at
    p99_ms: float
    p99_budget_ms: float
    headroom: float
    replicas: int

    def share(self, replicas: int) -> float:
        """Each replica's load as a share of its goodput when `replicas` serve the target."""
        return self.target_rps / replicas / self.goodput_rps

    def hpa_min_replicas(self, hpa: Hpa) -> int:
        """The planned replicas, and never at or under what the PDB lets a drain take."""
        return max(self.replicas, hpa.pdb_max_unavailable + 1)


def goodput_row(rows: Sequence[PerfRow], p99_budget_ms: float) -> PerfRow:
    """The row at the highest concurrency whose p99 is within the objective."""
    if not rows:
        raise CapacityError("the sweep has no rows")
    within = [r for r in rows if r.p99_ms <= p99_budget_ms and r.throughput > 0]
    if not within:
        best = min(rows, key=lambda r: r.p99_ms)
        raise CapacityError(f"no level is within the {p99_budget_ms:g} ms p99 objective: the "
                            f"best is concurrency {best.concurrency} at p99 {best.p99_ms:.1f} ms")
    return max(within, key=lambda r: r.concurrency)


def capacity(rows: Sequence[PerfRow], target_rps: float, p99_budget_ms: float = P99_OBJECTIVE_MS,
             headroom: float = 0.2) -> Capacity:
    """Replicas for `target_rps` from a sweep of one replica (see Capacity)."""
    if not target_rps > 0:
        raise CapacityError(f"the target must be above 0 requests/s, not {target_rps:g}")
    row = goodput_row(rows, p99_budget_ms)
    needed = target_rps * (1 + headroom) / row.throughput
    replicas = max(1, math.ceil(round(needed, 9)))  # 5.000000001 from float error stays 5
    return Capacity(target_rps, row.throughput, row.concurrency, row.p99_ms, p99_budget_ms,
                    headroom, replicas)


def capacity_report(cap: Capacity, hpa: Hpa) -> str:
    """The arithmetic in plain lines, then the HPA's minReplicas from it."""
    peak = cap.target_rps * (1 + cap.headroom)
    return "\n".join([
        f"goodput of one replica: {cap.goodput_rps:.0f} req/s (concurrency {cap.concurrency}, "
        f"p99 {cap.p99_ms:.1f} ms within the {cap.p99_budget_ms:g} ms objective)",
        f"target {cap.target_rps:g} req/s + {cap.headroom:.0%} headroom = {peak:g} req/s",
        f"replicas: ceil({peak:g} / {cap.goodput_rps:.1f} = {peak / cap.goodput_rps:.2f}) = "
        f"{cap.replicas}, each at {cap.share(cap.replicas):.0%} of its goodput",
        fewer_line(cap),
        "",
        *hpa_lines(cap, hpa),
    ])


def fewer_line(cap: Capacity) -> str:
    """What one replica fewer would run at (a drain or a lost pod)."""
    if cap.replicas == 1:
        return "one replica fewer: none left to serve the target"
    share = cap.share(cap.replicas - 1)
    verdict = ("over its goodput: p99 beyond the objective" if share > 1
               else f"within it, but under the {cap.headroom:.0%} headroom")
    return f"one replica fewer ({cap.replicas - 1}): each at {share:.0%} of its goodput, {verdict}"


def hpa_lines(cap: Capacity, hpa: Hpa) -> list[str]:
    """minReplicas for the HPA, against the manifest's figures."""
    wanted = cap.hpa_min_replicas(hpa)
    why = (f" (the PDB lets a drain take {hpa.pdb_max_unavailable})"
           if wanted > cap.replicas else "")
    lines = [f"HPA minReplicas: {wanted}{why}; the manifest has {hpa.min_replicas}, "
             f"maxReplicas {hpa.max_replicas}",
             f"above it the HPA scales on avg_time_queue_us, target {hpa.queue_target_us} us "
             f"({hpa.queue_target_us / 1000:g} ms of the {cap.p99_budget_ms:g} ms objective)"]
    if wanted > hpa.max_replicas:
        lines.append(f"raise maxReplicas to at least {wanted}: the manifest's is under the plan")
    return lines

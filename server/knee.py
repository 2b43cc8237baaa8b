"""Where a concurrency sweep stops paying: pure functions over typed perf rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.perf_analyzer import PerfRow


@dataclass(frozen=True)
class Knee:
    """The recommended operating point of a sweep, and why the sweep stopped paying."""

    concurrency: int
    throughput: float
    p99_ms: float
    reason: str


def find_knee(rows: Sequence[PerfRow], p99_budget_ms: float, min_gain: float = 0.05) -> Knee:
    """The last concurrency whose throughput still rose by `min_gain` over the previous
    level while p99 stayed within budget; beyond it throughput flattens or p99 breaks."""
    ordered = sorted(rows, key=lambda r: r.concurrency)
    if not ordered:
        raise ValueError("an empty sweep has no knee")
    within = [r for r in ordered if r.p99_ms <= p99_budget_ms]
    if not within:
        first = ordered[0]
        return Knee(first.concurrency, first.throughput, first.p99_ms,
                    f"p99 over the {p99_budget_ms:.0f} ms budget at every level")
    best = within[0]
    for row in ordered[ordered.index(within[0]) + 1:]:
        if row.p99_ms > p99_budget_ms:
            return Knee(best.concurrency, best.throughput, best.p99_ms,
                        f"p99 {row.p99_ms:.0f} ms over the {p99_budget_ms:.0f} ms budget "
                        f"at concurrency {row.concurrency}")
        if row.throughput < best.throughput * (1 + min_gain):
            return Knee(best.concurrency, best.throughput, best.p99_ms,
                        f"throughput rose less than {min_gain:.0%} at concurrency "
                        f"{row.concurrency}")
        best = row
    return Knee(best.concurrency, best.throughput, best.p99_ms,
                "still rising at the highest level swept")


@dataclass(frozen=True)
class Ratio:
    """Candidate against baseline at one concurrency level."""

    concurrency: int
    throughput: float
    p99: float


def ratios(baseline: Sequence[PerfRow], candidate: Sequence[PerfRow]) -> list[Ratio]:
    """Throughput and p99 ratios at the concurrency levels both sweeps measured."""
    base = {r.concurrency: r for r in baseline}
    return [Ratio(r.concurrency, r.throughput / base[r.concurrency].throughput,
                  r.p99_ms / base[r.concurrency].p99_ms)
            for r in sorted(candidate, key=lambda r: r.concurrency) if r.concurrency in base]


def regressions(found: Sequence[Ratio], min_throughput: float, max_p99: float) -> list[str]:
    """Why a candidate regressed against its baseline (empty: it did not)."""
    problems = []
    for r in found:
        if r.throughput < min_throughput:
            problems.append(f"c{r.concurrency}: throughput {r.throughput:.2f}x < {min_throughput}x")
        if r.p99 > max_p99:
            problems.append(f"c{r.concurrency}: p99 {r.p99:.2f}x > {max_p99}x")
    return problems

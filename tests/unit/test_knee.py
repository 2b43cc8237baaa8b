"""Knee detection and baseline ratios on synthetic sweeps."""

from __future__ import annotations

import pytest

from server.knee import find_knee, ratios, regressions
from server.perf_analyzer import PerfRow


def row(c: int, rps: float, p99: float) -> PerfRow:
    return PerfRow(c, rps, p99 / 2, p99 * 0.8, p99 * 0.9, p99, 1.0, 2.0, 0.5)


SWEEP = [row(1, 90, 20), row(2, 170, 25), row(4, 200, 40), row(8, 205, 90), row(16, 226, 190)]


def test_knee_is_the_last_level_that_still_paid() -> None:
    knee = find_knee(SWEEP, p99_budget_ms=300)
    assert (knee.concurrency, knee.throughput) == (4, 200)
    assert "rose less than 5% at concurrency 8" in knee.reason


def test_knee_stops_before_the_latency_budget_breaks() -> None:
    knee = find_knee(SWEEP, p99_budget_ms=30)
    assert knee.concurrency == 2 and "p99 40 ms over the 30 ms budget" in knee.reason


def test_knee_reports_a_sweep_that_is_over_budget_everywhere_or_still_rising() -> None:
    assert "every level" in find_knee(SWEEP, p99_budget_ms=5).reason
    rising = [row(1, 10, 5), row(2, 20, 6), row(4, 40, 7)]
    assert find_knee(rising, 100).concurrency == 4
    with pytest.raises(ValueError, match="empty sweep"):
        find_knee([], 10)


def test_ratios_compare_matching_levels_and_flag_regressions() -> None:
    slower = [row(1, 81, 22), row(4, 150, 60), row(32, 1, 1)]
    found = ratios(SWEEP, slower)
    assert [r.concurrency for r in found] == [1, 4]
    assert found[1].throughput == pytest.approx(0.75) and found[1].p99 == pytest.approx(1.5)
    assert regressions(found, min_throughput=0.85, max_p99=1.3) == [
        "c4: throughput 0.75x < 0.85x", "c4: p99 1.50x > 1.3x"]
    assert regressions(ratios(SWEEP, SWEEP), 0.85, 1.3) == []

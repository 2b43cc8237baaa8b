"""perf.load's two generators, perf.stats' per-priority summary and the harness's report,
driven by a local Send (no server: the loops only decide when to send)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from perf import harness
from perf.load import open_loop, short_texts
from perf.stats import by_priority
from server.goodput import Outcome, closed_loop


def recording_send(seen: list[tuple[str, int]], delay_s: float = 0.0):
    """A Send that answers after `delay_s`, every request served, recording what it got."""
    async def send(text: str, priority: int) -> Outcome:
        sent = time.monotonic()
        seen.append((text, priority))
        await asyncio.sleep(delay_s)
        return Outcome(sent, priority, (time.monotonic() - sent) * 1000, None)
    return send


def test_the_open_loop_sends_at_its_rate_whatever_the_answers_take() -> None:
    seen: list[tuple[str, int]] = []
    outcomes = asyncio.run(open_loop(recording_send(seen, delay_s=0.2), 200.0, 0.5, seed=3))
    assert 60 <= len(outcomes) == len(seen) <= 110  # 100 due; slow answers do not hold it
    assert len({text for text, _ in seen}) == len(seen)  # every text new
    share = Counter(p for _, p in seen)[1] / len(seen)
    assert set(p for _, p in seen) == {1, 2} and 0.05 < share < 0.4


def test_the_open_loop_follows_a_rate_that_changes_over_time() -> None:
    seen: list[tuple[str, int]] = []
    began = time.monotonic()
    outcomes = asyncio.run(open_loop(recording_send(seen), lambda t: 0.0 if t < 0.3 else 200.0,
                                     0.6))
    assert min(o.sent for o in outcomes) - began >= 0.3
    assert 30 <= len(outcomes) <= 75


def test_a_run_that_records_its_outcomes_keeps_no_history() -> None:
    kept: list[Outcome] = []
    returned = asyncio.run(open_loop(recording_send([]), 100.0, 0.3, record=kept.append))
    assert returned == [] and len(kept) > 20


def test_the_closed_loop_keeps_each_group_at_its_number_of_clients() -> None:
    in_flight: Counter[int] = Counter()
    most: Counter[int] = Counter()

    async def send(text: str, priority: int) -> Outcome:
        in_flight[priority] += 1
        most[priority] = max(most[priority], in_flight[priority])
        await asyncio.sleep(0.01)
        in_flight[priority] -= 1
        return Outcome(time.monotonic(), priority, 10.0, None)

    outcomes = asyncio.run(closed_loop(send, [(1, 2), (2, 5)], 0.2, short_texts()))
    assert dict(most) == {1: 2, 2: 5}
    assert Counter(o.priority for o in outcomes)[2] > Counter(o.priority for o in outcomes)[1]


def test_the_summary_per_priority_counts_failures_by_status_and_error() -> None:
    outcomes = [Outcome(0, 1, 10.0, None), Outcome(0, 1, 30.0, None),
                Outcome(0, 2, 0.0, "QueueFullError", "503"), Outcome(0, 2, 0.0, "TimeoutError"),
                Outcome(0, 2, 20.0, None)]
    high, low = by_priority(outcomes, 2.0, phase="burst")
    assert (high.phase, high.priority, high.requests, high.served) == ("burst", 1, 2, 2)
    assert high.p50_ms == 20.0 and high.goodput_rps == 1.0 and high.failures == {}
    assert low.failures == {"503 QueueFullError": 1, "TimeoutError": 1}
    assert low.success_ratio == pytest.approx(1 / 3) and low.offered_rps == 1.5


def test_a_report_is_written_as_markdown_and_json_and_printed(tmp_path: Path,
                                                               capsys) -> None:
    harness.write_report(tmp_path, "run", "| a |", {"rps": 1.5})
    table, stamp = (tmp_path / "run.md").read_text().split("\n\n")
    assert table == "| a |" and stamp.startswith("_Measured ")  # perf/stamp.py
    assert json.loads((tmp_path / "run.json").read_text()) == {"rps": 1.5}
    assert capsys.readouterr().out.endswith(f"results in {tmp_path}\n")

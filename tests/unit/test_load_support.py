"""tests/load.py, the tests' in-process load: the open loop, the closed loop of
server/goodput.py it drives, and the per-priority summary, through a local Send (no
server: the loops only decide when to send)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from server.goodput import Outcome, closed_loop
from tests.load import by_priority, open_loop, short_texts


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

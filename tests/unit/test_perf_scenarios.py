"""perf/scenarios.py's bookkeeping around a Locust run: phases, levels and refusals, tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf import scenarios
from perf.locust_run import LocustRun, read_stats


def entry(name: str, times: dict[int, int], failures: int = 0,
          per_second: dict[int, int] | None = None, span: tuple[float, float] = (1000.0, 1004.2),
          ) -> dict:
    """One entry as Locust's --json-file writes it."""
    return {"name": name, "method": "POST", "num_requests": sum(times.values()),
            "num_failures": failures, "response_times": {str(k): v for k, v in times.items()},
            "start_time": span[0], "last_request_timestamp": span[1],
            "num_reqs_per_sec": {str(k): v for k, v in (per_second or {}).items()}}


CALLS: list[dict] = []  # the keyword arguments of each locust() call


@pytest.fixture
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Locust run of two stages (2 s normal, 2 s 10x) and the samples taken beside it."""
    entries = [entry("normal p1", {10: 4}), entry("normal p2", {20: 16}, per_second={1000: 16}),
               entry("10x p2", {30: 40}), entry("10x p2 failed", {1: 40}, 40, {1003: 40})]
    for name in ("overload", "sawtooth"):
        (tmp_path / f"{name}.json").write_text(json.dumps(entries))
    failures = {("10x p2", "HTTP 503: queue full"): 40}
    run = LocustRun(read_stats(entries), failures, tmp_path)
    levels = [(999.5, 0.0, 0.0), (1000.5, 1.0, 0.0), (1001.5, 1.0, 2.0), (1002.5, 3.0, 10.0),
              (1003.5, 2.0, 15.0), (1005.0, 2.0, 20.0)]  # the last after the run: its tail
    monkeypatch.setattr(scenarios, "beside", lambda _url, work: (work(), levels))
    monkeypatch.setattr(scenarios, "locust", lambda *_a, **k: CALLS.append(k) or run)
    CALLS.clear()
    return tmp_path


def test_each_stage_gets_its_rows_levels_and_refusals(fake_run: Path) -> None:
    stages = [(2.0, 10.0, "normal"), (2.0, 40.0, "10x")]
    got = scenarios.measured(fake_run, "http://h", "m", ["OpenLoop"], "overload", stages=stages)
    rows = {(r["phase"], r["priority"]): r for r in got["rows"]}
    assert list(rows) == [("normal", 1), ("normal", 2), ("10x", 2)]
    assert rows["normal", 2]["offered_rps"] == 8 and rows["normal", 2]["p50_ms"] == 20
    high = rows["10x", 2]
    assert (high["requests"], high["served"], high["goodput_rps"]) == (80, 40, 20)
    assert high["failures"] == {"HTTP 503: queue full": 40}
    assert (rows["normal", 2]["max_level"], high["max_level"]) == (1, 3)
    assert (rows["normal", 2]["router_refusals"], high["router_refusals"]) == (2, 18)
    assert got["per_second"]["served"][0] == 16 and got["per_second"]["failed"][3] == 40
    assert got["levels"][0] == (-0.5, 0.0)
    # 5 arrivals a second per user at least; the front model named
    assert CALLS[0]["env"] == {"TMR_MODEL": scenarios.FRONT, "TMR_USER_RPS": "5.0"}


def test_the_tables_hold_every_row_the_refusals_and_the_sawtooth_line(fake_run: Path) -> None:
    run = lambda *a, **k: scenarios.measured(fake_run, "http://h", "m", *a, **k)  # noqa: E731
    saw = scenarios.sawtooth(run, 10.0, 2.0, 4.0)
    stages = [(2.0, 10.0, "normal"), (2.0, 40.0, "10x")]
    overload = run(["OpenLoop"], "overload", stages=stages)
    text = scenarios.markdown(20.0, {"overload": overload, "sawtooth": saw})
    assert "**20 req/s**" in text
    row = "| overload | 10x | 2 | 80 | 40 | 20 | 50.0% | 30 | 30 | HTTP 503: queue full: 40 | 3 |"
    assert row in text
    assert "Router refusals (`tmr_rejections_total`): overload normal 2, overload 10x 18" in text
    # 2 stages over 4 s: 15 load changes a minute; levels 0 1 1 3 2 2: 3 changes in 4 s
    assert "load changes 15/min, level changes 45/min, highest level 3." in text


def test_recover_names_its_phases_and_the_gap_it_measured(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {"recover-overload": [entry("p1", {100: 4}), entry("p2 failed", {1: 6}, 6)],
            "recover-normal": [entry("p0", {20: 9}, span=(1006.0, 1009.0))]}
    for name, entries in runs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(entries))
    monkeypatch.setattr(scenarios, "beside", lambda _url, work: (work(), [(999.0, 0.0, 0.0)]))
    monkeypatch.setattr(scenarios, "locust", lambda *_a, name, **_k: LocustRun(
        read_stats(runs[name]), {}, tmp_path))
    rows = scenarios.recover(
        lambda *a, **k: scenarios.measured(tmp_path, "http://h", "m", *a, **k), 4, 0.0, 3)
    assert [(r["phase"], r["priority"], r["served"]) for r in rows["rows"]] == [
        ("overload", 1, 4), ("overload", 2, 0), ("normal, 1.8 s after", 0, 9)]
    assert rows["rows"][2]["goodput_rps"] == 3

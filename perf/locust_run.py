"""Run perf/locustfile.py headless in Locust's own venv (`make locust`) and read back its
CSV: one `Stat` per request name (phase and priority, or window), failures by error:
`locust(out, "http://127.0.0.1:8000", ["ClosedLoop"], count=8, seconds=6).total.p99_ms`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.paths import PROJECT_ROOT
from server.goodput import INPUTS, LoadPoint

LOCUST = PROJECT_ROOT / ".peers" / "locust" / "venv" / "bin" / "locust"
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
TOTAL = "all"
FAILED = " failed"  # the locustfile's suffix for a failed request's name
Stage = tuple[float, float, str]  # seconds, offered requests/s, phase name
# The families' perf inputs, for the locustfile (Locust's venv has no core).
FAMILY_INPUTS = {"TMR_TEXT_INPUTS": str(INPUTS / TEXT_EMBEDDING.perf_inputs),
                 "TMR_IMAGE_INPUTS": str(INPUTS / IMAGE_CLASSIFICATION.perf_inputs)}


@dataclass(frozen=True)
class Stat:
    """One request name over both protocols: its counts and its served latencies (ms)."""

    name: str
    requests: int  # sent, failures included
    failures: int
    rps: float  # sent requests / the span Locust saw them in
    p50_ms: float
    p95_ms: float
    p99_ms: float

    @property
    def served(self) -> int:
        return self.requests - self.failures


@dataclass(frozen=True)
class LocustRun:
    """A finished Locust run: its stats by name, its failures by (name, error), its folder."""

    stats: dict[str, Stat]
    failures: dict[tuple[str, str], int] = field(default_factory=dict)
    folder: Path = Path()

    @property
    def total(self) -> Stat:
        return self.stats[TOTAL]

    def matching(self, prefix: str) -> list[Stat]:
        """The stats of the names that start with `prefix`."""
        return [s for name, s in self.stats.items() if name != TOTAL and name.startswith(prefix)]

    def failures_of(self, name: str) -> dict[str, int]:
        return {error: n for (where, error), n in self.failures.items() if where == name}


def histogram_percentile(counts: Mapping[int, int], q: float) -> float:
    """The q-th percentile of latencies given as {ms: count} (NaN when empty)."""
    total = sum(counts.values())
    if not total:
        return math.nan
    rank, seen = q / 100 * total, 0
    for ms in sorted(counts):
        seen += counts[ms]
        if seen >= rank:
            return float(ms)
    return float(max(counts))


def stat(name: str, entries: Sequence[dict]) -> Stat:
    """One Stat of Locust's JSON entries: served ones give the latencies, FAILED ones count."""
    counts: Counter[int] = Counter()
    for e in entries:
        if not e["name"].endswith(FAILED):
            counts.update({int(ms): n for ms, n in e["response_times"].items()})
    requests = sum(e["num_requests"] for e in entries)
    failures = sum(e["num_failures"] for e in entries)
    span = (max(e["last_request_timestamp"] or 0 for e in entries)
            - min(e["start_time"] for e in entries)) if entries else 0
    return Stat(name, requests, failures, requests / span if span > 0 else math.nan,
                *(histogram_percentile(counts, q) for q in (50, 95, 99)))


def read_stats(entries: Sequence[dict]) -> dict[str, Stat]:
    """Locust's JSON stats by request name, both protocols and the FAILED twin merged;
    TOTAL is every request."""
    by_name: dict[str, list[dict]] = {}
    for e in entries:
        by_name.setdefault(e["name"].removesuffix(FAILED), []).append(e)
    return {**{name: stat(name, mine) for name, mine in by_name.items()},
            TOTAL: stat(TOTAL, entries)}


def read_failures(rows: Sequence[Sequence]) -> dict[tuple[str, str], int]:
    """The locustfile's failures file ([name, error, occurrences] rows), by (name, error),
    both protocols merged; a failed request's name loses its FAILED suffix."""
    failures: Counter[tuple[str, str]] = Counter()
    for name, error, count in rows:
        failures[(name.removesuffix(FAILED), error)] += count
    return dict(failures)


def locust(out: Path, host: str, users: Sequence[str], *, seconds: float | None = None,
           count: int = 1, stages: Sequence[Stage] = (), env: Mapping[str, str] | None = None,
           name: str = "locust") -> LocustRun:
    """Run the user classes `users` at `host`: `count` users for `seconds`, or the `Stages`
    shape over `stages`. Its CSV, HTML report and log land in `out/<name>*`."""
    out.mkdir(parents=True, exist_ok=True)
    prefix = out / name
    argv = [str(LOCUST), "-f", str(LOCUSTFILE), "--headless", "--host", host,
            "--csv", str(prefix), "--json-file", str(prefix), "--html", f"{prefix}.html",
            "--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0",
            "--stop-timeout", "10"]
    extra = {"TMR_FAILURES_FILE": f"{prefix}_failures.json", **FAMILY_INPUTS}
    if stages:
        extra["TMR_STAGES"] = json.dumps([list(s) for s in stages])
    else:
        argv += ["--users", str(count), "--spawn-rate", str(count),
                 "--run-time", f"{math.ceil(seconds or 0)}s"]
    budget = (sum(s[0] for s in stages) if stages else seconds or 0) + 120
    with open(f"{prefix}.log", "w") as log:
        subprocess.run([*argv, *users], env={**os.environ, **extra, **(env or {})}, check=True,
                       stdout=log, stderr=subprocess.STDOUT, timeout=budget)
    return LocustRun(read_stats(json.loads(Path(f"{prefix}.json").read_text())),
                     read_failures(json.loads(Path(f"{prefix}_failures.json").read_text())), out)


def load_point(concurrency: int, seconds: float, stat: Stat,
               errors: Mapping[str, int]) -> LoadPoint:
    """A closed-loop point of one Locust stat: served requests over the run's seconds."""
    return LoadPoint(concurrency, seconds, stat.served, stat.failures, stat.served / seconds,
                     stat.p50_ms, stat.p95_ms, stat.p99_ms, dict(errors))


def closed_loop_point(out: Path, host: str, concurrency: int, seconds: float,
                      env: Mapping[str, str] | None = None, name: str = "") -> LoadPoint:
    """`concurrency` ClosedLoop users for `seconds`: one LoadPoint."""
    run = locust(out, host, ["ClosedLoop"], seconds=seconds, count=concurrency, env=env,
                 name=name or f"c{concurrency}")
    errors: Counter[str] = Counter()
    for (_, error), n in run.failures.items():
        errors[error] += n
    return load_point(concurrency, seconds, run.total, errors)


def capacity_rps(out: Path, host: str, model: str, seconds: float = 5.0,
                 in_flight: int = 16) -> float:
    """Served requests/s with `in_flight` closed-loop users at the model's default priority."""
    return closed_loop_point(out, host, in_flight, seconds, {"TMR_MODEL": model},
                             name="capacity").rps

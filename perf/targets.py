"""The benchmark's targets, judged from figures measured in one run (pure functions): the
serving targets against the peers and the in-process rate, the OpenAI route against KServe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perf.stats import at, goodput
from server.goodput import LoadPoint


@dataclass(frozen=True)
class Target:
    """One target: its name, the measured figure, the goal and which side of it passes."""

    name: str
    measured: float | None  # None: not measured (a peer missing, no point in budget)
    goal: float
    at_least: bool = True  # measured >= goal passes; else measured <= goal

    @property
    def met(self) -> bool:
        if self.measured is None:
            return False
        return self.measured >= self.goal if self.at_least else self.measured <= self.goal

    def row(self) -> str:
        figure = "not measured" if self.measured is None else f"{self.measured:.2f}"
        side = ">=" if self.at_least else "<="
        verdict = "met" if self.met else "MISSED"
        return f"| {self.name} | {figure} | {side} {self.goal:g} | {verdict} |"


def allowed_rate(rates: Mapping[int, float], cores: int, budget_ms: float) -> tuple[float, int]:
    """(the best in-process seq/s, its batch) among batches whose time in one process,
    batch / (rate / cores), fits the latency objective; (0, 0) if none does."""
    allowed = [(rate, batch) for batch, rate in rates.items()
               if rate > 0 and batch / (rate / cores) * 1000 <= budget_ms]
    return max(allowed, default=(0.0, 0))


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def goodput_rps(points: Sequence[LoadPoint] | None, budget_ms: float) -> float | None:
    best = goodput(points, budget_ms) if points else None
    return best.rps if best else None


def serving_targets(servers: Mapping[str, Sequence[LoadPoint]], in_process: float,
                    budget_ms: float, subject: str = "embed") -> list[Target]:
    """The issue's targets for `subject` (by default `embed`) against the peers (keys:
    embed, infinity, batcher, naive; a missing peer gives an unmeasured target)."""
    embed = servers[subject]
    ours = goodput_rps(embed, budget_ms)
    c1, naive_c1, c16 = at(embed, 1), at(servers.get("naive", []), 1), at(embed, 16)
    return [
        Target("goodput vs infinity-emb", ratio(ours, goodput_rps(servers.get("infinity"),
                                                                  budget_ms)), 1.5),
        Target("goodput vs the seeds' batcher", ratio(ours, goodput_rps(
            servers.get("batcher"), budget_ms)), 1.5),
        Target("p50 at c1 vs naive FastAPI's", ratio(c1.p50_ms if c1 else None,
                                                     naive_c1.p50_ms if naive_c1 else None),
               1.0, at_least=False),
        Target("p99/p50 at c16", ratio(c16.p99_ms if c16 else None,
                                       c16.p50_ms if c16 else None), 1.5, at_least=False),
        Target("goodput vs in-process at the allowed batches", ratio(ours, in_process), 0.7),
    ]


def route_targets(openai_vs_kserve: Mapping[str, float] | None) -> list[Target]:
    """The OpenAI route at c16 against the KServe route (ratios from perf.openai_route)."""
    r = openai_vs_kserve or {}
    return [Target("OpenAI route throughput vs KServe (c16)", r.get("throughput"), 0.9),
            Target("OpenAI route p99 vs KServe (c16)", r.get("p99"), 1.1, at_least=False)]


def table(targets: Sequence[Target]) -> str:
    rows = ["| target | measured | goal | |", "| --- | ---: | ---: | --- |"]
    return "\n".join(rows + [t.row() for t in targets])

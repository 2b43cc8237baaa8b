"""Overload, then recovery: how soon `embed` serves normal traffic again, and whether its
ladder flaps under a saw-tooth load.

Clients here follow Triton's documentation: they send only the standard request
`priority` (tritonclient's `priority=`), nothing project-specific.

    recover    an overload over HTTP (32 closed-loop clients at priority 1 plus 128 at
               priority 2) for `--overload-s`, then, `--gap-s` after it ended, a normal
               load (4 closed-loop clients, default priority) for `--normal-s`. Reports
               each phase per priority: served, failures by status and error.
    sawtooth   open loop, alternating `--period-s` at 3x the measured capacity and
               `--period-s` at 0.5x, for `--sawtooth-s`; the level of every `embed`
               instance is sampled every 0.25 s. Reports level changes per minute
               against load changes per minute.

    .venv/bin/python -m perf.recovery [--scenario recover|sawtooth|all] [--url HOST:PORT
        --metrics-url URL]        # without --url it starts a server of its own
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import pairwise

from perf import harness
from perf.load import (
    LevelSampler,
    capacity_rps,
    closed_loop,
    open_loop,
    short_texts,
    standard_sender,
)
from perf.stats import Outcome, PrioritySummary, by_priority
from perf.subjects import text_model

OVERLOAD = ((1, 32), (2, 128))  # (priority, closed-loop clients)
NORMAL = ((0, 4),)  # priority 0: the model's default level

FRONT = text_model().front  # the repository's text-embedding front model


async def standard_closed_loop(url: str, groups: Sequence[tuple[int, int]], seconds: float,
                               tag: str) -> list[Outcome]:
    """The closed loop over HTTP with only Triton's standard `priority`; `groups` of
    (priority, clients)."""
    async with standard_sender(url, FRONT, conn_limit=sum(n for _, n in groups) + 8) as send:
        return await closed_loop(send, groups, seconds, short_texts(tag))


def level_changes(samples: Sequence[tuple[float, float]]) -> int:
    """How many times the sampled level changed."""
    values = [v for _, v in samples]
    return sum(1 for a, b in pairwise(values) if a != b)


def sawtooth_rate(capacity: float, period_s: float, high: float = 3.0,
                  low: float = 0.5) -> Callable[[float], float]:
    """`high` x capacity for `period_s`, then `low` x capacity for `period_s`, repeating."""
    return lambda t: capacity * (high if int(t // period_s) % 2 == 0 else low)


def run_recover(url: str, overload_s: float, gap_s: float,
                normal_s: float) -> list[PrioritySummary]:
    overload = asyncio.run(standard_closed_loop(url, OVERLOAD, overload_s, "overload"))
    time.sleep(gap_s)
    normal = asyncio.run(standard_closed_loop(url, NORMAL, normal_s, "normal"))
    return (by_priority(overload, overload_s, "overload")
            + by_priority(normal, normal_s, f"normal, {gap_s:g} s after"))


async def sawtooth_load(url: str, rate: Callable[[float], float],
                        seconds: float) -> list[Outcome]:
    async with standard_sender(url, FRONT) as send:
        return await open_loop(send, rate, seconds, texts=short_texts("sawtooth"))


def run_sawtooth(url: str, metrics_url: str, period_s: float, seconds: float) -> dict:
    capacity = asyncio.run(capacity_rps(url, protocol="http"))
    with LevelSampler(metrics_url) as sampler:
        outcomes = asyncio.run(sawtooth_load(url, sawtooth_rate(capacity, period_s), seconds))
    minutes = seconds / 60
    return {"capacity_rps": capacity, "period_s": period_s, "seconds": seconds,
            "load_changes_per_min": (seconds / period_s - 1) / minutes,
            "level_changes_per_min": level_changes(sampler.samples) / minutes,
            "max_level": max((v for _, v in sampler.samples), default=0.0),
            "levels": sampler.samples,
            "summary": [asdict(s) for s in by_priority(outcomes, seconds)]}


def markdown(recover: list[PrioritySummary] | None, sawtooth: dict | None) -> str:
    lines = []
    if recover:
        lines += ["| phase | priority | requests | served | failures (status error) | p99 ms |",
                  "| --- | ---: | ---: | ---: | --- | ---: |"]
        lines += [f"| {r.phase} | {r.priority} | {r.requests} | {r.served} "
                  f"({r.served / max(r.requests, 1):.1%}) | "
                  f"{', '.join(f'{k}: {v}' for k, v in sorted(r.failures.items())) or '-'} | "
                  f"{r.p99_ms:.0f} |" for r in recover]
    if sawtooth:
        lines += ["", f"Saw-tooth: {sawtooth['period_s']:g} s at 3x / {sawtooth['period_s']:g} s"
                  f" at 0.5x of {sawtooth['capacity_rps']:.0f} req/s for "
                  f"{sawtooth['seconds']:g} s: load changes {sawtooth['load_changes_per_min']:.0f}"
                  f"/min, level changes {sawtooth['level_changes_per_min']:.0f}/min, highest "
                  f"level {sawtooth['max_level']:.0f}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["recover", "sawtooth", "all"], default="all")
    parser.add_argument("--url", default=None, help="a running server's HTTP host:port")
    parser.add_argument("--metrics-url", default=None)
    parser.add_argument("--overload-s", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=1.0)
    parser.add_argument("--normal-s", type=float, default=4.0)
    parser.add_argument("--period-s", type=float, default=2.0)
    parser.add_argument("--sawtooth-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    out = harness.run_dir("recovery")
    with contextlib.ExitStack() as stack:
        url, metrics_url = args.url, args.metrics_url or ""
        if url is None:
            server = stack.enter_context(harness.served_copy(out / "tritonserver.log"))
            url, metrics_url = server.http_url, args.metrics_url or server.metrics_url
        recover = (run_recover(url, args.overload_s, args.gap_s, args.normal_s)
                   if args.scenario in ("recover", "all") else None)
        sawtooth = (run_sawtooth(url, metrics_url, args.period_s, args.sawtooth_s)
                    if args.scenario in ("sawtooth", "all") else None)
    harness.write_report(out, "recovery", markdown(recover, sawtooth),
                         {"recover": [asdict(r) for r in recover or []], "sawtooth": sawtooth})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

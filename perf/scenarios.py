"""Scenario traffic on the text model's front that perf_analyzer cannot send (one priority a
run, and it stops at the first rejection) and Locust's paced users cannot keep arriving at
(perf/README.md): overload, recovery after it, and a saw-tooth.

    overload   capacity (closed loop, 16 in flight at priority 1), then 0.7x, 2x and 10x
               of it open loop for `--seconds` each, 20% priority 1, through the SDK (gRPC
               on a server of its own); per priority: offered rate, goodput, p50/p99,
               rejections by reason; the router's own refusals (docs/degradation.md).
    recover    an overload over HTTP (32 closed-loop clients at priority 1 plus 128 at
               priority 2) for `--overload-s`, then, `--gap-s` after it ended, a normal
               load (4 closed-loop clients, default priority) for `--normal-s`; each phase
               per priority: served, failures by status and error.
    sawtooth   open loop, alternating `--period-s` at 3x the measured capacity and
               `--period-s` at 0.5x, for `--sawtooth-s`; level changes per minute against
               load changes per minute.

The open-loop scenarios sample the router's degradation level every 0.25 s and draw it
with the latency over time (`scenarios.png`). `recover` and `sawtooth` send only Triton's
standard request `priority` (tritonclient's `priority=`), nothing project-specific.

    .venv/bin/python -m perf.scenarios [--scenario overload|recover|sawtooth|all]
        [--url HOST:PORT --metrics-url URL]    # without --url it starts a server of its own
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

from perf import harness
from perf.load import LevelSampler, Rate, capacity_rps, open_loop, sdk_sender, short_texts
from perf.stamp import save_figure
from perf.stats import PrioritySummary, by_priority
from perf.subjects import text_model
from server.goodput import Outcome, closed_loop, standard_sender
from server.prometheus import metric_value

OVERLOAD_MULTIPLES = {"normal": 0.7, "2x": 2.0, "10x": 10.0}  # x measured capacity
OVERLOAD = ((1, 32), (2, 128))  # (priority, closed-loop clients)
NORMAL = ((0, 4),)  # priority 0: the model's default level
SCENARIOS = ("overload", "recover", "sawtooth")

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


def open_run(sender: Callable[[], contextlib.AbstractAsyncContextManager], metrics_url: str,
             rate: Rate, seconds: float, tag: str) -> dict:
    """Requests arriving at `rate` through `sender()`, 20% at priority 1, with the level
    sampled beside them and the router's own refusals counted."""
    async def load() -> list[Outcome]:
        async with sender() as send:
            return await open_loop(send, rate, seconds, texts=short_texts(tag))

    refused = metric_value(metrics_url, "tmr_rejections_total")
    began = time.monotonic()
    with LevelSampler(metrics_url) as sampler:
        outcomes = asyncio.run(load())
    return {"began": began, "outcomes": outcomes, "levels": sampler.samples,
            "summary": by_priority(outcomes, seconds),
            "router_refusals": metric_value(metrics_url, "tmr_rejections_total") - refused}


def run_overload(url: str, protocol: str, metrics_url: str, seconds: float) -> dict:
    capacity = asyncio.run(capacity_rps(url, protocol=protocol))
    return {"capacity_rps": capacity, "runs": {
        name: open_run(lambda: sdk_sender(url, protocol=protocol), metrics_url,
                       multiple * capacity, seconds, f"overload {name}")
        for name, multiple in OVERLOAD_MULTIPLES.items()}}


def run_recover(url: str, overload_s: float, gap_s: float,
                normal_s: float) -> list[PrioritySummary]:
    overload = asyncio.run(standard_closed_loop(url, OVERLOAD, overload_s, "overload"))
    time.sleep(gap_s)
    normal = asyncio.run(standard_closed_loop(url, NORMAL, normal_s, "normal"))
    return (by_priority(overload, overload_s, "overload")
            + by_priority(normal, normal_s, f"normal, {gap_s:g} s after"))


def run_sawtooth(url: str, metrics_url: str, period_s: float, seconds: float) -> dict:
    capacity = asyncio.run(capacity_rps(url, protocol="http"))
    run = open_run(lambda: standard_sender(url, FRONT), metrics_url,
                   sawtooth_rate(capacity, period_s), seconds, "sawtooth")
    minutes = seconds / 60
    return {"capacity_rps": capacity, "period_s": period_s, "seconds": seconds,
            "load_changes_per_min": (seconds / period_s - 1) / minutes,
            "level_changes_per_min": level_changes(run["levels"]) / minutes,
            "max_level": max((v for _, v in run["levels"]), default=0.0),
            "runs": {"sawtooth": run}}


def plot(runs: dict[str, dict], path: Path) -> None:
    """Per open-loop run: each priority's latencies and the level over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        for priority, color in ((1, "tab:blue"), (2, "tab:orange")):
            ok = [(o.sent - run["began"], o.latency_ms) for o in run["outcomes"]
                  if o.priority == priority and o.error is None]
            if ok:
                ax.scatter(*zip(*ok), s=2, color=color, label=f"priority {priority} latency")
        offered = sum(row.offered_rps for row in run["summary"])
        ax.set(ylabel="latency ms", title=f"{name}: {offered:.0f} req/s offered")
        twin = ax.twinx()
        if run["levels"]:
            twin.step([t - run["began"] for t, _ in run["levels"]],
                      [v for _, v in run["levels"]], color="tab:red", where="post")
        twin.set(ylim=(-0.2, 5.2), ylabel="level")
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("seconds since the run began")
    fig.tight_layout()
    save_figure(fig, path, 110)


def markdown(overload: dict | None, recover: list[PrioritySummary] | None,
             sawtooth: dict | None) -> str:
    lines = []
    if overload:
        lines += [f"Capacity (closed loop, 16 in flight): **{overload['capacity_rps']:.0f} "
                  "req/s**", "", "| scenario | priority | offered/s | goodput/s | served | "
                  "p50 ms | p99 ms | rejections | max level |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
        for name, run in overload["runs"].items():
            top = max((v for _, v in run["levels"]), default=0)
            lines += [f"| {name} | {r.priority} | {r.offered_rps:.0f} | {r.goodput_rps:.0f} | "
                      f"{r.success_ratio:.1%} | {r.p50_ms:.0f} | {r.p99_ms:.0f} | "
                      f"{failures(r, ' ')} | {top:.0f} |" for r in run["summary"]]
        lines += ["", "Router refusals (`tmr_rejections_total`): " + ", ".join(
            f"{name} {run['router_refusals']:.0f}" for name, run in overload["runs"].items()),
            ""]
    if recover:
        lines += ["| phase | priority | requests | served | failures (status error) | p99 ms |",
                  "| --- | ---: | ---: | ---: | --- | ---: |"]
        lines += [f"| {r.phase} | {r.priority} | {r.requests} | {r.served} "
                  f"({r.served / max(r.requests, 1):.1%}) | {failures(r, ': ')} | "
                  f"{r.p99_ms:.0f} |" for r in recover]
    if sawtooth:
        s = sawtooth
        lines += ["", f"Saw-tooth: {s['period_s']:g} s at 3x / {s['period_s']:g} s at 0.5x of "
                  f"{s['capacity_rps']:.0f} req/s for {s['seconds']:g} s: load changes "
                  f"{s['load_changes_per_min']:.0f}/min, level changes "
                  f"{s['level_changes_per_min']:.0f}/min, highest level {s['max_level']:.0f}."]
    return "\n".join(lines)


def failures(row: PrioritySummary, sep: str) -> str:
    return ", ".join(f"{k}{sep}{v}" for k, v in sorted(row.failures.items())) or "-"


def plain(result: dict | None) -> dict | None:
    """A scenario's result as JSON holds it: its runs without their outcomes."""
    if not result:
        return result
    runs = {name: {"summary": [asdict(s) for s in run["summary"]], "levels": run["levels"],
                   "router_refusals": run["router_refusals"]}
            for name, run in result["runs"].items()}
    return {**result, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--url", default=None, help="a running server's HTTP host:port")
    parser.add_argument("--metrics-url", default=None)
    parser.add_argument("--seconds", type=float, default=10.0, help="each overload run")
    parser.add_argument("--overload-s", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=1.0)
    parser.add_argument("--normal-s", type=float, default=4.0)
    parser.add_argument("--period-s", type=float, default=2.0)
    parser.add_argument("--sawtooth-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    chosen = SCENARIOS if args.scenario == "all" else (args.scenario,)
    out = harness.run_dir("scenarios")
    with contextlib.ExitStack() as stack:
        url, metrics_url = args.url, args.metrics_url or ""
        sdk_target = (url, "http")  # the overload goes through the SDK: gRPC when it can
        if url is None:
            server = stack.enter_context(harness.served_copy(out / "tritonserver.log"))
            url, metrics_url = server.http_url, args.metrics_url or server.metrics_url
            sdk_target = (server.grpc_url, "grpc")
        overload = (run_overload(*sdk_target, metrics_url, args.seconds)
                    if "overload" in chosen else None)
        recover = (run_recover(url, args.overload_s, args.gap_s, args.normal_s)
                   if "recover" in chosen else None)
        sawtooth = (run_sawtooth(url, metrics_url, args.period_s, args.sawtooth_s)
                    if "sawtooth" in chosen else None)
    runs = {**(overload or {}).get("runs", {}), **(sawtooth or {}).get("runs", {})}
    if runs:
        plot(runs, out / "scenarios.png")
    harness.write_report(out, "scenarios", markdown(overload, recover, sawtooth), {
        "overload": plain(overload), "recover": [asdict(r) for r in recover or []],
        "sawtooth": plain(sawtooth)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

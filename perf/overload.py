"""Overload scenarios for `embed`: normal, 2x and 10x capacity, 20% high / 80% low priority.

Starts its own server on free ports, measures capacity (closed loop, 16 in flight), then
offers each multiple of it open-loop while sampling the router's degradation level.
Per priority it reports offered rate, goodput, p50/p99 and rejections by reason, and it
draws the level and the latency over time (PNG). perf_analyzer cannot do this: it sends
every request at one priority and aborts on the first rejection.

    .venv/bin/python -m perf.overload [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from client.prometheus import metric_value
from perf import harness
from perf.load import LevelSampler, capacity_rps, sdk_open_loop
from perf.stats import by_priority
from server.launcher import TritonServer

SCENARIOS = {"normal": 0.7, "2x": 2.0, "10x": 10.0}


def run_scenario(server: TritonServer, rate: float, seconds: float) -> dict:
    refused = metric_value(server.metrics_url, "tmr_rejections_total")
    began = time.monotonic()
    with LevelSampler(server.metrics_url) as sampler:
        outcomes = asyncio.run(sdk_open_loop(server.grpc_url, rate, seconds, seed=int(rate)))
    return {
        "rate": rate, "began": began, "outcomes": outcomes, "levels": sampler.samples,
        "summary": by_priority(outcomes, seconds),
        "router_refusals": metric_value(server.metrics_url, "tmr_rejections_total") - refused,
    }


def plot(results: dict[str, dict], path: Path) -> None:
    fig, axes = plt.subplots(len(results), 1, figsize=(9, 3.2 * len(results)), sharex=True)
    for ax, (name, res) in zip(axes, results.items()):
        began = res["began"]
        for priority, color in ((1, "tab:blue"), (2, "tab:orange")):
            ok = [(o.sent - began, o.latency_ms) for o in res["outcomes"]
                  if o.priority == priority and o.error is None]
            if ok:
                ax.scatter(*zip(*ok), s=2, color=color, label=f"priority {priority} latency")
        ax.set_ylabel("latency ms")
        ax.set_title(f"{name}: {res['rate']:.0f} req/s offered")
        twin = ax.twinx()
        if res["levels"]:
            twin.step([t - began for t, _ in res["levels"]], [v for _, v in res["levels"]],
                      color="tab:red", where="post", label="degradation level")
        twin.set_ylim(-0.2, 5.2)
        twin.set_ylabel("level")
        ax.legend(loc="upper left", fontsize=7)
    axes[-1].set_xlabel("seconds since the scenario began")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(capacity: float, results: dict[str, dict]) -> str:
    lines = [f"Capacity (closed loop, 16 in flight): **{capacity:.0f} req/s**", "",
             "| scenario | priority | offered/s | goodput/s | served | p50 ms | p99 ms | "
             "rejections | max level |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for name, res in results.items():
        top = max((v for _, v in res["levels"]), default=0)
        for row in res["summary"]:
            errors = ", ".join(f"{k} {v}" for k, v in sorted(row.failures.items())) or "-"
            lines.append(f"| {name} | {row.priority} | {row.offered_rps:.0f} | "
                         f"{row.goodput_rps:.0f} | {row.success_ratio:.1%} | {row.p50_ms:.0f} | "
                         f"{row.p99_ms:.0f} | {errors} | {top:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    out = harness.run_dir("overload")
    with harness.served_copy(out / "tritonserver.log") as server:
        capacity = asyncio.run(capacity_rps(server.grpc_url))
        results = {name: run_scenario(server, mult * capacity, args.seconds)
                   for name, mult in SCENARIOS.items()}
    plot(results, out / "overload.png")
    harness.write_report(out, "overload", markdown(capacity, results), {
        "capacity_rps": capacity,
        "scenarios": {n: {"rate": r["rate"], "summary": [asdict(s) for s in r["summary"]],
                          "levels": r["levels"], "router_refusals": r["router_refusals"]}
                      for n, r in results.items()}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

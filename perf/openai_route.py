"""What the OpenAI-compatible route costs against the KServe route, both through the
front door, on the same server, in the same run.

    python -m perf.openai_route [--concurrency 1 16] [--seconds 10] [--rounds 3]

A Triton server with the repository and a front door start on free ports. Per
concurrency level, closed-loop clients (perf/peers/load.py: one new text per request,
every answer checked) drive `POST /v2/models/<front>/infer` (KServe JSON) and
`POST /v1/embeddings` (OpenAI JSON, floats) in alternation, `--rounds` times each, so
both see the same machine. Each route's figure is the median over its rounds; the
ratios are OpenAI / KServe. The issue's target at c16: throughput >= 0.9x, p99 <= 1.1x.
Results: perf/results/openai_route-<timestamp>/openai_route.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from core.paths import DEFAULT_REPOSITORY
from core.ports import free_ports
from perf import harness
from perf.peers.load import Endpoint, closed_loop_point, openai_endpoint, triton_endpoint
from perf.subjects import text_model
from server.goodput import LoadPoint

console = Console(stderr=True)
TARGET = {"min_throughput_ratio": 0.9, "max_p99_ratio": 1.1, "concurrency": 16}


@dataclass(frozen=True)
class RouteFigures:
    """One route at one concurrency: the median over rounds, and every round."""

    route: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rounds: list[LoadPoint]


def median_figures(route: str, points: Sequence[LoadPoint]) -> RouteFigures:
    return RouteFigures(route, points[0].concurrency,
                        statistics.median(p.rps for p in points),
                        statistics.median(p.p50_ms for p in points),
                        statistics.median(p.p99_ms for p in points),
                        sum(p.errors for p in points), list(points))


def compare(routes: dict[str, Endpoint], levels: Sequence[int], seconds: float,
            rounds: int) -> list[RouteFigures]:
    """Per level, every route `rounds` times in alternation; medians per route."""
    figures = []
    for level in levels:
        points: dict[str, list[LoadPoint]] = {name: [] for name in routes}
        for r in range(rounds):
            for name, endpoint in routes.items():
                console.log(f"  c{level} round {r + 1}/{rounds}: {name}")
                points[name].append(asyncio.run(closed_loop_point(endpoint, level, seconds)))
        figures += [median_figures(name, p) for name, p in points.items()]
    return figures


def ratios(figures: Sequence[RouteFigures], route: str, baseline: str) -> dict[int, dict]:
    """Per concurrency: route / baseline throughput, p50 and p99."""
    by = {(f.route, f.concurrency): f for f in figures}
    out = {}
    for (name, level), f in by.items():
        if name == route and (baseline, level) in by:
            b = by[(baseline, level)]
            out[level] = {"throughput": f.rps / b.rps, "p50": f.p50_ms / b.p50_ms,
                          "p99": f.p99_ms / b.p99_ms}
    return out


def verdict(r: dict[int, dict]) -> str:
    level = TARGET["concurrency"]
    if level not in r:
        return f"no c{level} point: target not measured"
    ok = (r[level]["throughput"] >= TARGET["min_throughput_ratio"]
          and r[level]["p99"] <= TARGET["max_p99_ratio"])
    return (f"c{level}: throughput {r[level]['throughput']:.2f}x (target >= "
            f"{TARGET['min_throughput_ratio']}), p99 {r[level]['p99']:.2f}x (target <= "
            f"{TARGET['max_p99_ratio']}): {'MET' if ok else 'NOT MET'}")


def markdown(figures: Sequence[RouteFigures], r: dict[int, dict], seconds: float,
             rounds: int) -> str:
    lines = [f"Closed loop, one text a request, {seconds:g} s x {rounds} rounds per route "
             "and level, alternating; medians.", "",
             "| route | c | requests/s | p50 ms | p99 ms | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {f.route} | {f.concurrency} | {f.rps:.0f} | {f.p50_ms:.1f} | "
              f"{f.p99_ms:.1f} | {f.errors} |" for f in figures]
    lines += ["", "| c | OpenAI / KServe throughput | p50 | p99 |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {c} | {v['throughput']:.2f}x | {v['p50']:.2f}x | {v['p99']:.2f}x |"
              for c, v in sorted(r.items())]
    return "\n".join([*lines, "", verdict(r)])


def run(levels: Sequence[int], seconds: float, rounds: int,
        repository: Path = DEFAULT_REPOSITORY) -> dict:
    """Start Triton and the front door, measure, stop; the result as a dict."""
    from server.front_door import FrontDoor
    from server.settings import FrontDoorSettings

    model = text_model(repository)
    key = "bench-" + "k" * 16
    log = Path(tempfile.mkdtemp()) / "tritonserver.log"
    with harness.server(repository, log) as triton:
        ports = triton.opts.ports
        http_port, grpc_port = free_ports(2)
        door_settings = FrontDoorSettings(http_port=http_port, grpc_port=grpc_port,
                                          rate_per_minute=10_000_000)
        with FrontDoor(f"127.0.0.1:{ports.http}", f"127.0.0.1:{ports.grpc}", door_settings,
                       {"bench": key}, repository=repository) as door:
            base = f"http://{door.http_url}"
            routes = {
                "KServe /v2/models/*/infer": triton_endpoint(base, model.front,
                                                              {"x-api-key": key}),
                "OpenAI /v1/embeddings": openai_endpoint(
                    f"{base}/v1", model.base, headers={"Authorization": f"Bearer {key}"}),
            }
            figures = compare(routes, levels, seconds, rounds)
    r = ratios(figures, "OpenAI /v1/embeddings", "KServe /v2/models/*/infer")
    return {"model": model.base, "seconds": seconds, "rounds": rounds, "target": TARGET,
            "figures": [asdict(f) for f in figures], "ratios": r, "verdict": verdict(r),
            "markdown": markdown(figures, r, seconds, rounds)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.openai_route", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    result = run(args.concurrency, args.seconds, args.rounds)
    harness.write_report(harness.run_dir("openai_route"), "openai_route", result["markdown"],
                         result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

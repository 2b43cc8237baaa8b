"""What the OpenAI-compatible route costs against the KServe route, both through the
front door, on the same server, in the same run.

    python -m perf.openai_route [--concurrency 1 16] [--seconds 10] [--rounds 3]

Per concurrency, Locust's closed loop drives both routes in alternation, `--rounds` times;
medians per route, the ratios OpenAI / KServe and the target (`TARGET`). Results:
perf/results/openai_route-<timestamp>/.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from core.paths import DEFAULT_REPOSITORY
from core.ports import free_ports
from perf.locust_run import closed_loop_point
from perf.subjects import text_model
from server.front_door import FrontDoor
from server.goodput import LoadPoint
from server.served_copy import free_port_server
from server.settings import FrontDoorSettings
from server.stamp import run_dir, write_report

console = Console(stderr=True)
TARGET = {"min_throughput_ratio": 0.9, "max_p99_ratio": 1.1, "concurrency": 16}
KSERVE, OPENAI = "KServe /v2/models/*/infer", "OpenAI /v1/embeddings"


def figures(route: str, points: Sequence[LoadPoint]) -> dict:
    """One route at one level: the medians over its rounds, its errors, every round."""
    return {"route": route, "concurrency": points[0].concurrency,
            **{k: statistics.median(getattr(p, k) for p in points)
               for k in ("rps", "p50_ms", "p99_ms")},
            "errors": sum(p.errors for p in points), "rounds": [asdict(p) for p in points]}


def compare(out: Path, host: str, routes: dict[str, dict[str, str]], levels: Sequence[int],
            seconds: int, rounds: int) -> list[dict]:
    """Per level, each route (perf/locustfile.py settings) `rounds` times in turn; medians."""
    rows = []
    for level in levels:
        points: dict[str, list[LoadPoint]] = {name: [] for name in routes}
        for r in range(1, rounds + 1):
            for i, (name, env) in enumerate(routes.items()):
                console.log(f"  c{level} round {r}/{rounds}: {name}")
                points[name].append(closed_loop_point(out, host, level, seconds, env,
                                                      f"route{i}-c{level}-r{r}"))
        rows += [figures(name, p) for name, p in points.items()]
    return rows


def ratios(rows: Sequence[dict]) -> dict[int, dict]:
    """Per concurrency: OpenAI / KServe throughput, p50 and p99."""
    by = {(f["route"], f["concurrency"]): f for f in rows}
    return {c: {"throughput": f["rps"] / b["rps"], "p50": f["p50_ms"] / b["p50_ms"],
                "p99": f["p99_ms"] / b["p99_ms"]}
            for (name, c), f in by.items() if name == OPENAI and (b := by.get((KSERVE, c)))}


def verdict(r: dict[int, dict]) -> str:
    level, low, high = (TARGET[k] for k in ("concurrency", "min_throughput_ratio",
                                            "max_p99_ratio"))
    if level not in r:
        return f"no c{level} point: target not measured"
    got = r[level]
    ok = got["throughput"] >= low and got["p99"] <= high
    return (f"c{level}: throughput {got['throughput']:.2f}x (target >= {low}), p99 "
            f"{got['p99']:.2f}x (target <= {high}): {'MET' if ok else 'NOT MET'}")


def markdown(rows: Sequence[dict], r: dict[int, dict], seconds: float, rounds: int) -> str:
    lines = [f"Closed loop, one text a request, {seconds:g} s x {rounds} rounds per route "
             "and level, alternating; medians.", "",
             "| route | c | requests/s | p50 ms | p99 ms | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {f['route']} | {f['concurrency']} | {f['rps']:.0f} | {f['p50_ms']:.1f} | "
              f"{f['p99_ms']:.1f} | {f['errors']} |" for f in rows]
    lines += ["", "| c | OpenAI / KServe throughput | p50 | p99 |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {c} | {v['throughput']:.2f}x | {v['p50']:.2f}x | {v['p99']:.2f}x |"
              for c, v in sorted(r.items())]
    return "\n".join([*lines, "", verdict(r)])


def run(levels: Sequence[int], seconds: int, rounds: int, out: Path,
        repository: Path = DEFAULT_REPOSITORY) -> dict:
    """Start Triton and the front door, measure, stop; the result as a dict (the server's
    log in `out`, Locust's reports in `out/locust`)."""
    model, key = text_model(repository), "bench-" + "k" * 16
    out.mkdir(parents=True, exist_ok=True)
    routes = {KSERVE: {"TMR_ENDPOINT": "kserve", "TMR_MODEL": model.front,
                       "TMR_HEADERS": json.dumps({"x-api-key": key})},
              OPENAI: {"TMR_ENDPOINT": "openai", "TMR_MODEL": model.base,
                       "TMR_HEADERS": json.dumps({"Authorization": f"Bearer {key}"})}}
    with free_port_server(repository, out / "tritonserver.log") as triton:
        ports, (http_port, grpc_port) = triton.opts.ports, free_ports(2)
        settings = FrontDoorSettings(http_port=http_port, grpc_port=grpc_port,
                                     rate_per_minute=10_000_000)
        with FrontDoor(f"127.0.0.1:{ports.http}", f"127.0.0.1:{ports.grpc}", settings,
                       {"bench": key}, repository=repository) as door:
            rows = compare(out / "locust", f"http://{door.http_url}", routes, levels, seconds,
                           rounds)
    r = ratios(rows)
    return {"model": model.base, "seconds": seconds, "rounds": rounds, "target": TARGET,
            "figures": rows, "ratios": r, "verdict": verdict(r),
            "markdown": markdown(rows, r, seconds, rounds)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.openai_route", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    out = run_dir("openai_route")
    result = run(args.concurrency, args.seconds, args.rounds, out)
    print(write_report(out, "openai_route", result["markdown"], result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Scenario traffic on the text front that perf_analyzer cannot send: Locust users of
perf/locustfile.py over KServe HTTP JSON, with only Triton's standard `priority`.

    overload   capacity (16 closed-loop users), then 0.7x, 2x and 10x of it open loop,
               20% priority 1, `--seconds` each.
    recover    32 closed-loop users at priority 1 and 128 at priority 2 for `--overload-s`,
               then 4 at the default priority for `--normal-s`, `--gap-s` (+ ~1 s) later.
    sawtooth   3x and 0.5x capacity in turn, `--period-s` each, for `--sawtooth-s`.
    priority   priority 1 texts (15% of capacity) beside 16 bulk clients at priority 2,
               priority 1 by each `--p1` (lane, door: the front door, sdk, front).

Per phase and priority: offered rate, goodput, p50/p99, failures, the highest degradation
level and the router's refusals (sampled every 0.25 s); `scenarios.png`.

    .venv/bin/python -m perf.scenarios [--scenario overload|recover|sawtooth|priority|all]
        [--url HOST:PORT --metrics-url URL]    # without --url it starts a server of its own
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import threading
import time
from bisect import bisect
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

from tmr_client.contract import lane_name

from core.ports import free_ports
from perf.locust_run import FAILED, LocustRun, capacity_rps, locust
from perf.subjects import text_model
from server.front_door import FrontDoor
from server.launcher import sdk_path
from server.prometheus import samples
from server.served_copy import served_copy
from server.settings import FrontDoorSettings
from server.stamp import run_dir, save_figure, subplots, write_report

OVERLOAD = {"normal": 0.7, "2x": 2.0, "10x": 10.0}  # x measured capacity
SCENARIOS = ("overload", "recover", "sawtooth", "priority")
P1_ROUTES = ("lane", "door", "sdk", "front")  # to the lane; front: Triton's priority alone
FRONT = text_model().front  # the repository's text-embedding front model
Sample = tuple[float, float, float]  # time.time(), highest level, router refusals so far
Run = Callable[..., dict[str, Any]]  # measured() at one server: (users, name, **kwargs)


def beside(metrics_url: str, work: Callable[[], LocustRun]) -> tuple[LocustRun, list[Sample]]:
    """`work()` with the highest level of FRONT's instances and its router's refusals
    sampled every 0.25 s from before it to after it (wall-clock, as Locust stamps)."""
    got: list[Sample] = []
    done = threading.Event()

    def sample() -> None:
        while not got or not done.wait(0.25):
            now = [s for s in samples(metrics_url) if s.labels.get("model") == FRONT]
            got.append((time.time(), max(
                (s.value for s in now if s.name == "tmr_degradation_level"), default=0.0),
                sum(s.value for s in now if s.name == "tmr_rejections_total")))

    with ThreadPoolExecutor(1) as pool:
        sampler = pool.submit(sample)
        try:
            run = work()
        finally:
            done.set()
    sampler.result()  # a sampling that failed fails the run
    return run, got


def measured(out: Path, host: str, metrics_url: str, users: list[str], name: str,
             **kwargs: Any) -> dict[str, Any]:
    """Locust's `users` at FRONT (`kwargs`: locust_run.locust's), the level sampled beside
    them; a row per stage (closed loop: the run) and priority, answers a second."""
    env, stages = {"TMR_MODEL": FRONT, **kwargs.pop("env", {})}, kwargs.get("stages", [])
    if stages:
        env["TMR_USER_RPS"] = str(max(5.0, max(s[1] for s in stages) / 100))
    phases = stages or [(kwargs["seconds"], 0.0, "")]
    run, levels = beside(metrics_url, lambda: locust(out, host, users, name=name, env=env,
                                                     **kwargs))
    entries = json.loads((run.folder / f"{name}.json").read_text())
    began = min(e["start_time"] for e in entries)
    per_second: dict[str, Counter[int]] = {"served": Counter(), "failed": Counter()}
    for e in entries:
        per_second["failed" if e["name"].endswith(FAILED) else "served"].update(
            {int(t) - int(began): n for t, n in e["num_reqs_per_sec"].items()})
    ends, seconds = list(accumulate(s for s, _, _ in phases)), Counter[str]()
    for s, _, phase in phases:
        seconds[phase] += s
    top, refused = Counter[str](), Counter[str]()
    for before, (t, level, refusals) in pairwise(levels):
        phase = phases[min(bisect(ends, t - began), len(phases) - 1)][2]
        top[phase], refused[phase] = max(top[phase], level), refused[phase] + refusals - before[2]
    rows = [{"phase": phase or name, "priority": int(s.name.rsplit("p", 1)[1].split()[0]),
             "requests": s.requests, "served": s.served, "offered_rps": s.requests / span,
             "goodput_rps": s.served / span, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms,
             "failures": run.failures_of(s.name), "max_level": top[phase],
             "router_refusals": refused[phase]}
            for phase, span in seconds.items()
            for s in sorted(run.matching(f"{phase} p".lstrip()), key=lambda s: s.name)]
    return {"rows": rows, "began": began, "stages": stages,
            "last": max(e["last_request_timestamp"] or 0 for e in entries),
            "levels": [(t - began, v) for t, v, _ in levels], "per_second": per_second}


def recover(run: Run, overload_s: int, gap_s: float, normal_s: int) -> dict[str, Any]:
    overload = run(["HighClosed", "LowClosed"], "recover-overload", seconds=overload_s,
                   count=160, env={"TMR_HIGH_USERS": "32", "TMR_LOW_USERS": "128"})
    time.sleep(gap_s)
    normal = run(["ClosedLoop"], "recover-normal", seconds=normal_s, count=4)
    gap = f"normal, {normal['began'] - overload['last']:.1f} s after"
    return {"rows": [{**r, "phase": "overload"} for r in overload["rows"]]
            + [{**r, "phase": gap} for r in normal["rows"]]}


def sawtooth(run: Run, capacity: float, period_s: float, seconds: float) -> dict[str, Any]:
    stages = [(period_s, capacity * (0.5 if i % 2 else 3.0), "low" if i % 2 else "high")
              for i in range(math.ceil(seconds / period_s))]
    result, minutes = run(["OpenLoop"], "sawtooth", stages=stages), len(stages) * period_s / 60
    values = [v for _, v in result["levels"]]
    return {**result, "summary": f"Saw-tooth: {period_s:g} s at 3x / {period_s:g} s at 0.5x of "
            f"{capacity:.0f} req/s for {minutes * 60:g} s: load changes "
            f"{(len(stages) - 1) / minutes:.0f}/min, level changes "
            f"{sum(a != b for a, b in pairwise(values)) / minutes:.0f}/min, highest level "
            f"{max(values, default=0.0):.0f}."}


def priority(run: Run, capacity: float, seconds: float, route: str,
             p1: dict[str, str]) -> dict[str, Any]:
    """Priority 1 alone, the bulk job alone, both (`p1` routes priority 1 by `route`)."""
    users = max(1, round(0.15 * capacity / 4))  # SingleText: 4 a second a user
    env = {**p1, "TMR_SINGLE_USERS": str(users), "TMR_BULK_USERS": "16"}  # TMR_BULK_ROWS: 16
    rows = [{**r, "phase": f"{route}: {name}"} for users_, name, n in (
        (["SingleText"], "p1 alone", users), (["Bulk"], "bulk alone", 16),
        (["SingleText", "Bulk"], "mix", users + 16))
        for r in run(users_, name, seconds=seconds, count=n, env=env)["rows"]]
    got = {(r["phase"].split(": ")[1], r["priority"]): r for r in rows}
    a, m, b, bm = map(got.get, [("p1 alone", 1), ("mix", 1), ("bulk alone", 2), ("mix", 2)])
    if not (a and m and b and bm and a["p99_ms"] and b["goodput_rps"]):
        return {"rows": rows, "summary": f"Priority via {route}: a phase served nothing, so "
                                         "there is no ratio to give."}
    return {"rows": rows, "summary": (
        f"Priority 1 via {route}: p99 {a['p99_ms']:.0f} ms alone (p50 {a['p50_ms']:.0f}), "
        f"{m['p99_ms']:.0f} ms under the bulk job: {m['p99_ms'] / a['p99_ms']:.2f}x (target "
        f"2x); served {m['served'] / max(m['requests'], 1):.1%} (target 99%); the bulk job "
        f"kept {bm['goodput_rps'] / b['goodput_rps']:.2f} of its rate (target 0.70).")}


def plot(runs: dict[str, dict], path: Path) -> None:
    fig, axes = subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        edges = [0, *accumulate(s[0] for s in run["stages"])]
        ax.stairs([s[1] for s in run["stages"]], edges, color="black", label="offered/s")
        for kind, color in (("served", "tab:green"), ("failed", "tab:gray")):
            if got := sorted(run["per_second"][kind].items()):
                ax.step(*zip(*got), where="post", color=color, label=f"{kind}/s")
        ax.set(ylabel="requests/s", title=name)
        ax.legend(loc="upper left", fontsize=7)
        twin = ax.twinx()
        twin.step(*zip(*run["levels"]), color="tab:red", where="post")
        twin.set(ylim=(-0.2, 5.2), ylabel="level (red)")
    axes[-1, 0].set_xlabel("seconds since the first answer")
    save_figure(fig, path, 110)


def markdown(capacity: float | None, results: dict[str, dict]) -> str:
    """Per scenario, phase and priority a row; the router's refusals; the saw-tooth's line."""
    rows = [{"scenario": name, **r} for name, result in results.items() for r in result["rows"]]
    lines = [f"Capacity (closed loop, 16 users, default priority): **{capacity:.0f} req/s**",
             ""] if capacity else []
    lines += ["| scenario | phase | priority | requests | offered/s | goodput/s | served | "
              "p50 ms | p99 ms | failures | max level |", "| --- | --- |" + " ---: |" * 7
              + " --- | ---: |"]
    for r in rows:
        failures = ", ".join(f"{k}: {v}" for k, v in sorted(r["failures"].items()))
        lines.append(" | ".join(["", r["scenario"], r["phase"], str(r["priority"]),
                                 str(r["requests"]), f"{r['offered_rps']:.0f}",
                                 f"{r['goodput_rps']:.0f}", f"{r['served'] / r['requests']:.1%}",
                                 f"{r['p50_ms']:.0f}", f"{r['p99_ms']:.0f}", failures or "-",
                                 f"{r['max_level']:.0f}", ""]).strip())
    refused = {f"{r['scenario']} {r['phase']}": r["router_refusals"] for r in rows}
    lines += ["", "Router refusals (`tmr_rejections_total`): "
              + ", ".join(f"{phase} {n:.0f}" for phase, n in refused.items())]
    return "\n".join(lines + [f"\n{r['summary']}" for r in results.values() if "summary" in r])


@contextlib.contextmanager
def p1_route(route: str, host: str, grpc: str) -> Iterator[dict]:
    """Locust's environment sending priority 1 to FRONT's lane: named in the URL (lane),
    through a front door (door), by the SDK over gRPC (sdk); or to FRONT itself (front)."""
    if route != "door":
        yield {"TMR_SDK_HOST": grpc, "PYTHONPATH": str(sdk_path())} if route == "sdk" else {
            "TMR_P1_PATH": f"/v2/models/{lane_name(FRONT)}/infer"} if route == "lane" else {}
        return
    key, (http_port, grpc_port) = "bench-" + "k" * 16, free_ports(2)
    settings = FrontDoorSettings(http_port=http_port, grpc_port=grpc_port, rate_per_minute=10**7)
    with FrontDoor(host.removeprefix("http://"), grpc, settings, {"bench": key}) as door:
        yield {"TMR_P1_HOST": f"http://{door.http_url}",
               "TMR_HEADERS": json.dumps({"x-api-key": key})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--url", default=None, help="a running server's HTTP host:port")
    parser.add_argument("--metrics-url", default=None, help="needed with --url")
    parser.add_argument("--grpc-url", default=None, help="its gRPC host:port, for --p1 sdk")
    parser.add_argument("--p1", nargs="+", choices=P1_ROUTES, default=list(P1_ROUTES[:3]))
    for flag, default in (("--seconds", 10.0), ("--overload-s", 20), ("--gap-s", 1.0),
                          ("--normal-s", 4), ("--period-s", 2.0), ("--sawtooth-s", 60.0)):
        parser.add_argument(flag, type=type(default), default=default)  # Locust's -t: whole s
    args = parser.parse_args(argv)
    if args.url and not args.metrics_url:
        parser.error("--url needs --metrics-url: the level and refusals are sampled there")
    if args.url and args.scenario in ("priority", "all") and {"sdk", "door"} & {*args.p1} \
            and not args.grpc_url:
        parser.error("--url with --p1 sdk or door needs --grpc-url")
    chosen = SCENARIOS if args.scenario == "all" else (args.scenario,)
    out, capacity, results = run_dir("scenarios"), None, {}
    with (contextlib.nullcontext() if args.url
          else served_copy(out / "tritonserver.log")) as server:
        host, metrics_url = (f"http://{args.url}", args.metrics_url) if server is None else (
            f"http://{server.http_url}", server.metrics_url)
        run: Run = functools.partial(measured, out, host, metrics_url)
        if {"overload", "sawtooth", "priority"} & set(chosen):
            capacity = capacity_rps(out, host, FRONT, seconds=5)  # Locust's -t: whole s
        if "overload" in chosen:
            results["overload"] = run(["OpenLoop"], "overload", stages=[
                (args.seconds, m * capacity, phase) for phase, m in OVERLOAD.items()])
        if "recover" in chosen:
            results["recover"] = recover(run, args.overload_s, args.gap_s, args.normal_s)
        if "sawtooth" in chosen:
            results["sawtooth"] = sawtooth(run, capacity, args.period_s, args.sawtooth_s)
        for route in args.p1 if "priority" in chosen else ():
            with p1_route(route, host, args.grpc_url or (server and server.grpc_url)) as p1:
                results[f"priority {route}"] = priority(run, capacity, args.seconds, route, p1)
    if runs := {k: v for k, v in results.items() if "levels" in v}:
        plot(runs, out / "scenarios.png")
    print(write_report(out, "scenarios", markdown(capacity, results),
                       {"capacity_rps": capacity, **results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

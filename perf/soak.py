"""Soak: a long steady load, sampled every 30 s, to show there are no leaks and no decay.

A server of its own with the watchdog beside it; its capacity with 16 closed-loop Locust
users; then `--load` x capacity open loop for `--minutes` (the locustfile's `OpenLoop` and
`GrpcOpenLoop`), sampled every `--sample-s`: RSS per model, p50/p99, errors, the watchdog's
reloads, Triton's queue and compute time, the host's cores. `verdict()` checks
docs/reliability.md's targets (perf/README.md).

    make soak                                   # 30 minutes, writes perf/results/soak-*/
    .venv/bin/python -m perf.soak --minutes 2 --sample-s 10    # what CI runs
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from tmr_client.core import DEFAULT_MODEL

from core import cpu_share as host_cpu
from core.paths import DEFAULT_REPOSITORY
from core.process_memory import server_memory
from perf.locust_run import LocustRun, capacity_rps, locust, stat
from server.launcher import TritonServer
from server.prometheus import samples
from server.served_copy import served_copy
from server.stamp import run_dir, save_figure, subplots, write_report
from server.watchdog import Watchdog

NO_SHARE = host_cpu.CpuShare(0.0, 0.0, 0.0, 0.0)
QUEUE, COMPUTE = "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"
SUCCESS, FAILURE = "nv_inference_request_success", "nv_inference_request_failure"
USERS = ["OpenLoop", "GrpcOpenLoop"]  # one of each: see load_env


@dataclass(frozen=True)
class Sample:
    """One sampling point of the soak."""

    t_s: float  # seconds since the load began
    served_rps: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    rss_mb: dict[str, float]  # "tritonserver" and one entry per model's stubs (summed)
    watchdog_reloads: int
    queue_us: float  # Triton's queue time per successful embed request in the window
    compute_us: float
    cpu: host_cpu.CpuShare = NO_SHARE  # who used the host's cores in the window

    @property
    def total_rss_mb(self) -> float:
        return sum(self.rss_mb.values())


def triton_times(metrics_url: str, model: str = DEFAULT_MODEL) -> dict[str, float]:
    totals = dict.fromkeys((QUEUE, COMPUTE, SUCCESS, FAILURE), 0.0)
    for s in samples(metrics_url):
        base = s.name.removesuffix("_total")
        if base in totals and s.labels.get("model") == model:
            totals[base] += s.value
    return totals


class Sampler(threading.Thread):
    """The server's side of `count` windows of `period_s`, from Triton's first answer on:
    Samples whose served_rps is Triton's and whose latencies wait for Locust's (`joined`)."""

    def __init__(self, server: TritonServer, watchdog: Watchdog, period_s: float,
                 count: int) -> None:
        super().__init__(daemon=True)
        self.server, self.watchdog, self.period_s, self.count = server, watchdog, period_s, count
        self.samples: list[Sample] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        url, pid = self.server.metrics_url, self.server.process.pid
        first, deadline = triton_times(url)[SUCCESS], time.monotonic() + 60
        while triton_times(url)[SUCCESS] == first and time.monotonic() < deadline:
            if self.stop_event.wait(0.1):  # Locust starting up
                return
        began = last = time.monotonic()
        before, cpu_before = triton_times(url), host_cpu.read(pid)
        for k in range(1, self.count + 1):
            if self.stop_event.wait(max(0.0, began + k * self.period_s - time.monotonic())):
                return
            now, after, cpu_after = time.monotonic(), triton_times(url), host_cpu.read(pid)
            grew = {name: after[name] - before[name] for name in after}
            per = {name: grew[name] / grew[SUCCESS] if grew[SUCCESS] else math.nan
                   for name in (QUEUE, COMPUTE)}
            p = Sample(round(now - began, 1), grew[SUCCESS] / (now - last), math.nan, math.nan,
                       {}, {name: row.rss_mib for name, row in server_memory(pid).items()},
                       len(self.watchdog.events), per[QUEUE], per[COMPUTE],
                       host_cpu.share(cpu_before, cpu_after))
            self.samples.append(p)
            print(f"  {p.t_s:>6.0f}/{self.count * self.period_s:.0f} s  Triton: served "
                  f"{p.served_rps:5.0f}/s failed {grew[FAILURE]:.0f}  RSS {p.total_rss_mb:7.1f} MB"
                  f"  reloads {p.watchdog_reloads}  cores: server {p.cpu.server_cores:.2f} load "
                  f"{p.cpu.load_cores:.2f} other {p.cpu.other_cores:.2f}", flush=True)
            before, last, cpu_before = after, now, cpu_after


def joined(server_side: list[Sample], run: LocustRun, name: str, period_s: float) -> list[Sample]:
    """Each server sample with the Locust window of its index: served requests a second,
    p50/p99 over both priorities and protocols, failures by error."""
    entries = json.loads((run.folder / f"{name}.json").read_text())
    points = []
    for k, p in enumerate(server_side):
        head = f"w{k:04d} "
        window = stat(head.strip(), [e for e in entries if e["name"].startswith(head)])
        errors: Counter[str] = Counter()
        for (where, error), n in run.failures.items():
            if where.startswith(head):
                errors[error] += n
        points.append(replace(p, served_rps=window.served / period_s, p50_ms=window.p50_ms,
                              p99_ms=window.p99_ms, errors=dict(errors)))
    return points


def load_env(server: TritonServer, rate_rps: float, window_s: float = 0.0) -> dict[str, str]:
    """The open loop's settings: two users (one a protocol), each at half the rate on an
    even schedule. Many users at a low rate would start in step and send in bursts."""
    return {"TMR_GRPC_HOST": server.grpc_url, "TMR_MODEL": DEFAULT_MODEL,
            "TMR_USER_RPS": str(rate_rps / 2), "TMR_WINDOW_S": str(window_s)}


def stage(text: str) -> None:
    print(f"soak: {text}", flush=True)


@dataclass(frozen=True)
class Verdict:
    """The soak's targets, each with its measured value and whether it held."""

    checks: dict[str, tuple[float, str, bool]]  # name -> (measured, target, held)
    drift: dict[str, tuple[float, float]] = field(default_factory=dict)  # first, last stretch
    control: Control | None = None

    @property
    def passed(self) -> bool:
        return all(held for _, _, held in self.checks.values())


@dataclass(frozen=True)
class Control:
    """p99 of interleaved windows at the soak's rate, on the soaked server and on a fresh
    one started after the soak (ABBA order): a drift that is the server's own stays with the
    soaked server; one that is the host's shows on both."""

    soaked_p99_ms: tuple[float, ...]
    fresh_p99_ms: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return float(np.median(self.soaked_p99_ms) / np.median(self.fresh_p99_ms))

    @property
    def finding(self) -> str:
        return ("the soaked server is slower: the drift is the server's" if self.ratio > 1.2
                else "the soaked server is as fast as a fresh one: the drift is not the server's")


def drift(first: list[Sample], last: list[Sample]) -> dict[str, tuple[float, float]]:
    """Medians of the first and last stretch for what tells host from server: latency,
    Triton's own queue and compute per request, and the cores others took."""
    def pair(value: Callable[[Sample], float]) -> tuple[float, float]:
        return (float(np.median([value(p) for p in first])),
                float(np.median([value(p) for p in last])))
    return {"p99 ms": pair(lambda p: p.p99_ms),
            "Triton queue us per request": pair(lambda p: p.queue_us),
            "Triton compute us per request": pair(lambda p: p.compute_us),
            "server cores": pair(lambda p: p.cpu.server_cores),
            "other processes' cores": pair(lambda p: p.cpu.other_cores),
            "steal %": pair(lambda p: p.cpu.steal_pct)}


def rss_growth(steady: list[Sample]) -> float:
    """MB grown over the steady window's second half: twice the smaller growth of its two
    quarters (a leak grows in both; an allocator sizing itself once steps up in one), the
    third from the first half's highest RSS. A leak starting in the last quarter goes unseen."""
    start, end = steady[0].t_s, steady[-1].t_s
    middle, three_quarters = start + (end - start) / 2, start + 3 * (end - start) / 4
    first_half = [p.total_rss_mb for p in steady if p.t_s <= middle]
    third = [p.total_rss_mb for p in steady if middle < p.t_s <= three_quarters]
    fourth = [p.total_rss_mb for p in steady if p.t_s > three_quarters]
    if not third or not fourth:  # too few samples for quarters: the whole second half
        return steady[-1].total_rss_mb - max(first_half)
    return 2 * min(third[-1] - max(first_half), fourth[-1] - third[-1])


def verdict(points: list[Sample], warmup_s: float, stretch_s: float) -> Verdict:
    """Targets over the samples after `warmup_s`; p99 and throughput compare the first and
    the last `stretch_s` of the run."""
    steady = [p for p in points if p.t_s > warmup_s] or points
    first = [p for p in steady if p.t_s <= steady[0].t_s + stretch_s]
    last = [p for p in steady if p.t_s >= steady[-1].t_s - stretch_s]
    growth = rss_growth(steady)
    p99_drift = float(np.median([p.p99_ms for p in last]) / np.median([p.p99_ms for p in first]))
    rps_ratio = float(np.mean([p.served_rps for p in last]) /
                      np.mean([p.served_rps for p in first]))
    errors = sum(sum(p.errors.values()) for p in points)
    reloads = points[-1].watchdog_reloads if points else 0
    return Verdict({
        "RSS growth over the second half (MB)": (growth, "< 50", growth < 50),
        "p99 last / first stretch": (p99_drift, "<= 1.2", p99_drift <= 1.2),
        "throughput last / first stretch": (rps_ratio, "0.9 .. 1.1", 0.9 <= rps_ratio <= 1.1),
        "errors": (errors, "0", errors == 0),
        "watchdog reloads": (reloads, "0", reloads == 0),
    }, drift(first, last))


def markdown(points: list[Sample], result: Verdict, capacity: float, rate: float) -> str:
    lines = [f"Capacity {capacity:.0f} req/s (Locust, 16 closed-loop users); offered {rate:.0f} "
             "req/s open loop, HTTP and gRPC, 20% priority 1.", "",
             "| target | measured | goal | |", "| --- | ---: | --- | --- |"]
    lines += [f"| {name} | {value:.2f} | {goal} | {'held' if held else 'MISSED'} |"
              for name, (value, goal, held) in result.checks.items()]
    lines += ["", "Host or server? Medians of the first and the last stretch:", "",
              "| | first | last | last / first |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.2f} |"
              for name, (a, b) in result.drift.items()]
    if result.control is not None:
        c = result.control
        lines += ["", f"Control, interleaved windows at the same rate: p99 soaked server "
                  f"{', '.join(f'{v:.1f}' for v in c.soaked_p99_ms)} ms, fresh server "
                  f"{', '.join(f'{v:.1f}' for v in c.fresh_p99_ms)} ms; median ratio "
                  f"{c.ratio:.2f}: {c.finding}."]
    lines += ["", "| t s | served/s | p50 ms | p99 ms | errors | RSS MB (all) | tritonserver |"
              " queue us | compute us | server cores | other cores | steal % | reloads |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| ---: |"]
    lines += [f"| {p.t_s:.0f} | {p.served_rps:.0f} | {p.p50_ms:.1f} | {p.p99_ms:.1f} | "
              f"{sum(p.errors.values())} | {p.total_rss_mb:.1f} | "
              f"{p.rss_mb.get('tritonserver', 0):.1f} | {p.queue_us:.0f} | {p.compute_us:.0f} | "
              f"{p.cpu.server_cores:.2f} | {p.cpu.other_cores:.2f} | {p.cpu.steal_pct:.1f} | "
              f"{p.watchdog_reloads} |" for p in points]
    return "\n".join(lines)


def plot(points: list[Sample], path: Path) -> None:
    t = [p.t_s / 60 for p in points]
    fig, (top, bottom) = subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, [p.total_rss_mb for p in points], label="tritonserver + stubs")
    top.plot(t, [p.rss_mb.get("tritonserver", 0) for p in points], label="tritonserver")
    top.set(ylabel="RSS MB", title="soak: memory and latency")
    top.legend()
    bottom.plot(t, [p.p99_ms for p in points], label="p99")
    bottom.plot(t, [p.p50_ms for p in points], label="p50")
    bottom.set(xlabel="minutes of load", ylabel="latency ms")
    bottom.legend()
    save_figure(fig, path, 100)


def window_p99(out: Path, server: TritonServer, rate_rps: float, seconds: float,
               name: str) -> float:
    """p99 of `seconds` of the soak's load on `server`."""
    return locust(out, f"http://{server.http_url}", USERS, stages=[(seconds, rate_rps, name)],
                  env=load_env(server, rate_rps), name=name).total.p99_ms


def control(soaked: TritonServer, out: Path, repository: Path, rate_rps: float, rounds: int,
            window_s: float) -> Control:
    """Start a fresh server beside the soaked one and alternate windows between them."""
    stage(f"control: a fresh server, then {rounds} x 2 windows of {window_s:g} s, alternating")
    p99s: dict[str, list[float]] = {"soaked": [], "fresh": []}
    with served_copy(out / "tritonserver-fresh.log", [repository]) as fresh:
        window_p99(out, fresh, rate_rps, window_s, "control-warmup")  # first batches: not counted
        for i in range(rounds):
            for which in (("soaked", "fresh") if i % 2 == 0 else ("fresh", "soaked")):
                server = soaked if which == "soaked" else fresh
                p99s[which].append(window_p99(out, server, rate_rps, window_s,
                                              f"control-{i}-{which}"))
                print(f"  {which:<6} p99 {p99s[which][-1]:6.1f} ms", flush=True)
    return Control(tuple(p99s["soaked"]), tuple(p99s["fresh"]))


def soak(minutes: float, sample_s: float, load: float, out: Path,
         repository: Path = DEFAULT_REPOSITORY,
         control_rounds: int = 0) -> tuple[list[Sample], Verdict, float, float]:
    """Run the soak on a server of its own; (samples, verdict, capacity, offered rate).
    With `control_rounds`, the verdict carries a Control against a fresh server."""
    stage("starting the server and the watchdog")
    with served_copy(out / "tritonserver.log", [repository]) as server:
        watchdog = Watchdog(server.http_url, server.metrics_url, interval_s=5.0)
        watchdog.start()
        try:
            stage("measuring capacity (Locust, 16 closed-loop users)")
            capacity = capacity_rps(out, f"http://{server.http_url}", DEFAULT_MODEL)
            if not capacity > 0:
                raise RuntimeError(f"nothing served while measuring capacity: {out}/capacity.log")
            rate, count = load * capacity, int(minutes * 60 // sample_s)
            stage(f"offering {rate:.0f} req/s ({load:g} x {capacity:.0f}) for {minutes:g} min")
            sampler = Sampler(server, watchdog, sample_s, count)
            sampler.start()
            try:
                run = locust(out, f"http://{server.http_url}", USERS, name="load",
                             stages=[(count * sample_s, rate, "soak")],
                             env=load_env(server, rate, sample_s))
                sampler.join(timeout=sample_s + 30)  # its last sample is due as Locust ends
            finally:
                sampler.stop_event.set()
            points = joined(sampler.samples, run, "load", sample_s)
            stage(f"Locust sent {run.total.requests} requests, "
                  f"{run.total.requests / (rate * count * sample_s):.2f} x those offered")
            checked = control(server, out, repository, rate, control_rounds,
                              max(sample_s, 30.0)) if control_rounds else None
        finally:
            watchdog.stop()
    quarter = minutes * 60 / 4  # warm-up up to 60 s, the stretches compared up to 300 s
    judged = verdict(points, min(60.0, quarter), min(300.0, quarter))
    return points, replace(judged, control=checked), capacity, rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.7, help="x measured capacity")
    parser.add_argument("--control-rounds", type=int, default=3,
                        help="pairs of windows alternating the soaked and a fresh server (0: none)")
    args = parser.parse_args(argv)
    out = run_dir("soak")
    print(f"soak: {args.minutes:g} min at {args.load:g}x capacity, a sample every "
          f"{args.sample_s:g} s; results in {out}", flush=True)
    points, result, capacity, rate = soak(args.minutes, args.sample_s, args.load, out,
                                          control_rounds=args.control_rounds)
    plot(points, out / "soak.png")
    print(write_report(out, "soak", markdown(points, result, capacity, rate), {
        "capacity_rps": capacity, "offered_rps": rate, "passed": result.passed,
        "checks": result.checks, "drift": result.drift,
        "control": asdict(result.control) if result.control else None,
        "samples": [asdict(p) for p in points]}))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

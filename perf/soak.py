"""Soak: a long steady load, sampled every 30 s, to show there are no leaks and no decay.

Starts a server of its own (a copy of the repository, explicit mode) with the watchdog
beside it, measures capacity (closed loop, 16 in flight), then offers `--load` x capacity
open loop for `--minutes`: half over HTTP, half over gRPC, 20% priority 1, a new text in
every request (no cache can answer). Every `--sample-s` it records:

- the RSS of `tritonserver` and of every Python stub (by model);
- p50, p99 and errors of the window, and the throughput served;
- the watchdog's reloads;
- Triton's own queue and compute time per request in the window
  (`nv_inference_queue_duration_us`, `nv_inference_compute_infer_duration_us`).

`verdict()` checks the targets of docs/reliability.md: RSS growth over the second half of
the run after warm-up under 50 MB (Triton's own L0_memory_growth allows 100 MB), counted as
twice the smaller growth of its two quarters (`rss_growth`: a leak keeps growing, an
allocator that sizes itself once steps up in one quarter and stays); the p99 of the last
stretch within 20% of the first, throughput steady, no errors, no watchdog reloads.

It prints a line as each stage starts and one per sample; on a terminal, a bar over the
load's duration also shows the errors of the last minute and the RSS.

    make soak                                   # 30 minutes, writes perf/results/soak-*/
    .venv/bin/python -m perf.soak --minutes 2 --sample-s 10    # what CI runs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import numpy as np
from tmr_client.core import DEFAULT_MODEL

from core.paths import DEFAULT_REPOSITORY
from perf import harness, host_cpu
from perf.load import capacity_rps, open_loop, sdk_sender, short_texts
from perf.stamp import save_figure
from python_backends.gc_pauses import GcPauses, apply_policy
from server.goodput import Outcome, percentile
from server.launcher import TritonServer
from server.memory import server_memory
from server.prometheus import samples
from server.watchdog import Watchdog

NO_SHARE = host_cpu.CpuShare(0.0, 0.0, 0.0, 0.0)
TRITON_TIMES = ("nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                "nv_inference_request_success")


@dataclass
class Window:
    """What the load saw between two samples."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def record(self, latency_ms: float, error: str | None) -> None:
        if error is None:
            self.latencies_ms.append(latency_ms)
        else:
            self.errors[error] = self.errors.get(error, 0) + 1


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


def process_rss(server_pid: int) -> dict[str, float]:
    """RSS (MiB) of tritonserver and of its stubs, summed per model."""
    return {name: row["rss_mib"] for name, row in server_memory(server_pid).items()}


def triton_times(metrics_url: str, model: str = DEFAULT_MODEL) -> dict[str, float]:
    totals = dict.fromkeys(TRITON_TIMES, 0.0)
    for s in samples(metrics_url):
        base = s.name.removesuffix("_total")
        if base in totals and s.labels.get("model") == model:
            totals[base] += s.value
    return totals


async def steady_load(urls: dict[str, str], rate_rps: float, seconds: float,
                      window: list[Window], high_share: float = 0.2) -> None:
    """The open loop at `rate_rps`, the protocols in turn; outcomes go to `window[0]` (the
    sampler swaps in a fresh Window), none is kept."""
    def record(outcome: Outcome) -> None:
        window[0].record(outcome.latency_ms, outcome.error)

    async with sdk_sender(*urls.items()) as send:
        await open_loop(send, rate_rps, seconds, high_share, texts=short_texts("soak"),
                        record=record)


class Sampler(threading.Thread):
    """Every `period_s`: swap the load's window and record a Sample."""

    def __init__(self, server: TritonServer, watchdog: Watchdog, window: list[Window],
                 period_s: float, total_s: float) -> None:
        super().__init__(daemon=True)
        self.server, self.watchdog, self.window, self.period_s = server, watchdog, window, period_s
        self.total_s = total_s
        self.samples: list[Sample] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        began = last = time.monotonic()
        before = triton_times(self.server.metrics_url)
        cpu_before = host_cpu.read(self.server.process.pid)
        while not self.stop_event.wait(self.period_s):
            done, self.window[0] = self.window[0], Window()
            now = time.monotonic()
            after = triton_times(self.server.metrics_url)
            cpu_after = host_cpu.read(self.server.process.pid)
            served = after["nv_inference_request_success"] - before["nv_inference_request_success"]
            self.samples.append(Sample(
                t_s=round(now - began, 1), served_rps=len(done.latencies_ms) / (now - last),
                p50_ms=percentile(done.latencies_ms, 50),
                p99_ms=percentile(done.latencies_ms, 99),
                errors=dict(done.errors), rss_mb=process_rss(self.server.process.pid),
                watchdog_reloads=len(self.watchdog.events),
                queue_us=per_request(after, before, "nv_inference_queue_duration_us", served),
                compute_us=per_request(after, before, "nv_inference_compute_infer_duration_us",
                                       served),
                cpu=host_cpu.share(cpu_before, cpu_after)))
            before, last, cpu_before = after, now, cpu_after
            p = self.samples[-1]
            print(f"  {p.t_s:>6.0f}/{self.total_s:.0f} s  {p.served_rps:5.0f}/s  p50 "
                  f"{p.p50_ms:6.1f}  p99 {p.p99_ms:6.1f} ms  errors {sum(p.errors.values())}  "
                  f"RSS {p.total_rss_mb:7.1f} MB  reloads {p.watchdog_reloads}  cores: server "
                  f"{p.cpu.server_cores:.2f} other {p.cpu.other_cores:.2f} steal "
                  f"{p.cpu.steal_pct:.1f}%", flush=True)


def live_status(points: Sequence[Sample], minute_s: float = 60.0) -> str:
    """The progress bar's figures: errors in the samples of the last minute, latest RSS."""
    if not points:
        return "waiting for the first sample"
    last = points[-1]
    errors = sum(sum(p.errors.values()) for p in points if p.t_s > last.t_s - minute_s)
    return f"errors in the last minute {errors}  RSS {last.total_rss_mb:.0f} MB"


@contextlib.contextmanager
def load_progress(total_s: float, sampler: Sampler) -> Iterator[None]:
    """A bar over the load's duration with live_status, redrawn every second on a terminal;
    in a log it stays off (rich would add a blank line) and the sampler's lines tell it."""
    from rich import get_console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    done = threading.Event()
    with Progress(TextColumn("soak"), BarColumn(), TimeElapsedColumn(),
                  TextColumn(f"of {timedelta(seconds=round(total_s))}  {{task.fields[status]}}"),
                  transient=True, disable=not get_console().is_interactive) as progress:
        task = progress.add_task("soak", total=total_s, status=live_status([]))
        began = time.monotonic()

        def tick() -> None:
            while not done.wait(1.0):
                progress.update(task, completed=time.monotonic() - began,
                                status=live_status(list(sampler.samples)))

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


def stage(text: str) -> None:
    print(f"soak: {text}", flush=True)


def per_request(after: dict, before: dict, name: str, served: float) -> float:
    return (after[name] - before[name]) / served if served else float("nan")


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
    """MB the processes grew over the second half of the steady window, counted as twice
    the smaller growth of its two quarters: a leak keeps growing, in both quarters, while
    an allocator that sizes itself once (onnxruntime's arena after the largest batch so
    far) steps up in one and stays. The third quarter grows from the highest RSS of the
    first half, the fourth from the third's end. A leak that starts only in the last
    quarter goes unseen: in the 30-minute soak, its last 7 minutes."""
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
    lines = [f"Capacity {capacity:.0f} req/s (closed loop, 16 in flight); offered {rate:.0f} "
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [p.t_s / 60 for p in points]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, [p.total_rss_mb for p in points], label="tritonserver + stubs")
    top.plot(t, [p.rss_mb.get("tritonserver", 0) for p in points], label="tritonserver")
    top.set(ylabel="RSS MB", title="soak: memory and latency")
    top.legend()
    bottom.plot(t, [p.p99_ms for p in points], label="p99")
    bottom.plot(t, [p.p50_ms for p in points], label="p50")
    bottom.set(xlabel="minutes of load", ylabel="latency ms")
    bottom.legend()
    fig.tight_layout()
    save_figure(fig, path, 100)


@contextlib.contextmanager
def quiet_caller_heap() -> Iterator[GcPauses]:
    """Freeze the objects the caller already holds while the load runs, and time the load
    process's collections. Run from pytest after hundreds of tests, a full collection walks
    that whole heap and pauses the open-loop client. The client then sends the overdue
    requests as one burst, and the server sees a load the soak never meant to offer."""
    apply_policy("freeze")  # the stubs' gc_policy, applied to the load's own process
    pauses = GcPauses().install()
    try:
        yield pauses
    finally:
        gc.unfreeze()
        pauses.remove()


def window_p99(server: TritonServer, rate_rps: float, seconds: float) -> float:
    """p99 of `seconds` of the soak's load on `server`."""
    window = [Window()]
    urls = {"http": server.http_url, "grpc": server.grpc_url}
    with quiet_caller_heap():
        asyncio.run(steady_load(urls, rate_rps, seconds, window))
    return percentile(window[0].latencies_ms, 99)


def control(soaked: TritonServer, out: Path, repository: Path, rate_rps: float, rounds: int,
            window_s: float) -> Control:
    """Start a fresh server beside the soaked one and alternate windows between them."""
    stage(f"control: a fresh server, then {rounds} x 2 windows of {window_s:g} s, alternating")
    soaked_p99: list[float] = []
    fresh_p99: list[float] = []
    with harness.served_copy(out / "tritonserver-fresh.log", [repository]) as fresh:
        window_p99(fresh, rate_rps, window_s)  # its first batches of every shape: not counted
        for i in range(rounds):
            for server in ((soaked, fresh) if i % 2 == 0 else (fresh, soaked)):
                p99 = window_p99(server, rate_rps, window_s)
                (soaked_p99 if server is soaked else fresh_p99).append(p99)
                print(f"  {'soaked' if server is soaked else 'fresh '} p99 {p99:6.1f} ms",
                      flush=True)
    return Control(tuple(soaked_p99), tuple(fresh_p99))


def soak(minutes: float, sample_s: float, load: float, out: Path,
         repository: Path = DEFAULT_REPOSITORY,
         control_rounds: int = 0) -> tuple[list[Sample], Verdict, float, float]:
    """Run the soak on a server of its own; (samples, verdict, capacity, offered rate).
    With `control_rounds`, the verdict carries a Control against a fresh server."""
    stage("starting the server and the watchdog")
    with harness.served_copy(out / "tritonserver.log", [repository]) as server:
        watchdog = Watchdog(server.http_url, server.metrics_url, interval_s=5.0)
        watchdog.start()
        try:
            stage("measuring capacity (closed loop, 16 in flight)")
            capacity = asyncio.run(capacity_rps(server.grpc_url))
            stage(f"offering {load * capacity:.0f} req/s ({load:g} x {capacity:.0f}) for "
                  f"{minutes:g} min")
            window = [Window()]
            sampler = Sampler(server, watchdog, window, sample_s, minutes * 60)
            sampler.start()
            urls = {"http": server.http_url, "grpc": server.grpc_url}
            with load_progress(minutes * 60, sampler), quiet_caller_heap() as pauses:
                asyncio.run(steady_load(urls, load * capacity, minutes * 60, window))
            stage(f"load client: {sum(pauses.collections)} GC collections, longest pause "
                  f"{pauses.longest_s * 1000:.0f} ms")
            sampler.stop_event.set()
            sampler.join()
            checked = None
            if control_rounds:
                checked = control(server, out, repository, load * capacity, control_rounds,
                                  max(sample_s, 30.0))
        finally:
            watchdog.stop()
    warmup = min(60.0, minutes * 60 / 4)
    stretch = min(300.0, minutes * 60 / 4)
    result = replace(verdict(sampler.samples, warmup, stretch), control=checked)
    return sampler.samples, result, capacity, load * capacity


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.7, help="x measured capacity")
    parser.add_argument("--control-rounds", type=int, default=3,
                        help="after the soak, alternate this many pairs of windows between "
                             "the soaked server and a fresh one (0: none)")
    args = parser.parse_args(argv)
    out = harness.run_dir("soak")
    print(f"soak: {args.minutes:g} min at {args.load:g}x capacity, a sample every "
          f"{args.sample_s:g} s; results in {out}", flush=True)
    points, result, capacity, rate = soak(args.minutes, args.sample_s, args.load, out,
                                          control_rounds=args.control_rounds)
    plot(points, out / "soak.png")
    harness.write_report(out, "soak", markdown(points, result, capacity, rate), {
        "capacity_rps": capacity, "offered_rps": rate, "passed": result.passed,
        "checks": result.checks, "drift": result.drift,
        "control": asdict(result.control) if result.control else None,
        "samples": [asdict(p) for p in points]})
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Run the comparison: start every server, warm it up, sweep the concurrency levels in
mirrored rounds with the one load client, keep the best round per point, stop them all.

`run_peers()` is what `python -m perf.peers` and the benchmark call. Raw results and the
servers' logs go to `perf/results/peers-<timestamp>/` (git-ignored).
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.paths import P99_OBJECTIVE_MS
from perf import harness
from perf.peers import cpu
from perf.peers.load import closed_loop_point, embed_one
from perf.peers.servers import (
    PEERS,
    PEERS_DIR,
    PeerStartError,
    Running,
    missing_peers,
    peer,
    triton_bare,
    triton_embed,
)
from perf.stats import NOISY_SHARE, best_of, render_table, round_orders
from server.goodput import LoadPoint

SERVERS = ("embed", "infinity", "batcher", "naive", "bare")
LEVELS = (1, 4, 8, 16, 32)
SECONDS = 6.0
ROUNDS = 2
WARMUP_S, WARMUP_CONCURRENCY = 3.0, 8
PROBE = "Triton batches requests from many clients into one model call."


@dataclass
class ServerResult:
    """One server's measurements: every round, and the best of them per point."""

    name: str
    label: str
    versions: dict[str, str]
    cosine_vs_reference: float | None  # the probe text's vector against the first server's
    rounds: list[list[LoadPoint]]
    best: list[LoadPoint]


@dataclass
class PeersResult:
    """The whole run: the settings it ran with and each server's result."""

    servers: list[ServerResult]
    levels: list[int]
    seconds: float
    rounds: int
    p99_budget_ms: float
    started: str
    out: str
    load_average: tuple[float, float]  # 1-minute load before the servers start, and at the end

    def table(self) -> str:
        return render_table([(s.label, s.best) for s in self.servers], self.levels,
                            self.p99_budget_ms)

    def report(self) -> str:
        """The table, then how to read it: settings, answer agreement and versions."""
        reference = self.servers[0].label if self.servers else "-"
        lines = [self.table(), "",
                 f"Each cell: answered requests/s / p99 ms; the best of {self.rounds} rounds "
                 f"(mirrored order) of {self.seconds:g} s per point, closed loop, a new text "
                 f"in every request. Goodput: the most requests/s at a point with no errors "
                 f"and p99 <= {self.p99_budget_ms:g} ms. Load average (1 min) before the "
                 f"servers started {self.load_average[0]:.1f}, at the end "
                 f"{self.load_average[1]:.1f} ({os.cpu_count()} cores). "
                 f"{self.noise()}", "",
                 f"Cosine of the probe text's vector against {reference}:"]
        lines += [f"- {s.name}: {fmt_cosine(s.cosine_vs_reference)}; "
                  + ", ".join(f"{k} {v}" for k, v in s.versions.items()) for s in self.servers]
        return "\n".join(lines)

    def noise(self) -> str:
        """How much other work shared the machine during the measured points."""
        shares = [p.foreign_cpu for s in self.servers for r in s.rounds for p in r
                  if p.foreign_cpu is not None]
        if not shares:
            return ""
        return (f"Other work used {statistics.median(shares):.0%} of the cores during the "
                f"median point and {max(shares):.0%} at most; `*` marks a kept point during "
                f"which it used more than {NOISY_SHARE:.0%}.")


def fmt_cosine(value: float | None) -> str:
    return "no answer" if value is None else f"{value:.4f}"


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors of the same length."""
    if len(a) != len(b):
        raise ValueError(f"vectors of length {len(a)} and {len(b)} cannot be compared")
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def start(name: str, peers: Path, out: Path, stack: ExitStack) -> Running:
    """Start one server (stopped when `stack` closes)."""
    log = out / f"{name}.log"
    if name == "embed":
        return stack.enter_context(triton_embed(log))
    if name == "bare":
        return stack.enter_context(triton_bare(log))
    return stack.enter_context(peer(PEERS[name], peers, log))


def warm_up(server: Running, progress: Progress) -> list[float] | None:
    """A short closed loop, then the probe text's vector (None if it was not answered)."""
    point = asyncio.run(closed_loop_point(server.endpoint, WARMUP_CONCURRENCY, WARMUP_S))
    if point.errors:
        progress.console.log(f"[yellow]{server.name}: {point.errors} errors while warming up: "
                             f"{point.error_kinds}")
    try:
        return asyncio.run(embed_one(server.endpoint, PROBE))
    except ValueError as err:
        progress.console.log(f"[yellow]{err}")
        return None


def measure_point(server: Running, concurrency: int, seconds: float) -> LoadPoint:
    """One closed-loop point, with the share of the cores other work used meanwhile."""
    before, began = cpu.sample(), time.perf_counter()
    point = asyncio.run(closed_loop_point(server.endpoint, concurrency, seconds))
    return replace(point, foreign_cpu=cpu.foreign_share(before, cpu.sample(),
                                                        time.perf_counter() - began))


def measure(server: Running, levels: Sequence[int], seconds: float, label: str,
            progress: Progress, task: int) -> list[LoadPoint]:
    """One round of one server: each level for `seconds`, logged as it finishes."""
    points = []
    for c in levels:
        progress.update(task, description=f"{label} · {server.name} · c{c}")
        point = measure_point(server, c, seconds)
        progress.console.print(f"{time.strftime('%H:%M:%S')} {label} {server.name:>8} c{c:<3}"
                               f"{point.rps:5.0f} req/s  p50 {point.p50_ms:5.1f}  p99 "
                               f"{point.p99_ms:5.1f} ms  other work {point.foreign_cpu:.0%}"
                               + (f"  errors {point.error_kinds}" if point.errors else ""))
        points.append(point)
        progress.advance(task)
    return points


def new_progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn())


def check_servers(servers: Sequence[str], peers: Path) -> None:
    """Raise PeerStartError for an unknown name or a peer `make peers` has not installed."""
    unknown = [s for s in servers if s not in SERVERS]
    if unknown:
        raise PeerStartError(f"unknown servers {unknown} (known: {list(SERVERS)})")
    missing = missing_peers(list(servers), peers)
    if missing:
        raise PeerStartError(f"peers not installed in {peers}: {missing}; run `make peers`")


Probes = dict[str, list[float] | None]


def start_all(servers: Sequence[str], peers: Path, out: Path, stack: ExitStack,
              progress: Progress, task: int) -> tuple[dict[str, Running], Probes]:
    """Start and warm up each server in turn; (the servers, their probe vectors)."""
    running: dict[str, Running] = {}
    probes: Probes = {}
    for name in servers:
        progress.update(task, description=f"starting {name} (waiting for health)")
        running[name] = start(name, peers, out, stack)
        progress.update(task, description=f"warming up {name}")
        probes[name] = warm_up(running[name], progress)
        progress.advance(task)
    return running, probes


def sweep_rounds(running: dict[str, Running], levels: Sequence[int], seconds: float,
                 rounds: int, progress: Progress, task: int) -> dict[str, list[list[LoadPoint]]]:
    """Every round, in mirrored order: per server, the points of each round."""
    progress.update(task, completed=0, total=rounds * len(running) * len(levels))
    measured: dict[str, list[list[LoadPoint]]] = {name: [] for name in running}
    for r, order in enumerate(round_orders(list(running), rounds), start=1):
        for name in order:
            measured[name].append(measure(running[name], levels, seconds,
                                          f"round {r}/{rounds}", progress, task))
    progress.update(task, description="stopping the servers")
    return measured


def server_results(running: dict[str, Running], probes: Probes,
                   measured: dict[str, list[list[LoadPoint]]]) -> list[ServerResult]:
    """Each server's rounds and best points; cosines against the first server's probe."""
    reference = next(iter(probes.values()), None)
    return [ServerResult(name, server.label, server.versions,
                         cosine(probes[name], reference) if probes[name] and reference
                         else None, measured[name], best_of(measured[name]))
            for name, server in running.items()]


def run_peers(servers: Sequence[str] = SERVERS, levels: Sequence[int] = LEVELS,
              seconds: float = SECONDS, rounds: int = ROUNDS,
              p99_budget_ms: float = P99_OBJECTIVE_MS, peers: Path = PEERS_DIR,
              out: Path | None = None) -> PeersResult:
    """Measure `servers` (names from SERVERS) at each concurrency level; see the module."""
    check_servers(servers, peers)
    out = out or harness.run_dir("peers")
    out.mkdir(parents=True, exist_ok=True)
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()[0]
    with ExitStack() as stack, new_progress() as progress:
        task = progress.add_task("starting", total=len(servers))
        running, probes = start_all(servers, peers, out, stack, progress, task)
        measured = sweep_rounds(running, levels, seconds, rounds, progress, task)
    result = PeersResult(server_results(running, probes, measured), list(levels), seconds,
                         rounds, p99_budget_ms, started, str(out),
                         (load_before, os.getloadavg()[0]))
    harness.write_report(out, "peers", result.report(), asdict(result))
    return result

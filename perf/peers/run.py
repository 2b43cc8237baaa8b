"""Run the comparison: start every server, warm it up, sweep the concurrency levels in
mirrored rounds with one Locust client (perf/locust_run.py), keep the best round per point,
stop them all. `run_peers()` is what `python -m perf.peers` and the benchmark call; results,
Locust's reports and the servers' logs go to `perf/results/peers-<timestamp>/`.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console

from core import cpu_share as host_cpu
from core.paths import P99_OBJECTIVE_MS
from core.process_memory import Usage, tree_memory
from perf import locust_run
from perf.peers import servers as peer_servers
from perf.peers.servers import PEERS, PEERS_DIR, PeerStartError, Running, embed_one, peer
from perf.stats import NOISY_SHARE, best_of, render_table, round_orders
from server.goodput import LoadPoint
from server.stamp import run_dir, write_report

SERVERS = ("embed", "infinity", "batcher", "naive", "bare")
LEVELS = (1, 4, 8, 16, 32)
SECONDS = 6
ROUNDS = 2
WARMUP_S, WARMUP_CONCURRENCY = 3, 8
PROBE = "Triton batches requests from many clients into one model call."
console = Console(stderr=True)


@dataclass
class ServerResult:
    """One server's measurements: every round, and the best of them per point."""

    name: str
    label: str
    versions: dict[str, str]
    cosine_vs_reference: float | None  # the probe text's vector against the first server's
    rounds: list[list[LoadPoint]]
    best: list[LoadPoint]
    memory: Usage | None = None  # its process tree once its rounds were measured


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

    def memory_table(self) -> str:
        """Each server's process tree after its rounds: processes, RSS and PSS."""
        return "\n".join(["| server | processes | RSS MiB | PSS MiB |",
                          "| --- | ---: | ---: | ---: |",
                          *(f"| {s.label} | {s.memory.processes} | {s.memory.rss_mib:.0f} | "
                            f"{s.memory.pss_mib:.0f} |" for s in self.servers if s.memory)])

    def report(self) -> str:
        """The table, then how to read it: settings, answer agreement and versions."""
        reference = self.servers[0].label if self.servers else "-"
        lines = [self.table(), "", "Memory, each server's whole process tree after its "
                 "rounds (/proc):", "", self.memory_table(), "",
                 f"Each cell: answered requests/s / p99 ms; the best of {self.rounds} rounds "
                 f"(mirrored order) of {self.seconds:g} s per point, closed loop (Locust "
                 f"`ClosedLoop` users), a new text in every request. Goodput: the most "
                 f"requests/s at a point with no errors and p99 <= {self.p99_budget_ms:g} ms. "
                 f"Load average (1 min) before the servers started {self.load_average[0]:.1f}, "
                 f"at the end {self.load_average[1]:.1f} ({os.cpu_count()} cores). "
                 f"{self.noise()}", "",
                 f"Cosine of the probe text's vector against {reference}:"]
        lines += [f"- {s.name}: " + ("no answer" if s.cosine_vs_reference is None
                                       else f"{s.cosine_vs_reference:.4f}") + "; "
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


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors of the same length."""
    if len(a) != len(b):
        raise ValueError(f"vectors of length {len(a)} and {len(b)} cannot be compared")
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def check_servers(servers: Sequence[str], peers: Path) -> None:
    """Raise PeerStartError for an unknown name, a peer `make peers` has not installed, or
    no Locust (`make locust`)."""
    if unknown := [s for s in servers if s not in SERVERS]:
        raise PeerStartError(f"unknown servers {unknown} (known: {list(SERVERS)})")
    if missing := peer_servers.missing_peers(list(servers), peers):
        raise PeerStartError(f"peers not installed in {peers}: {missing}; run `make peers`")
    if not locust_run.LOCUST.exists():
        raise PeerStartError(f"no Locust at {locust_run.LOCUST}; run `make locust`")


def start(name: str, peers: Path, out: Path, stack: ExitStack) -> Running:
    """Start one server (stopped when `stack` closes)."""
    log = out / f"{name}.log"
    if name in ("embed", "bare"):
        triton = peer_servers.triton_embed if name == "embed" else peer_servers.triton_bare
        return stack.enter_context(triton(log))
    return stack.enter_context(peer(PEERS[name], peers, log))


def point(out: Path, server: Running, c: int, seconds: float, name: str) -> LoadPoint:
    """One closed-loop point, with the share of the cores other work used meanwhile (Locust,
    our client, counts as ours: see host_cpu.foreign_share)."""
    before = host_cpu.read()
    got = locust_run.closed_loop_point(out / "locust", server.url, c, seconds, server.load_env,
                                       f"{server.name}-{name}")
    return replace(got, foreign_cpu=host_cpu.foreign_share(before, host_cpu.read()))


def warm_up(out: Path, server: Running) -> list[float] | None:
    """A short closed loop, then the probe text's vector (None if it was not answered)."""
    got = point(out, server, WARMUP_CONCURRENCY, WARMUP_S, "warmup")
    if got.errors:
        console.log(f"[yellow]{server.name}: {got.errors} errors warming up: {got.error_kinds}")
    try:
        return embed_one(server.url, server.load_env, PROBE)
    except ValueError as err:
        console.log(f"[yellow]{err}")
        return None


def measure(out: Path, server: Running, levels: Sequence[int], seconds: float,
            r: int) -> list[LoadPoint]:
    """One round of one server: each level for `seconds`, logged as it finishes."""
    points = []
    for c in levels:
        p = point(out, server, c, seconds, f"c{c}-r{r}")
        console.log(f"round {r} {server.name:>8} c{c:<3}{p.rps:5.0f} req/s  p50 {p.p50_ms:5.1f}"
                    f"  p99 {p.p99_ms:5.1f} ms  other work {p.foreign_cpu:.0%}"
                    + (f"  errors {p.error_kinds}" if p.errors else ""))
        points.append(p)
    return points


def run_peers(servers: Sequence[str] = SERVERS, levels: Sequence[int] = LEVELS,
              seconds: float = SECONDS, rounds: int = ROUNDS,
              p99_budget_ms: float = P99_OBJECTIVE_MS, peers: Path = PEERS_DIR,
              out: Path | None = None) -> PeersResult:
    """Measure `servers` (from SERVERS) at each level, `seconds` (whole: Locust's) a point."""
    check_servers(servers, peers)
    seconds = max(1, round(seconds))
    out = out or run_dir("peers")
    out.mkdir(parents=True, exist_ok=True)
    started, load_before = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()[0]
    running: dict[str, Running] = {}
    probes: dict[str, list[float] | None] = {}
    measured: dict[str, list[list[LoadPoint]]] = {name: [] for name in servers}
    with ExitStack() as stack:
        for name in servers:
            console.log(f"starting {name}")
            running[name] = start(name, peers, out, stack)
            probes[name] = warm_up(out, running[name])
        for r, order in enumerate(round_orders(list(servers), rounds), start=1):
            for name in order:
                measured[name].append(measure(out, running[name], levels, seconds, r))
        memory = {name: tree_memory(server.pid) for name, server in running.items()}
        console.log("stopping the servers")
    reference = probes[servers[0]] if servers else None
    result = PeersResult(
        [ServerResult(name, s.label, s.versions, cosine(probes[name], reference)
                      if probes[name] and reference else None, measured[name],
                      best_of(measured[name]), memory[name]) for name, s in running.items()],
        list(levels), seconds, rounds, p99_budget_ms, started, str(out),
        (load_before, os.getloadavg()[0]))
    print(write_report(out, "peers", result.report(), asdict(result)))
    return result

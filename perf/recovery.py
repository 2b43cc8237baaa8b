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
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import tritonclient.http.aio as httpaio

from client.errors import from_exception
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from core.ports import free_port
from core.repository import copy_repository
from perf.load import LevelSampler, Outcome, summarize
from perf.overload import capacity_rps
from perf.subjects import text_model
from server.launcher import TritonServer
from server.settings import Ports, ServerOptions

RESULTS = PROJECT_ROOT / "perf" / "results"
OVERLOAD = ((1, 32), (2, 128))  # (priority, closed-loop clients)
NORMAL = ((0, 4),)  # priority 0: the model's default level

FRONT = text_model().front  # the repository's text-embedding front model


def text_input(text: str) -> list[httpaio.InferInput]:
    tensor = httpaio.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
    return [tensor]


async def one_request(client: httpaio.InferenceServerClient, text: str,
                      priority: int) -> Outcome:
    """One `embed` call with only Triton's standard priority (0: the model's default)."""
    sent = time.monotonic()
    try:
        await client.infer(FRONT, text_input(text), priority=priority)
        error, status = None, "200"
    except Exception as exc:  # tritonclient raises its own types; each is classified
        typed = from_exception(exc)
        error, status = type(typed).__name__, str(typed.status)
    return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error, status=status)


async def closed_loop(url: str, groups: Sequence[tuple[int, int]], seconds: float,
                      tag: str) -> list[Outcome]:
    """`groups` of (priority, clients), each client sending back to back for `seconds`;
    every text is new, so no cache answers."""
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + seconds

    async def client_loop(client: httpaio.InferenceServerClient, priority: int, n: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            text = f"{tag} client {priority}-{n} request {i}: the server keeps answering"
            outcomes.append(await one_request(client, text, priority))

    client = httpaio.InferenceServerClient(url, conn_limit=sum(n for _, n in groups) + 8)
    try:
        await asyncio.gather(*(client_loop(client, p, k) for p, n in groups for k in range(n)))
    finally:
        await client.close()
    return outcomes


async def open_loop_schedule(url: str, rate_at: Callable[[float], float], seconds: float,
                             high_share: float = 0.2) -> list[Outcome]:
    """Open loop whose rate follows `rate_at(t)`; 20% priority 1, the rest priority 2."""
    client = httpaio.InferenceServerClient(url, conn_limit=512)
    tasks: list[asyncio.Task] = []
    start, sent_budget, n = time.monotonic(), 0.0, 0
    last = start
    try:
        while (now := time.monotonic()) < start + seconds:
            sent_budget += rate_at(now - start) * (now - last)
            last = now
            while n < int(sent_budget):
                priority = 1 if (n % 100) < high_share * 100 else 2
                tasks.append(asyncio.ensure_future(
                    one_request(client, f"sawtooth request {n}: keep answering", priority)))
                n += 1
            await asyncio.sleep(0.002)
        return list(await asyncio.gather(*tasks))
    finally:
        await client.close()


@dataclass(frozen=True)
class PhaseReport:
    """One phase of a scenario, per priority: requests, served, failures by status/error."""

    phase: str
    priority: int
    requests: int
    served: int
    failures: dict[str, int]
    p99_ms: float


def phase_report(phase: str, outcomes: list[Outcome]) -> list[PhaseReport]:
    rows = []
    for priority in sorted({o.priority for o in outcomes}):
        mine = [o for o in outcomes if o.priority == priority]
        ok = [o.latency_ms for o in mine if o.error is None]
        failures = Counter(f"{o.status} {o.error}" for o in mine if o.error)
        rows.append(PhaseReport(phase, priority, len(mine), len(ok), dict(failures),
                                float(np.percentile(ok, 99)) if ok else float("nan")))
    return rows


def level_changes(samples: Sequence[tuple[float, float]]) -> int:
    """How many times the sampled level changed."""
    values = [v for _, v in samples]
    return sum(1 for a, b in pairwise(values) if a != b)


def sawtooth_rate(capacity: float, period_s: float, high: float = 3.0,
                  low: float = 0.5) -> Callable[[float], float]:
    """`high` x capacity for `period_s`, then `low` x capacity for `period_s`, repeating."""
    return lambda t: capacity * (high if int(t // period_s) % 2 == 0 else low)


def run_recover(url: str, overload_s: float, gap_s: float, normal_s: float) -> list[PhaseReport]:
    overload = asyncio.run(closed_loop(url, OVERLOAD, overload_s, "overload"))
    time.sleep(gap_s)
    normal = asyncio.run(closed_loop(url, NORMAL, normal_s, "normal"))
    return phase_report("overload", overload) + phase_report(f"normal, {gap_s:g} s after",
                                                             normal)


def run_sawtooth(url: str, metrics_url: str, period_s: float, seconds: float) -> dict:
    capacity = asyncio.run(capacity_rps(url, protocol="http"))
    sampler = LevelSampler(metrics_url)
    sampler.start()
    outcomes = asyncio.run(open_loop_schedule(url, sawtooth_rate(capacity, period_s), seconds))
    sampler.stop_event.set()
    sampler.join()
    minutes = seconds / 60
    return {"capacity_rps": capacity, "period_s": period_s, "seconds": seconds,
            "load_changes_per_min": (seconds / period_s - 1) / minutes,
            "level_changes_per_min": level_changes(sampler.samples) / minutes,
            "max_level": max((v for _, v in sampler.samples), default=0.0),
            "levels": sampler.samples,
            "summary": [asdict(s) for s in summarize(outcomes, seconds)]}


def markdown(recover: list[PhaseReport] | None, sawtooth: dict | None) -> str:
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
    out = RESULTS / f"recovery-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if args.url is None:
            repo = copy_repository([DEFAULT_REPOSITORY], Path(tmp) / "repository")
            server = TritonServer(ServerOptions(repository=repo, ports=Ports(
                free_port(), free_port(), free_port())), log_path=out / "tritonserver.log")
            server.__enter__()
        url = args.url or server.http_url
        metrics_url = args.metrics_url or (server.metrics_url if server else "")
        try:
            recover = (run_recover(url, args.overload_s, args.gap_s, args.normal_s)
                       if args.scenario in ("recover", "all") else None)
            sawtooth = (run_sawtooth(url, metrics_url, args.period_s, args.sawtooth_s)
                        if args.scenario in ("sawtooth", "all") else None)
        finally:
            if server is not None:
                server.__exit__()
    report = markdown(recover, sawtooth)
    (out / "recovery.md").write_text(report + "\n")
    (out / "recovery.json").write_text(json.dumps(
        {"recover": [asdict(r) for r in recover or []], "sawtooth": sawtooth},
        indent=1, default=float))
    print(report)
    print(f"\nresults in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Failover figures of a fleet on one machine: what clients see when a replica dies.

Two replicas (server/fleet.py) of the text model behind the front door, on a repository
copy; `--clients` closed-loop clients send one text a request through the front door for
the whole run. Windows: steady; the `--window` seconds after replica 1 is killed with
SIGKILL; after it is restarted and back; a rolling restart of both. Per window: requests,
failures, p50 and p99, and p99 over the steady window's.

    .venv/bin/python -m perf.fleet [--clients 8] [--window 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

from core.ports import free_ports
from perf import harness
from perf.priority import RESENT, door_sender, unique_rows
from perf.subjects import build_repository, text_model
from server.fleet import Fleet
from server.goodput import Outcome, closed_loop, percentile
from server.settings import FrontDoorSettings, Ports, ServerOptions


def window(outcomes: list[Outcome], start: float, end: float) -> dict:
    mine = [o for o in outcomes if start <= o.sent < end]
    ok = [o.latency_ms for o in mine if o.error is None]
    errors = Counter(o.error for o in mine if o.error is not None)
    return {"requests": len(mine), "failures": len(mine) - len(ok),
            "resent": sum(o.status.endswith(RESENT) for o in mine),
            "p50_ms": percentile(ok, 50), "p99_ms": percentile(ok, 99),
            "errors": dict(errors.most_common(5))}


async def scenario(fleet: Fleet, clients: int, seconds: float) -> dict[str, dict]:
    """Load through the front door while the fleet is steady, loses replica 1, gets it back
    and restarts both one at a time; the windows' figures."""
    model, key = text_model(), next(iter(fleet.door.api_keys.values()))
    outcomes: list[Outcome] = []
    marks: dict[str, float] = {}

    async def operator() -> None:
        marks["steady"] = time.monotonic()
        await asyncio.sleep(seconds)
        marks["killed"] = time.monotonic()
        os.kill(fleet.replicas[1].process.pid, signal.SIGKILL)
        await asyncio.sleep(seconds)
        marks["restart"] = time.monotonic()
        await asyncio.to_thread(fleet.restart, 1)
        marks["back"] = time.monotonic()
        await asyncio.sleep(seconds)
        marks["rolling"] = time.monotonic()
        await asyncio.to_thread(fleet.rolling_restart)
        marks["end"] = time.monotonic()

    async with door_sender(fleet.door.http_url, key, model, resend_resets=True) as send:
        task = asyncio.ensure_future(operator())
        while not task.done():
            outcomes += await closed_loop(send, [(0, clients)], 1.0,
                                          unique_rows(model, f"fleet-{time.monotonic_ns()}"))
        await task
    spans = {"steady": ("steady", "killed"), "after SIGKILL of replica 1": ("killed", None),
             "replica 1 restarting": ("restart", "back"), "replica 1 back": ("back", "rolling"),
             "rolling restart of both": ("rolling", "end")}
    rows = {}
    for name, (a, b) in spans.items():
        end = marks[b] if b else marks[a] + seconds
        rows[name] = window(outcomes, marks[a], end)
    return rows


def markdown(rows: dict[str, dict], clients: int) -> str:
    steady = rows["steady"]["p99_ms"]
    lines = [f"Two replicas behind the front door, {clients} closed-loop clients, one text a "
             "request, kept-alive connections (a request whose connection the door closed "
             "under it at a reload is sent once more: *resent*).", "",
             "| window | requests | failures | resent | p50 ms | p99 ms | p99 / steady |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {name} | {r['requests']} | {r['failures']} | {r['resent']} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['p99_ms'] / steady:.2f}x |"
              for name, r in rows.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--window", type=float, default=8.0, help="seconds per window")
    args = parser.parse_args(argv)
    out = harness.run_dir("fleet")
    with tempfile.TemporaryDirectory(prefix="tmr-fleet-") as tmp:
        repo = build_repository(Path(tmp), [], text_only=True)
        ports = [Ports(*free_ports(3)), Ports(*free_ports(3))]
        door = Ports(*free_ports(3))
        options = ServerOptions(repository=repo, ports=ports[0],
                                model_config_name=harness.served_profile()[0])
        settings = FrontDoorSettings(http_port=door.http, grpc_port=door.grpc,
                                     rate_per_minute=10_000_000)
        with Fleet(options, 2, out, settings, ports=ports) as fleet:
            rows = asyncio.run(scenario(fleet, args.clients, args.window))
    harness.write_report(out, "fleet", markdown(rows, args.clients), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

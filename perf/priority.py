"""Priority under a bulk job: does an interactive request keep its latency?

One run, one server. An interactive stream (priority 1, one text a request, open loop at
`--interactive-share` of the measured capacity) runs alone, then a bulk job (priority 2,
`--bulk-clients` closed-loop clients of `--bulk-texts` texts a request: plain tritonclient
HTTP with the standard `priority`, or the async SDK's bulk call) runs alone, then both at
once. Reported: priority 1's served share, p50 and p99 alone and under the bulk job (and
their ratio, the target being <= 2), the bulk job's texts/s alone and in the mix (target:
>= 0.7), every answer's status, and per model Triton's average queue and compute time per
request in each phase (from its Prometheus counters).

    .venv/bin/python -m perf.priority [--seconds 20] [--bulk http|sdk] [--url host:port]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from client import NO_RETRY, AsyncClient
from client.prometheus import samples
from core.config_edit import Change
from core.families.lanes import lane_name
from core.repository import put_parameter
from perf import harness
from perf.load import (
    capacity_rps,
    open_loop,
    standard_sender,
    standard_texts_sender,
    timed_call,
    unique_texts,
)
from perf.stats import Outcome, by_priority
from perf.subjects import build_repository, text_model

HIGH, LOW = 1, 2
Bulk = Callable[[list[str]], Awaitable[Outcome]]


@asynccontextmanager
async def http_bulk(url: str, model: str) -> AsyncIterator[Bulk]:
    """Bulk requests of several texts over tritonclient HTTP, standard `priority` only."""
    async with standard_texts_sender(url, model, conn_limit=64) as send:
        yield lambda texts: send(texts, LOW)


@asynccontextmanager
async def sdk_bulk(url: str, model: str) -> AsyncIterator[Bulk]:
    """The async SDK's bulk call (it cuts the texts into chunks itself)."""
    async with AsyncClient(url, protocol="http", retry=NO_RETRY) as client:
        await client.max_batch_size(model)
        yield lambda texts: timed_call(LOW, client.embed(texts, model=model, priority=LOW))


@dataclass
class Phase:
    """What one phase measured: outcomes per side and Triton's per-model times."""

    name: str
    seconds: float
    interactive: list[Outcome] = field(default_factory=list)
    bulk: list[Outcome] = field(default_factory=list)
    models: dict[str, dict[str, float]] = field(default_factory=dict)


def model_counters(metrics_url: str) -> dict[str, Counter]:
    """Per model: requests, queue and compute microseconds so far (Triton's counters)."""
    wanted = {"nv_inference_request_success": "requests", "nv_inference_queue_duration_us":
              "queue_us", "nv_inference_compute_infer_duration_us": "compute_us"}
    out: dict[str, Counter] = {}
    for s in samples(metrics_url):
        key = wanted.get(s.name.removesuffix("_total"))
        if key:
            out.setdefault(s.labels["model"], Counter())[key] += s.value
    return out


def per_request(before: dict[str, Counter], after: dict[str, Counter]) -> dict[str, dict]:
    """Average queue and compute ms per request of each model that served any."""
    times = {}
    for model, now in after.items():
        delta = now - before.get(model, Counter())
        if delta["requests"]:
            times[model] = {"requests": delta["requests"],
                            "queue_ms": delta["queue_us"] / delta["requests"] / 1000,
                            "compute_ms": delta["compute_us"] / delta["requests"] / 1000}
    return times


async def run_phase(name: str, url: str, metrics_url: str, seconds: float, rate: float | None,
                    bulk: Bulk | None, clients: int, texts_per_request: int,
                    model: str) -> Phase:
    phase, before = Phase(name, seconds), model_counters(metrics_url)
    pool = unique_texts(nonce=f"{name}-{time.monotonic_ns()}")

    async def bulk_client() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            phase.bulk.append(await bulk([next(pool) for _ in range(texts_per_request)]))

    async def interactive() -> None:
        async with standard_sender(url, model) as send:
            phase.interactive = await open_loop(send, rate, seconds, high_share=1.0, texts=pool)

    jobs = [bulk_client() for _ in range(clients if bulk else 0)]
    await asyncio.gather(*jobs, *([interactive()] if rate else []))
    phase.models = per_request(before, model_counters(metrics_url))
    return phase


def summary(phases: list[Phase], texts_per_request: int) -> dict:
    rows = {}
    for p in phases:
        inter = by_priority(p.interactive, p.seconds)
        served = [o for o in p.bulk if o.error is None]
        rows[p.name] = {
            "interactive": asdict(inter[0]) if inter else None,
            "bulk_texts_per_s": len(served) * texts_per_request / p.seconds,
            "bulk_p50_ms": float(np.median([o.latency_ms for o in served])) if served else None,
            "statuses": dict(Counter(o.status or "200" for o in p.interactive + p.bulk)),
            "models": p.models}
    return rows


def markdown(rows: dict, rate: float, capacity: float, args: argparse.Namespace) -> str:
    alone, mix, bulk = rows["interactive alone"], rows["mix"], rows["bulk alone"]
    lines = [f"Capacity {capacity:.0f} req/s (closed loop, 16 in flight, one text); priority 1 "
             f"at {rate:.1f} req/s open loop; bulk: {args.bulk_clients} clients x "
             f"{args.bulk_texts} texts ({args.bulk}), priority 2.", "",
             "| phase | p1 served | p1 p50 ms | p1 p99 ms | bulk texts/s | statuses |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, row in rows.items():
        i = row["interactive"]
        cells = ([f"{i['served'] / i['requests']:.1%}", f"{i['p50_ms']:.0f}",
                  f"{i['p99_ms']:.0f}"] if i else ["-", "-", "-"])
        texts = f"{row['bulk_texts_per_s']:.0f}" if row["bulk_texts_per_s"] else "-"
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(row["statuses"].items()))
        lines.append(f"| {name} | {' | '.join(cells)} | {texts} | {statuses} |")
    ratio = mix["interactive"]["p99_ms"] / alone["interactive"]["p99_ms"]
    kept = mix["bulk_texts_per_s"] / bulk["bulk_texts_per_s"]
    lines += ["", f"p1 p99 under the bulk job / alone: **{ratio:.2f}** (target <= 2); "
              f"bulk texts/s in the mix / alone: **{kept:.2f}** (target >= 0.7)", "",
              "| phase | model | requests | queue ms / request | compute ms / request |",
              "| --- | --- | ---: | ---: | ---: |"]
    for name, row in rows.items():
        for model, t in sorted(row["models"].items()):
            lines.append(f"| {name} | {model} | {t['requests']:.0f} | {t['queue_ms']:.1f} | "
                         f"{t['compute_ms']:.1f} |")
    return "\n".join(lines)


async def measure(url: str, metrics_url: str, args: argparse.Namespace
                  ) -> dict[str, tuple[dict, float, float]]:
    """Per route of priority 1 (the shared front, as a raw client sending only the
    standard priority reaches it; its interactive lane, as the SDK and the front door
    route it), the three phases at one rate: a share of the shared front's capacity."""
    capacity = await capacity_rps(url, seconds=10.0, protocol="http", priority=LOW)
    rate = capacity * args.interactive_share
    opener = sdk_bulk if args.bulk == "sdk" else http_bulk
    found = {}
    for route, model in (("the shared front", args.model), ("the lane", lane_name(args.model))):
        if route == "the lane" and not args.lane:
            continue
        async with opener(url, args.model) as bulk:
            common = dict(url=url, metrics_url=metrics_url, seconds=args.seconds,
                          clients=args.bulk_clients, texts_per_request=args.bulk_texts)
            phases = [await run_phase("interactive alone", rate=rate, bulk=None, model=model,
                                      **common),
                      await run_phase("bulk alone", rate=None, bulk=bulk, model=model,
                                      **common),
                      await run_phase("mix", rate=rate, bulk=bulk, model=model, **common)]
        found[f"priority 1 to {route}"] = (summary(phases, args.bulk_texts), rate, capacity)
    return found


def shape_edits(spec: str, front: str, encoder: str) -> list[tuple[str, Change]]:
    """`IxB[xE]`: the front with I instances and a preferred batch of B rows (0: none), and
    E instances of the primary encoder (absent: as configured)."""
    instances, preferred, *encoders = (int(x) for x in spec.split("x"))

    def front_change(config: ModelConfig) -> None:
        config.instance_group[0].count = instances
        del config.dynamic_batching.preferred_batch_size[:]
        if preferred:
            config.dynamic_batching.preferred_batch_size.append(preferred)

    def encoder_change(config: ModelConfig) -> None:
        config.instance_group[0].count = encoders[0]

    return [(front, front_change), *([(encoder, encoder_change)] if encoders else [])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interactive-share", type=float, default=0.15)
    parser.add_argument("--bulk-clients", type=int, default=16)
    parser.add_argument("--bulk-texts", type=int, default=16)
    parser.add_argument("--bulk", choices=("http", "sdk"), default="http")
    parser.add_argument("--model", default="embed")
    parser.add_argument("--variants", nargs="*", default=[], metavar="IxB",
                        help="front shapes to compare, each on its own server: I instances, "
                             "preferred batch B (0: none); default: the repository as it is")
    parser.add_argument("--shared-scheduling", choices=("normal", "idle", "nice"),
                        default="normal", help="the shared front's and the encoders' "
                        "cpu_scheduling on the served copy (the lane stays normal)")
    parser.add_argument("--no-lane", dest="lane", action="store_false",
                        help="measure priority 1 to the shared front only, not to its lane")
    parser.add_argument("--url", help="HTTP host:port of a running server (default: start one)")
    parser.add_argument("--metrics-url", default=None)
    args = parser.parse_args(argv)
    out = harness.run_dir("priority")
    results, reports = {}, []
    if args.url:
        metrics = args.metrics_url or f"http://{args.url.split(':')[0]}:8002/metrics"
        for route, found in asyncio.run(measure(args.url, metrics, args)).items():
            results[f"served, {route}"] = found
    for spec in args.variants or ["as shipped"]:
        model = text_model()
        edits = [] if spec == "as shipped" else shape_edits(
            spec, args.model, model.encoder(model.primary))
        with tempfile.TemporaryDirectory(prefix="tmr-priority-") as tmp:
            repo = build_repository(Path(tmp), edits, text_only=True)
            if args.shared_scheduling != "normal":  # every model of the shared path
                for name in (model.front, *model.encoders.values()):
                    put_parameter(repo, str(name), "cpu_scheduling", args.shared_scheduling)
            with harness.server(repo, out / f"triton-{spec.replace(' ', '-')}.log") as srv:
                for route, found in asyncio.run(measure(srv.http_url, srv.metrics_url,
                                                        args)).items():
                    results[f"{spec}, {route}"] = found
    for name, (rows, rate, capacity) in results.items():
        reports.append(f"### {name}\n\n" + markdown(rows, rate, capacity, args))
    harness.write_report(out, "priority", "\n\n".join(reports), {
        name: {"capacity_rps": c, "interactive_rps": r, "phases": rows}
        for name, (rows, r, c) in results.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

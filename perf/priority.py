"""Priority under a bulk job: does an interactive request keep its latency?

Per server (one per `--shared-scheduling` value, each on a repository copy): the bulk job
alone (priority 2, `--bulk-clients` closed-loop clients of `--bulk-texts` texts a request,
plain tritonclient HTTP with the standard `priority` or the async SDK's bulk call), then
per route of priority 1 (ROUTES: raw HTTP to the shared front, raw HTTP naming the lane,
the async SDK over gRPC, the front door) an interactive stream (one text a request, open
loop at `--interactive-share` of the measured capacity) alone and under the bulk job; for
the lane, a last phase where `--saturate` clients flood it beside the bulk job (the
starvation bound). Reported: priority 1's served share, p50 and p99 alone and under the
bulk job (ratio target <= 2), the bulk job's texts/s in the mix over alone (>= 0.7), every
answer's status, per model Triton's queue and compute ms per request in each phase, and
the closed-loop capacity at 16 in flight of each server (the cost of the scheduling).

    .venv/bin/python -m perf.priority [--seconds 20] [--shared-scheduling normal idle]
        [--routes shared lane sdk-grpc front-door] [--loadgen-nice 19] [--bulk http|sdk]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import itertools
import os
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tmr_client import NO_RETRY, AsyncClient
from tmr_client.contract import METRICS_PORT
from tritonclient.grpc.model_config_pb2 import ModelConfig

from core.config_edit import Change
from core.families import TEXT_EMBEDDING
from core.families.catalog import FamilyModel
from core.families.lanes import lane_name
from core.paths import DEFAULT_REPOSITORY
from core.ports import free_ports
from core.repository import put_parameter
from core.settings import IN_PROCESS_THREADS_PARAMETER
from perf import harness
from perf.load import open_loop, served_rate, unique_texts
from perf.stats import by_priority
from perf.subjects import build_repository, text_model
from server.goodput import (
    Outcome,
    Send,
    closed_loop,
    standard_sender,
    standard_texts_sender,
    timed_call,
)
from server.prometheus import samples
from server.settings import admin_key

HIGH, LOW = 1, 2
Bulk = Callable[[list[str]], Awaitable[Outcome]]


@asynccontextmanager
async def http_bulk(url: str, model: FamilyModel) -> AsyncIterator[Bulk]:
    """Bulk requests of several rows over tritonclient HTTP, standard `priority` only."""
    async with standard_texts_sender(url, model.front, 64, input_of(model)) as send:
        yield lambda rows: send(rows, LOW)


def sdk_call(client: AsyncClient, model: FamilyModel) -> Callable[..., Awaitable[object]]:
    """The SDK's call for the model's family: embed or classify."""
    return client.embed if model.family is TEXT_EMBEDDING else client.classify


@asynccontextmanager
async def sdk_bulk(url: str, model: FamilyModel) -> AsyncIterator[Bulk]:
    """The async SDK's bulk call (it cuts the rows into chunks itself)."""
    async with AsyncClient(url, protocol="http", retry=NO_RETRY,
                           admin_key=admin_key()) as client:
        await client.max_batch_size(model.front)
        call = sdk_call(client, model)
        yield lambda rows: timed_call(LOW, call(rows, model=model.front, priority=LOW))


def input_of(model: FamilyModel) -> str:
    return model.family.contract.front_inputs[0].name


def unique_rows(model: FamilyModel, nonce: str) -> Iterator[str | bytes]:
    """Rows no cache can answer: texts, or the front's warmup photo at 256 x 256 with one
    more pixel changed each row, as JPEG."""
    if model.family is TEXT_EMBEDDING:
        yield from unique_texts(nonce=nonce)
        return
    raw = (DEFAULT_REPOSITORY / model.front / "warmup" / input_of(model)).read_bytes()[4:]
    pixels = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB").resize((256, 256))).copy()
    for i in itertools.count(hash(nonce) % 65536):
        pixels[i // 256 % 256, i % 256] = (i % 251, i * 7 % 253, i * 13 % 255)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
        yield buffer.getvalue()


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


async def run_phase(name: str, rate: float | None, send: Send | None, bulk: Bulk | None,
                    model: FamilyModel, metrics_url: str, seconds: float, clients: int,
                    texts_per_request: int, flood: int = 0) -> Phase:
    """Priority 1 open loop at `rate` (or `flood` closed-loop clients that pause 50 ms
    after a refusal, as Retry-After asks) beside `clients` bulk clients, for `seconds`."""
    phase, before = Phase(name, seconds), model_counters(metrics_url)
    pool = unique_rows(model, nonce=f"{name}-{time.monotonic_ns()}")

    async def bulk_client() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            phase.bulk.append(await bulk([next(pool) for _ in range(texts_per_request)]))

    async def backing_off(text: str, priority: int) -> Outcome:
        outcome = await send(text, priority)
        if outcome.error:
            await asyncio.sleep(0.05)
        return outcome

    async def interactive() -> None:
        phase.interactive = await (
            closed_loop(backing_off, [(HIGH, flood)], seconds, pool) if flood else
            open_loop(send, rate, seconds, high_share=1.0, texts=pool))

    jobs = [bulk_client() for _ in range(clients if bulk else 0)]
    await asyncio.gather(*jobs, *([interactive()] if rate or flood else []))
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


ROUTES = ("shared", "lane", "sdk-grpc", "front-door")
ROUTE_NAMES = {"shared": "the shared front (raw HTTP, standard priority)",
               "lane": "the lane (raw HTTP, named)",
               "sdk-grpc": "the lane (async SDK over gRPC, priority=1)",
               "front-door": "the lane (front door, JSON parameters.priority 1)"}


# aiohttp's errors for a kept-alive connection closed or reset by the server
RESET_ERRORS = ("ClientOSError", "ServerDisconnectedError")
RESENT = "resent after a reset"


@asynccontextmanager
async def door_sender(url: str, key: str, model: FamilyModel,
                      resend_resets: bool = False) -> AsyncIterator[Send]:
    """One text a request through the front door, KServe JSON with only the standard
    `parameters.priority`: the door routes priority 1 to the lane. `resend_resets`: a
    request whose kept-alive connection the door closed under it (nginx closes its old
    workers' idle client connections when it reloads) is sent once more, as an HTTP
    client may for a request that is safe to repeat; its status says so."""
    import aiohttp

    async with aiohttp.ClientSession(headers={"x-api-key": key}) as session:
        async def post(body: dict) -> tuple[str | None, str]:
            try:
                async with session.post(f"http://{url}/v2/models/{model.front}/infer",
                                        json=body) as r:
                    answer = await r.read()
                    return (None if r.status == 200 else
                            f"HTTP {r.status}: {answer[:120].decode(errors='replace')}",
                            str(r.status))
            except aiohttp.ClientError as exc:
                return type(exc).__name__, ""

        async def send(row: str | bytes, priority: int) -> Outcome:
            text = row if isinstance(row, str) else base64.b64encode(row).decode()
            body = {"inputs": [{"name": input_of(model), "shape": [1, 1], "datatype": "BYTES",
                                "data": [text]}], "parameters": {"priority": priority}}
            sent = time.monotonic()
            error, status = await post(body)
            if resend_resets and error in RESET_ERRORS:
                error, status = await post(body)
                status = f"{status} {RESENT}"
            return Outcome(sent, priority, (time.monotonic() - sent) * 1000, error, status)
        yield send


@asynccontextmanager
async def interactive_sender(route: str, srv: Servers, model: FamilyModel
                             ) -> AsyncIterator[Send]:
    """Priority 1's sender on `route` (ROUTES), one row a request."""
    if route == "sdk-grpc":
        async with AsyncClient(srv.grpc, protocol="grpc", retry=NO_RETRY,
                           admin_key=admin_key()) as client:
            await client.max_batch_size(model.front)  # its set-up is no request's latency
            call = sdk_call(client, model)
            yield lambda row, priority: timed_call(priority, call(
                [row], model=model.front, priority=priority))
    elif route == "front-door":
        async with door_sender(srv.door, srv.key, model) as send:
            yield send
    else:
        target = lane_name(model.front) if route == "lane" else model.front
        async with standard_sender(srv.http, target, input_name=input_of(model)) as send:
            yield send


async def capacity(url: str, model: FamilyModel, seconds: float = 10.0) -> float:
    """Served requests a second of one row each, 16 in flight, priority 2, no lane."""
    async with standard_sender(url, model.front, input_name=input_of(model)) as send:
        outcomes = await closed_loop(send, [(LOW, 16)], seconds,
                                     unique_rows(model, "capacity"))
    return served_rate(outcomes, seconds)


@dataclass
class Servers:
    """Where one measured server answers: Triton's HTTP, gRPC and metrics, the door."""

    http: str
    grpc: str
    metrics: str
    door: str = ""
    key: str = ""


async def measure(srv: Servers, args: argparse.Namespace) -> dict[str, tuple[dict, float, float]]:
    """The bulk job alone once, then per route of priority 1 (ROUTES) priority 1 alone and
    under the bulk job, at one rate: a share of the shared front's capacity."""
    model = text_model(name=args.model)
    measured = await capacity(srv.http, model)
    rate = measured * args.interactive_share
    opener = sdk_bulk if args.bulk == "sdk" else http_bulk
    common = dict(model=model, metrics_url=srv.metrics, seconds=args.seconds,
                  clients=args.bulk_clients, texts_per_request=args.bulk_texts)
    found = {}
    async with opener(srv.http, model) as bulk:
        alone = await run_phase("bulk alone", None, None, bulk, **common)
        for route in args.routes:
            async with interactive_sender(route, srv, model) as send:
                phases = [await run_phase("interactive alone", rate, send, None, **common),
                          alone, await run_phase("mix", rate, send, bulk, **common)]
                if route == "lane" and args.saturate:  # the starvation bound
                    phases.append(await run_phase("lane saturated", None, send, bulk,
                                                  flood=args.saturate, **common))
            found[f"priority 1 to {ROUTE_NAMES[route]}"] = (
                summary(phases, args.bulk_texts), rate, measured)
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


def served(args: argparse.Namespace, spec: str, scheduling: str | None,
           out: Path) -> dict[str, tuple[dict, float, float]]:
    """Build the repository copy for one server (front shape `spec`, the shared path's
    `scheduling`, the lane's threads), start it (and the front door), measure it."""
    from server.front_door import FrontDoor
    from server.settings import FrontDoorSettings

    model = text_model(name=args.model)
    edits = [] if spec == "as shipped" else shape_edits(
        spec, args.model, model.encoder(model.primary))
    with tempfile.TemporaryDirectory(prefix="tmr-priority-") as tmp:
        repo = build_repository(Path(tmp), edits,
                                text_only=model.family is TEXT_EMBEDDING)
        for name in (model.front, *model.encoders.values()) if scheduling else ():
            put_parameter(repo, str(name), "cpu_scheduling", scheduling)
        if args.lane_threads is not None:
            put_parameter(repo, lane_name(args.model), IN_PROCESS_THREADS_PARAMETER,
                          str(args.lane_threads))
        tag = f"{spec}-{scheduling or 'shipped'}".replace(" ", "-")
        with harness.server(repo, out / f"triton-{tag}.log") as triton:
            ports, key = triton.opts.ports, "bench-" + "k" * 16
            srv = Servers(triton.http_url, f"127.0.0.1:{ports.grpc}", triton.metrics_url)
            if "front-door" not in args.routes:
                return asyncio.run(measure(srv, args))
            door_ports = free_ports(2)
            with FrontDoor(f"127.0.0.1:{ports.http}", f"127.0.0.1:{ports.grpc}",
                           FrontDoorSettings(http_port=door_ports[0], grpc_port=door_ports[1],
                                             rate_per_minute=10_000_000),
                           {"bench": key}, repository=repo) as door:
                srv.door, srv.key = door.http_url, key
                return asyncio.run(measure(srv, args))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interactive-share", type=float, default=0.15)
    parser.add_argument("--bulk-clients", type=int, default=16)
    parser.add_argument("--bulk-texts", type=int, default=16)
    parser.add_argument("--bulk", choices=("http", "sdk"), default="http")
    parser.add_argument("--model", default="embed")
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES),
                        help="how priority 1 travels (default: every route)")
    parser.add_argument("--variants", nargs="*", default=[], metavar="IxB",
                        help="front shapes to compare, each on its own server: I instances, "
                             "preferred batch B (0: none); default: the repository as it is")
    parser.add_argument("--shared-scheduling", nargs="*", default=[],
                        choices=("normal", "idle", "nice"),
                        help="each its own server: the shared front's and the encoders' "
                        "cpu_scheduling (the lane stays normal); default: as configured")
    parser.add_argument("--lane-threads", type=int, default=None,
                        help="the lane's in_process_threads (default: as configured)")
    parser.add_argument("--saturate", type=int, default=24, metavar="N",
                        help="a last phase: N clients flood the lane beside the bulk job "
                        "(0: none)")
    parser.add_argument("--loadgen-nice", type=int, default=0,
                        help="run this load generator at this nice value (0-19)")
    parser.add_argument("--url", help="HTTP host:port of a running server (default: start one)")
    parser.add_argument("--metrics-url", default=None)
    args = parser.parse_args(argv)
    if args.loadgen_nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.loadgen_nice)
    out = harness.run_dir("priority")
    results, reports = {}, []
    if args.url:
        metrics = args.metrics_url or f"http://{args.url.split(':')[0]}:{METRICS_PORT}/metrics"
        args.routes = [r for r in args.routes if r in ("shared", "lane")]
        found = asyncio.run(measure(Servers(args.url, "", metrics), args))
        results |= {f"served, {route}": f for route, f in found.items()}
    for spec in args.variants or ["as shipped"]:
        for scheduling in args.shared_scheduling or [None]:
            found = served(args, spec, scheduling, out)
            results |= {f"{spec}, shared path {scheduling or 'as configured'}, {route}": f
                        for route, f in found.items()}
    for name, (rows, rate, capacity) in results.items():
        reports.append(f"### {name}\n\n" + markdown(rows, rate, capacity, args))
    harness.write_report(out, "priority", "\n\n".join(reports), {
        name: {"capacity_rps": c, "interactive_rps": r, "phases": rows}
        for name, (rows, r, c) in results.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

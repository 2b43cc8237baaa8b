"""`tmr serve`: the CPU dev server in the foreground, with a clean shutdown on Ctrl-C or SIGTERM."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import numpy as np
from tmr_client import TritonClientError
from tmr_client.auth import API_KEY_HEADER
from tmr_client.core import DEFAULT_MODEL

from core import cpu_policy
from core.cpu_policy import UNDECIDED
from core.families.catalog import FamilyModel, catalog, missing_exports
from core.families.text_embedding import TEXT
from core.families.warmup import WARMUP_FOLDER, elements
from core.paths import PROJECT_ROOT
from core.probes import probe_target
from core.process_memory import server_memory, summary
from core.startup import startup_models
from core.variant import REVIEWED, Variant
from core.versions import served_config
from server.admin_client import AdminClient
from server.errors import ServerError
from server.fleet import Fleet
from server.front_door import FrontDoor, FrontDoorError
from server.launcher import HOME_DIR, ServerStartError, TritonServer
from server.observability import (
    PrometheusError,
    PrometheusServer,
    prometheus_values,
    write_config_dir,
)
from server.settings import (
    ALL_MODELS,
    API_KEYS_ENV,
    TRACE_RATE,
    ControlMode,
    FrontDoorSettings,
    Ports,
    ServerOptions,
)
from server.traces import PHOENIX_PORT, TraceBackend
from server.watchdog import Watchdog

WATCHDOG_PORT_OFFSET = 100  # metrics 8002 -> watchdog 8102
Say = Callable[[str], None]  # how the CLI shows a line (server/ prints nothing itself)


class ExportsMissingError(ServerStartError):
    """Raised before start when a model of the repository has no exported version."""

    exit_code = 2


class ServerDiedError(ServerError):
    """Raised when the server exited by itself, not at a stop signal."""
# The banner's curl example: one text, in KServe v2 JSON, to the default text front.
TEXT_BODY = json.dumps({"inputs": [{"name": TEXT.name, "datatype": "BYTES", "shape": [1, 1],
                                    "data": ["hello"]}]}, separators=(",", ":"))


@dataclass(frozen=True)
class ServeOptions:
    """What `tmr serve` runs: the server and what starts beside it."""

    repository: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    control_mode: ControlMode
    variant: Variant | None  # --model-config-name; None: what server/profile.py selects
    log_verbose: int
    extra: tuple[str, ...]
    no_check: bool
    no_watchdog: bool
    prometheus: bool
    prometheus_port: int
    front_door: bool
    front_door_http_port: int
    front_door_grpc_port: int
    load_all: bool  # every model at start, not core.startup's rule
    models: tuple[str, ...] = ()  # only these fronts or families (core.startup.select)
    replicas: int = 1  # more than one: a fleet behind the front door (server/fleet.py)
    reviewed: bool = False  # serve config.pbtxt even where a host profile fits
    trace: bool = False  # Triton's OpenTelemetry traces to Phoenix (server/traces.py)
    trace_rate: int = TRACE_RATE
    trace_port: int = PHOENIX_PORT
    bulk_cpu: str | None = None  # --bulk-cpu: idle or nice; None: decided on this host


def server_options(args: ServeOptions, say: Say | None = None) -> ServerOptions:
    """The server's options from `tmr serve`'s. With `say`, decided as `tmr serve` does,
    each decision said: the configs it serves (the host profile where it fits, else the
    reviewed ones: server/profile.py) and where its bulk work yields the CPU
    (core/cpu_policy.py). Without, the configs asked for (else the reviewed ones) and no
    bulk decision, as a test or a script starts a server."""
    variant, bulk = args.variant or REVIEWED, UNDECIDED
    if say is not None:
        from server.profile import select

        variant, profile_line = select(args.repository, args.reviewed, args.variant)
        say(profile_line)
        bulk = cpu_policy.decide(variant, None if args.bulk_cpu else cpu_policy.others_share(),
                                 args.bulk_cpu, args.replicas)
        say(bulk.line())
    repository = args.repository.resolve()
    return ServerOptions(
        repository=repository,
        ports=Ports(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port),
        control_mode=args.control_mode,
        variant=variant,
        log_verbose=args.log_verbose,
        extra=tuple(args.extra),
        load_models=ALL_MODELS if args.load_all else tuple(
            startup_models(repository, variant, wanted=args.models)),
        bulk_cpu=bulk,
    )


def tmr_command() -> str:
    """How to call `tmr` from the current directory (the venv need not be activated)."""
    script = Path(sys.executable).parent / "tmr"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def loaded_models(server: TritonServer) -> tuple[str, list[str]]:
    """The models the server loaded, and those it left to load on demand, from its
    repository index (the operator client); and the loaded ones' names."""
    try:
        with AdminClient(server.http_url) as admin:
            ready, waiting = admin.ready_models(), admin.idle_models()
    except TritonClientError as err:
        return f"its repository index is unavailable: {err}", []
    text = f"{len(ready)} ready: {', '.join(ready)}"
    if waiting:
        text += (f"\n  on demand   {', '.join(waiting)}  (`tmr promote` or the load API "
                 "loads one; `tmr serve --load-all` loads every model at start)")
    return text, ready


def banner(server: TritonServer, models: str, ready: Sequence[str] = ()) -> str:
    """What serves where; the `embed` examples only where the SDK's default front is ready
    (a server of other families alone gets its own example call below)."""
    examples = [
        "Try it:",
        f"  {tmr_command()} embed --url {server.http_url} 'Triton serves sentence embeddings.'",
        f"  curl -s http://{server.http_url}/v2/models/{DEFAULT_MODEL}/infer -d "
        f"'{TEXT_BODY}' | head -c 200",
    ] if DEFAULT_MODEL in ready else []
    return "\n".join([
        "Triton 2.51.0 is serving the CPU model repository",
        f"  repository  {server.opts.repository}",
        f"  models      {models}",
        f"  HTTP        http://{server.http_url}   (KServe v2)",
        f"  gRPC        {server.grpc_url}",
        f"  metrics     {server.metrics_url}",
        f"  log         {server.log_path}",
        *examples,
        "Ctrl-C or SIGTERM stops it.",
    ])


def tracked_sample(folder: Path, name: str) -> bytes | None:
    """The model's tracked warmup sample of input `name` (a real text or photo written by
    export/warmup.py), or None where its folder holds none."""
    path = folder / WARMUP_FOLDER / name
    return elements(path.read_bytes())[0] if path.is_file() else None


def describe_sample(sample: bytes) -> str:
    """What a sample is, in a few words: a text's start, or an image's size and format."""
    try:
        text = sample.decode()
    except UnicodeDecodeError:
        pass
    else:
        return repr(text if len(text) <= 40 else text[:37] + "...")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(sample)) as image:
            return f"a {image.width}x{image.height} {image.format}, {len(sample):,} bytes"
    except UnidentifiedImageError:
        return f"{len(sample):,} bytes"


def shown_path(path: Path) -> str:
    """`path` relative to the project, where it lies inside it."""
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


def example_call(server: TritonServer, model: FamilyModel) -> str:
    """One real call through a family model's front, over the SDK's generic call, with the
    front's tracked warmup sample (a real text or photo; else the health checks' probe,
    core.probes); the line says what was sent, and the family what its answer shows."""
    from tmr_client import Client

    fam, front = model.family, str(model.front)
    folder = server.opts.repository / front
    target = probe_target(served_config(folder, server.opts.variant))
    if target is None:  # the catalog only lists family models, which all have one
        return f"{front}: no probe to call it with"
    names = tuple(target.inputs)  # a pair family's front takes two (QUERY, DOCUMENT)
    rows = np.concatenate([target.inputs[n] for n in names], axis=1)
    sent = "the health probe's input"
    samples = [tracked_sample(folder, n) for n in names]
    if None not in samples:
        rows = np.array([samples], dtype=np.object_)
        sent = ", ".join(f"{shown_path(folder / WARMUP_FOLDER / n)} ({describe_sample(s)})"
                         for n, s in zip(names, samples))
    with Client(server.http_url, protocol="http", model=front) as client:
        answer = client.infer(rows, names if len(names) > 1 else names[0],
                              [t.name for t in fam.contract.front_outputs])
    return f"{front} answered: {fam.probes.describe_answer(answer.outputs)}, for {sent}"


def example_calls(server: TritonServer) -> list[str]:
    """One real call through the front model of every family model the server holds."""
    with AdminClient(server.http_url) as admin:
        ready = set(admin.ready_models())
    return [example_call(server, model)
            for model in catalog(server.opts.repository, server.opts.variant)
            if model.front in ready]


def memory_line(server: TritonServer) -> str:
    """What the server holds once its fronts answered, from /proc (core/process_memory)."""
    return f"memory: {summary(server_memory(server.pid))}"


def start_watchdog(server: TritonServer, args: ServeOptions, say: Say) -> Watchdog | None:
    """The watchdog reloads through the load API, so it runs in explicit mode only."""
    if args.no_watchdog or server.opts.control_mode != "explicit":
        return None
    port = server.opts.ports.metrics + WATCHDOG_PORT_OFFSET
    watchdog = Watchdog(f"localhost:{server.opts.ports.http}", server.metrics_url,
                        interval_s=5.0, metrics_port=port)
    watchdog.start()
    say(f"  watchdog    http://localhost:{port}/metrics  (reloads dead or stalled models)")
    return watchdog


def start_prometheus(server: TritonServer, args: ServeOptions, say: Say
                     ) -> PrometheusServer | None:
    """`--prometheus`: the real Prometheus scraping this server and its watchdog, with the
    production rules; its data stays in .triton/prometheus/data between runs."""
    if not getattr(args, "prometheus", False):
        return None
    ports = server.opts.ports
    config_dir = write_config_dir(HOME_DIR / "prometheus", prometheus_values(
        f"localhost:{ports.metrics}", f"localhost:{ports.metrics + WATCHDOG_PORT_OFFSET}")).parent
    prometheus = PrometheusServer(config_dir, port=args.prometheus_port,
                                  data_dir=config_dir / "data")
    try:
        prometheus.start()
    except PrometheusError as err:
        say(f"warning: {err}")
        return None
    say(f"  prometheus  {prometheus.url}/alerts  (rules: server/prometheus/rules.yml)")
    return prometheus


def door_settings(args: ServeOptions) -> FrontDoorSettings:
    """The front door's ports, and with `--trace` the share of requests it starts a
    trace for (the same 1 in N as Triton's own sampling)."""
    return FrontDoorSettings(http_port=args.front_door_http_port,
                             grpc_port=args.front_door_grpc_port,
                             trace_rate=args.trace_rate if getattr(args, "trace", False)
                             else 0)


def start_front_door(server: TritonServer, args: ServeOptions, say: Say) -> FrontDoor | None:
    """`--front-door`: nginx with API keys, limits and the 400 mapping (docs/front_door.md)."""
    if not getattr(args, "front_door", False):
        return None
    settings = door_settings(args)
    ports = server.opts.ports
    front_door = FrontDoor(f"127.0.0.1:{ports.http}", f"127.0.0.1:{ports.grpc}", settings,
                           repository=server.opts.repository)
    front_door.start()
    front_door.wait_ready()
    name, key = next(iter(front_door.api_keys.items()))
    say("\n".join([
        f"  front door  http://{front_door.http_url}   gRPC {front_door.grpc_url}   "
        f"(clients: {', '.join(front_door.api_keys)}, from {API_KEYS_ENV} or the dev default)",
        f"              {settings.rate_per_minute // 60} requests/s per key, burst "
        f"{settings.burst}, bodies up to {settings.max_body_bytes} bytes; "
        f"log {front_door.error_log}",
        f"  curl -s http://{front_door.http_url}/v2/models/{DEFAULT_MODEL}/infer -H "
        f"'{API_KEY_HEADER}: {key}' -d '{TEXT_BODY}' | head -c 200   # as {name}",
    ]))
    return front_door


def start_traces(args: ServeOptions, say: Say) -> TraceBackend | None:
    """`--trace`: Phoenix and the OTLP relay, before the server that sends them spans."""
    if not args.trace:
        return None
    backend = TraceBackend(HOME_DIR / "traces", port=args.trace_port)
    backend.start()
    say(f"traces go to Phoenix at {backend.url}: 1 request in {args.trace_rate}, and every "
        f"request with a traceparent (OTLP {backend.otlp_url})")
    return backend


def serve(args: ServeOptions, say: Say) -> None:
    """Serve in the foreground until SIGINT or SIGTERM; `say` shows each line. Raises the
    server layer's errors (a stale profile: core's ProfileError) for the CLI to report.
    Decides at this level first (traces, the options), then goes down to run them."""
    from dataclasses import replace

    traces = start_traces(args, say)
    try:
        opts = server_options(args, say)
        if traces is not None:
            opts = replace(opts, trace_url=traces.otlp_url, trace_rate=args.trace_rate)
        missing = missing_exports(opts.repository)
        if missing:
            raise ExportsMissingError(f"no exported version for {', '.join(missing)}; run "
                                      "`tmr export NAME` for its model (or `make setup`) first")
        (serve_fleet if args.replicas > 1 else serve_one)(args, opts, say)
    finally:
        if traces is not None:
            traces.stop()


def serve_one(args: ServeOptions, opts: ServerOptions, say: Say) -> None:
    """One server in the foreground, with what runs beside it, until a signal."""
    server = TritonServer(opts)
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        server.wait_ready()
        say(banner(server, *loaded_models(server)))
        front_door = start_front_door(server, args, say)
    except (ServerStartError, FrontDoorError):
        server.stop()
        raise
    if not args.no_check:
        for line in example_calls(server):
            say(line)
    say(memory_line(server))
    watchdog = start_watchdog(server, args, say)
    prometheus = start_prometheus(server, args, say)
    while not stopping and server.process is not None and server.process.poll() is None:
        time.sleep(0.2)
    if watchdog is not None:
        watchdog.stop()
    if prometheus is not None:
        prometheus.stop()
    if front_door is not None:  # readiness first: new requests get 503 from now on
        front_door.refuse_new()
    say("stopping tritonserver (waiting for in-flight requests)...")
    code = server.stop()
    if front_door is not None:
        say(f"stopping the front door: nginx exited with code {front_door.close()}")
    say(f"tritonserver exited with code {code}")
    if server.stop_report:
        say(server.stop_report)
    if not stopping:
        raise ServerDiedError(f"tritonserver exited by itself with code {code}; see "
                              f"{server.log_path}")


def fleet_banner(fleet: Fleet) -> str:
    lines = [f"A fleet of {len(fleet.replicas)} Triton 2.51.0 replicas behind the front door"]
    lines += [f"  replica {i}   HTTP {s.http_url}   gRPC {s.grpc_url}   metrics "
              f"{s.metrics_url}   log {s.log_path}" for i, s in enumerate(fleet.replicas)]
    name, key = next(iter(fleet.door.api_keys.items()))
    lines += [f"  front door  http://{fleet.door.http_url}   gRPC {fleet.door.grpc_url}   "
              f"(client {name}, key {key})",
              f"  curl -s http://{fleet.door.http_url}/v2/models/{DEFAULT_MODEL}/infer -H "
              f"'x-api-key: {key}' -d '{TEXT_BODY}' | head -c 200",
              f"A replica that dies is started again; `kill -HUP {os.getpid()}` restarts them "
              "one at a time without failing a request; Ctrl-C or SIGTERM stops the fleet."]
    return "\n".join(lines)


def serve_fleet(args: ServeOptions, opts: ServerOptions, say: Say) -> None:
    """`tmr serve --replicas N`: N replicas behind the front door, supervised."""
    fleet = Fleet(opts, args.replicas, HOME_DIR / "fleet", door_settings(args))
    events: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: events.append("stop"))
    signal.signal(signal.SIGINT, lambda *_: events.append("stop"))
    signal.signal(signal.SIGHUP, lambda *_: events.append("rolling restart"))
    try:
        fleet.start()
    except (ServerStartError, FrontDoorError):
        fleet.stop()
        raise
    say(fleet_banner(fleet))
    while "stop" not in events:
        for line in fleet.heal():  # a replica that died; one that does not come back
            say(line)
        if "rolling restart" in events:
            events.remove("rolling restart")
            say("rolling restart: one replica at a time")
            fleet.rolling_restart()
            say("rolling restart done")
        time.sleep(0.2)
    say("stopping the front door, then every replica...")
    codes = fleet.stop()
    say(f"replicas exited with codes {codes}")

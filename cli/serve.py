"""`tmr serve`: the CPU Triton dev server in the foreground (server/serve.py runs it)."""

from __future__ import annotations

import argparse

from cli.errors import UsageError
from cli.options import (
    add_command,
    add_control_mode,
    add_repository,
    existing_repository,
    options,
)
from core.variant import Variant
from server.observability import PROMETHEUS_PORT
from server.serve import ServeOptions
from server.settings import TRACE_RATE, FrontDoorSettings, Ports
from server.traces import PHOENIX_PORT


def make_options(args: argparse.Namespace) -> ServeOptions:
    models = tuple(name for value in args.models or () for name in value.split(",") if name)
    if models and args.load_all:
        raise UsageError("--models and --load-all: choose one")
    if models and args.control_mode == "poll":
        raise UsageError("--models needs explicit mode (poll mode loads every model of "
                         "the repository)")
    variant = Variant(args.model_config_name) if args.model_config_name else None
    return options(ServeOptions, args, extra=tuple(args.extra), models=models, variant=variant,
                   repository=existing_repository(args.repository))


def serve_command(opts: ServeOptions) -> int:
    """The server's lines on stdout as they come; its errors are the error boundary's."""
    from server.serve import serve

    serve(opts, lambda line: print(line, flush=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "serve", "start the CPU Triton dev server in the foreground",
                         serve_command, make_options)
    ports, door = Ports(), FrontDoorSettings()
    add_repository(parser)
    parser.add_argument("--http-port", type=int, default=ports.http, help="Triton's HTTP port")
    parser.add_argument("--grpc-port", type=int, default=ports.grpc, help="Triton's gRPC port")
    parser.add_argument("--metrics-port", type=int, default=ports.metrics,
                        help="Triton's Prometheus metrics port")
    add_control_mode(parser)
    parser.add_argument("--model-config-name", default=None,
                        help="load configs/<name>.pbtxt where a model has one (e.g. gpu); "
                        "default: the host profile when it fits (`tmr tune --show`)")
    parser.add_argument("--reviewed", action="store_true",
                        help="serve the reviewed configs (config.pbtxt) even where `tmr tune` "
                        "wrote a host profile that fits this host")
    parser.add_argument("--bulk-cpu", default=None, metavar="POLICY",
                        choices=("idle", "nice"),
                        help="how bulk work (each front's shared path and its encoders) "
                        "yields the CPU to the interactive lanes: idle (SCHED_IDLE) or nice "
                        "(nice 10); default: decided on this host from its other processes' "
                        "load (docs/serving.md#bulk-cpu)")
    parser.add_argument("--log-verbose", type=int, default=0,
                        help="tritonserver's --log-verbose level (0: off)")
    parser.add_argument("--load-all", action="store_true",
                        help="load every model at start; by default the fronts, the encoders "
                        "they route to and the models outside the families (core/startup.py), "
                        "the others on demand (explicit mode; poll mode loads every model)")
    parser.add_argument("--models", nargs="+", metavar="FRONT",
                        help="serve only these fronts or families (e.g. embed, or "
                        "text_embedding), with their lanes, the encoders they call and "
                        "health; the others are not loaded (names may be comma-separated)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the example call after start")
    parser.add_argument("--no-watchdog", action="store_true",
                        help="do not reload models whose stub died or whose queue stalled")
    parser.add_argument("--prometheus", action="store_true",
                        help="also run Prometheus with the alert rules (docs/observability.md)")
    parser.add_argument("--prometheus-port", type=int, default=PROMETHEUS_PORT,
                        help="Prometheus's port, with --prometheus")
    parser.add_argument("--front-door", action="store_true",
                        help="also run nginx in front: API keys, limits (docs/front_door.md)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="more than 1: that many replicas (ports +10 each) behind the "
                        "front door, restarted when one dies; SIGHUP restarts them one at a "
                        "time (docs/scaling.md)")
    parser.add_argument("--trace", action="store_true",
                        help="OpenTelemetry traces to Phoenix on --trace-port (make traces "
                        "installs it; docs/observability.md)")
    parser.add_argument("--trace-rate", type=int, default=TRACE_RATE,
                        help="trace 1 request in N (0: only those that carry a W3C "
                        "traceparent, which are always traced; default %(default)s)")
    parser.add_argument("--trace-port", type=int, default=PHOENIX_PORT,
                        help="Phoenix's UI and API (default %(default)s)")
    parser.add_argument("--front-door-http-port", type=int, default=door.http_port,
                        help="the front door's HTTP port, with --front-door")
    parser.add_argument("--front-door-grpc-port", type=int, default=door.grpc_port,
                        help="the front door's gRPC port, with --front-door")
    parser.add_argument("extra", nargs="*",
                        help="extra tritonserver flags, after `--` (e.g. -- --log-info=false)")

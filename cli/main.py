"""`tmr`: the project's command line (serve, export, embed).

Each subcommand imports its module lazily so that `tmr embed` does not pay for torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from client.core import DEFAULT_MODEL
from core.paths import DEFAULT_REPOSITORY
from server.observability import PROMETHEUS_PORT
from server.settings import FrontDoorSettings, Ports


def add_server_options(parser: argparse.ArgumentParser) -> None:
    defaults = Ports()
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--http-port", type=int, default=defaults.http)
    parser.add_argument("--grpc-port", type=int, default=defaults.grpc)
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics)
    parser.add_argument("--control-mode", choices=["explicit", "poll"], default="explicit")
    parser.add_argument("--model-config-name", default=None,
                        help="load configs/<name>.pbtxt where a model has one (e.g. gpu)")
    parser.add_argument("--log-verbose", type=int, default=0)
    parser.add_argument("extra", nargs="*",
                        help="extra tritonserver flags, after `--` (e.g. -- --log-info=false)")


def cmd_serve(args: argparse.Namespace) -> int:
    from server.serve import serve

    return serve(args)


def cmd_embed(args: argparse.Namespace) -> int:
    from cli.embed import embed_command

    return embed_command(args)


def cmd_degrade(args: argparse.Namespace) -> int:
    from server.admin import AUTO, force_level_explicit, force_level_poll, wait_for_level

    level = AUTO if args.level == "auto" else int(args.level)
    if args.poll:
        force_level_poll(args.repository, level, args.model)
    else:
        force_level_explicit(args.url, level, args.model)
    reported = wait_for_level(args.url, level, args.timeout_s, model=args.model)
    print(f"{args.model} now reports: {reported}")
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from server.admin import deep_health

    checks = deep_health(args.url, args.models)
    for c in checks:
        print(f"{'OK  ' if c.ok else 'FAIL'} {c.model:<20} {c.ms:>8.1f} ms  {c.detail}")
    return 0 if all(c.ok for c in checks) else 1


def cmd_versions(args: argparse.Namespace) -> int:
    from cli.release import versions_command

    return versions_command(args)


def cmd_gate(args: argparse.Namespace) -> int:
    from cli.release import gate_command

    return gate_command(args)


def cmd_release(args: argparse.Namespace) -> int:
    from cli.release import release_command

    return release_command(args)


def add_release_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="localhost:8000", help="the server's HTTP host:port")
    parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--mode", choices=["explicit", "poll"], default="explicit",
                        help="the server's model control mode")
    parser.add_argument("--timeout-s", type=float, default=90.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmr", description=__doc__)
    parser.add_argument("--log-json", action="store_true",
                        help="log JSON lines (also: TMR_LOG_JSON=1); see docs/observability.md")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the CPU Triton dev server in the foreground")
    add_server_options(serve)
    serve.add_argument("--no-check", action="store_true",
                       help="skip the example embed call after start")
    serve.add_argument("--no-watchdog", action="store_true",
                       help="do not reload models whose stub died or whose queue stalled")
    serve.add_argument("--prometheus", action="store_true",
                       help="also run Prometheus with the alert rules (docs/observability.md)")
    serve.add_argument("--prometheus-port", type=int, default=PROMETHEUS_PORT)
    serve.add_argument("--front-door", action="store_true",
                       help="also run nginx in front: API keys, limits (docs/front_door.md)")
    serve.add_argument("--front-door-http-port", type=int, default=FrontDoorSettings().http_port)
    serve.add_argument("--front-door-grpc-port", type=int, default=FrontDoorSettings().grpc_port)
    serve.set_defaults(func=cmd_serve)

    from cli.export import add_add_parser, add_export_parser

    add_export_parser(sub)
    add_add_parser(sub)

    embed = sub.add_parser("embed", help="embed texts through the running server")
    embed.add_argument("texts", nargs="+")
    embed.add_argument("--url", default=None, help="host:port (default: the protocol's port)")
    embed.add_argument("--protocol", choices=["http", "grpc"], default="http")
    embed.add_argument("--priority", type=int, default=None)
    embed.add_argument("--timeout-ms", type=int, default=None)
    embed.add_argument("--model", default=DEFAULT_MODEL)
    embed.set_defaults(func=cmd_embed)

    degrade = sub.add_parser("degrade", help="force a front model's degradation level (or `auto`)")
    degrade.add_argument("--model", default=DEFAULT_MODEL, help="the front model")
    degrade.add_argument("--level", required=True, choices=["auto", "0", "1", "2", "3", "4"])
    degrade.add_argument("--url", default="localhost:8000", help="the server's HTTP host:port")
    degrade.add_argument("--poll", action="store_true",
                         help="poll mode: edit config.pbtxt instead of calling the load API")
    degrade.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    degrade.add_argument("--timeout-s", type=float, default=30.0)
    degrade.set_defaults(func=cmd_degrade)

    health = sub.add_parser("health", help="deep health: a real inference through every model")
    health.add_argument("--url", default="localhost:8000", help="the server's HTTP host:port")
    health.add_argument("--models", nargs="+", default=None,
                        help="only these (default: every family model the server loads)")
    health.set_defaults(func=cmd_health)

    versions = sub.add_parser("versions", help="versions on disk, selected, and READY")
    versions.add_argument("model", nargs="?")
    versions.add_argument("--url", default="localhost:8000")
    versions.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    versions.set_defaults(func=cmd_versions)

    gate = sub.add_parser("gate", help="release gate: fidelity and speed of a candidate")
    gate.add_argument("model")
    gate.add_argument("version", type=int)
    gate.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
    gate.set_defaults(func=cmd_gate)

    promote = sub.add_parser("promote", help="serve VERSION of MODEL (gated)")
    promote.add_argument("model")
    promote.add_argument("version", type=int)
    promote.add_argument("--no-gate", action="store_true")
    add_release_options(promote)
    promote.set_defaults(func=cmd_release, action="promote")

    rollback = sub.add_parser("rollback", help="return MODEL to its previous (or --to) version")
    rollback.add_argument("model")
    rollback.add_argument("--to", type=int, default=None)
    add_release_options(rollback)
    rollback.set_defaults(func=cmd_release, action="rollback", no_gate=True)

    from perf.sweep import add_parser as add_perf_parser

    add_perf_parser(sub)
    from cli.watchdog import add_parser as add_watchdog_parser

    add_watchdog_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from server.log_format import configure_logging, json_requested

    args = build_parser().parse_args(argv)
    configure_logging(json_requested(args.log_json))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""`tmr perf sweep|compare|check|plan|capacity`: the command line of server/sweep.py and
server/plan.py, which take the typed options built here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli.names import ENCODER, resolve_name
from cli.options import (
    ENVIRONMENT_HELP,
    HelpFormatter,
    add_model,
    add_repository,
    add_server,
    model_of,
    options,
    parse_url,
    text_front,
)
from core.paths import P99_OBJECTIVE_MS


def register(sub: argparse._SubParsersAction) -> None:
    from cli.options import SUMMARIES

    summary = "perf_analyzer sweeps, comparisons, baseline checks, batch and replica plans"
    SUMMARIES["perf"] = summary
    perf = sub.add_parser("perf", description=summary, epilog=ENVIRONMENT_HELP,
                          formatter_class=HelpFormatter)
    verbs = perf.add_subparsers(dest="verb", required=True, metavar="VERB", prog="tmr perf")
    add_sweep(verbs)
    add_compare_and_check(verbs)
    add_plan(verbs)
    add_capacity(verbs)


def shown(text_of: Callable[[Any], str]) -> Callable[[Any], int]:
    """A verb that prints what the server layer's function returns (server/ prints none)."""
    def run(opts: Any) -> int:
        print(text_of(opts))
        return 0
    return run


def check_command(opts: Any) -> int:
    """The ratios on stdout, each regression on stderr; exit 1 when there is one."""
    from server.sweep import check_result

    text, problems = check_result(opts)
    print(text)
    for problem in problems:
        print(f"REGRESSION {problem}", file=sys.stderr)
    return 1 if problems else 0


def verb(verbs: argparse._SubParsersAction, name: str, summary: str, run: object,
         make: object) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name, help=summary, description=summary,
                              formatter_class=HelpFormatter)
    parser.set_defaults(run=run, make=make)
    return parser


def ms(seconds: float) -> float:
    """The perf code's milliseconds from the command line's seconds."""
    return seconds * 1000.0


def add_seconds(parser: argparse.ArgumentParser, name: str, default_ms: float,
                help: str) -> None:
    """`--NAME-s SECONDS`, defaulting to `default_ms`."""
    parser.add_argument(f"--{name}-s", dest=name.replace("-", "_") + "_s", type=float,
                        default=default_ms / 1000.0, help=f"{help}, in seconds")


def add_p99_budget(parser: argparse.ArgumentParser) -> None:
    add_seconds(parser, "p99-budget", P99_OBJECTIVE_MS, "the p99 objective")


def add_sweep(verbs: argparse._SubParsersAction) -> None:
    from server.sweep import SweepOptions, sweep_report

    def make(a: argparse.Namespace) -> SweepOptions:
        url, protocol = parse_url(a.url, a.protocol, "grpc") if a.url else (
            None, a.protocol or "grpc")
        return options(SweepOptions, a, model=model_of(a, text_front()), url=url,
                       protocol=protocol, p99_budget_ms=ms(a.p99_budget_s),
                       interval_ms=round(ms(a.interval_s)))

    parser = verb(verbs, "sweep", "sweep concurrency for a model", shown(sweep_report), make)
    add_model(parser, default=text_front(), optional=True,
              help="the model perf_analyzer calls")
    add_server(parser, protocol="grpc", start_own=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32],
                        help="the concurrency levels, one run each")
    add_p99_budget(parser)
    add_seconds(parser, "interval", 3000, "perf_analyzer's measurement window")
    parser.add_argument("--stability-percentage", type=int, default=20,
                        help="perf_analyzer gives up (exit 2) when windows differ more, in "
                             "percent (perf_analyzer's own option)")


def add_compare_and_check(verbs: argparse._SubParsersAction) -> None:
    from server.sweep import CheckOptions, CompareOptions, compare_text

    parser = verb(verbs, "compare", "B against A, level by level", shown(compare_text),
                  lambda a: options(CompareOptions, a))
    parser.add_argument("a", type=Path, metavar="A", help="the earlier sweep result")
    parser.add_argument("b", type=Path, metavar="B", help="the later sweep result")
    parser = verb(verbs, "check", "a result against its checked-in baseline", check_command,
                  lambda a: options(CheckOptions, a))
    parser.add_argument("result", type=Path, metavar="RESULT", help="a sweep result")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="the baseline to hold it to (default: the checked-in one)")
    parser.add_argument("--min-throughput-ratio", type=float, default=0.8,
                        help="the least throughput, as a fraction of the baseline's")
    parser.add_argument("--max-p99-ratio", type=float, default=1.5,
                        help="the most p99, as a multiple of the baseline's")


def add_plan(verbs: argparse._SubParsersAction) -> None:
    from server.plan import PlanOptions, plan_report

    parser = verb(verbs, "plan", "derive max/preferred batch and queue delay",
                  shown(plan_report),
                  lambda a: options(PlanOptions, a, latency_budget_ms=ms(a.latency_budget_s),
                                    model=resolve_name(a.repository, a.model, ENCODER)))
    add_model(parser, help="the encoder model")
    add_repository(parser)
    parser.add_argument("--memory-budget-mb", type=float, default=2048.0,
                        help="the memory a batch may take, in MB")
    add_seconds(parser, "latency-budget", P99_OBJECTIVE_MS, "the latency a batch must fit")
    parser.add_argument("--arrival-rps", type=float, default=200.0,
                        help="the expected arrival rate, requests per second")
    parser.add_argument("--write", action="store_true", help="write the proposal to config.pbtxt")
    parser.add_argument("--check", action="store_true",
                        help="sweep the proposal on a served copy")


def add_capacity(verbs: argparse._SubParsersAction) -> None:
    from server.plan import CapacityOptions, capacity_text

    parser = verb(verbs, "capacity", "replicas for a target peak, from a measured sweep",
                  shown(capacity_text),
                  lambda a: options(CapacityOptions, a, p99_budget_ms=ms(a.p99_budget_s)))
    parser.add_argument("result", type=Path, metavar="RESULT",
                        help="a `tmr perf sweep` folder or its sweep.json")
    parser.add_argument("--target-rps", type=float, required=True, help="the peak to serve")
    add_p99_budget(parser)
    parser.add_argument("--headroom", type=float, default=0.2,
                        help="spare share above the target, a fraction")

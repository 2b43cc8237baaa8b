"""`tmr perf sweep|compare|check|plan|capacity`: the command line of perf/sweep.py and
perf/plan_cli.py, which take the typed options built here."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.options import (
    ENVIRONMENT_HELP,
    add_model,
    add_repository,
    add_server,
    model_of,
    options,
    text_front,
)
from core.paths import P99_OBJECTIVE_MS


def register(sub: argparse._SubParsersAction) -> None:
    from cli.options import SUMMARIES

    summary = "perf_analyzer sweeps, comparisons, baseline checks, batch and replica plans"
    SUMMARIES["perf"] = summary
    perf = sub.add_parser("perf", description=summary, epilog=ENVIRONMENT_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = perf.add_subparsers(dest="verb", required=True, metavar="VERB", prog="tmr perf")
    add_sweep(verbs)
    add_compare_and_check(verbs)
    add_plan(verbs)
    add_capacity(verbs)


def verb(verbs: argparse._SubParsersAction, name: str, summary: str, run: object,
         make: object) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name, help=summary, description=summary)
    parser.set_defaults(run=run, make=make)
    return parser


def add_p99_budget(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--p99-budget-ms", type=float, default=P99_OBJECTIVE_MS,
                        help=f"the p99 objective (default {P99_OBJECTIVE_MS:g})")


def add_sweep(verbs: argparse._SubParsersAction) -> None:
    from perf.sweep import SweepOptions, cmd_sweep

    parser = verb(verbs, "sweep", "sweep concurrency for a model", cmd_sweep,
                  lambda a: options(SweepOptions, a, model=model_of(a, text_front())))
    add_model(parser, default=text_front(), optional=True, old_option=True)
    add_server(parser, protocol="grpc", start_own=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    add_p99_budget(parser)
    parser.add_argument("--interval-ms", type=int, default=3000,
                        help="perf_analyzer's measurement window")
    parser.add_argument("--stability-percentage", type=int, default=20,
                        help="perf_analyzer gives up (exit 2) when windows differ more")


def add_compare_and_check(verbs: argparse._SubParsersAction) -> None:
    from perf.sweep import CheckOptions, CompareOptions, cmd_check, cmd_compare

    parser = verb(verbs, "compare", "B against A, level by level", cmd_compare,
                  lambda a: options(CompareOptions, a))
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser = verb(verbs, "check", "a result against its checked-in baseline", cmd_check,
                  lambda a: options(CheckOptions, a))
    parser.add_argument("result", type=Path)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--min-throughput-ratio", type=float, default=0.8)
    parser.add_argument("--max-p99-ratio", type=float, default=1.5)


def add_plan(verbs: argparse._SubParsersAction) -> None:
    from perf.plan_cli import PlanOptions, cmd_plan

    parser = verb(verbs, "plan", "derive max/preferred batch and queue delay", cmd_plan,
                  lambda a: options(PlanOptions, a))
    add_model(parser, help="the encoder model")
    add_repository(parser)
    parser.add_argument("--memory-budget-mb", type=float, default=2048.0)
    parser.add_argument("--latency-budget-ms", type=float, default=P99_OBJECTIVE_MS,
                        help="the latency a batch must fit")
    parser.add_argument("--arrival-rps", type=float, default=200.0)
    parser.add_argument("--write", action="store_true", help="write the proposal to config.pbtxt")
    parser.add_argument("--check", action="store_true",
                        help="sweep the proposal on a served copy")


def add_capacity(verbs: argparse._SubParsersAction) -> None:
    from perf.plan_cli import CapacityOptions, cmd_capacity

    parser = verb(verbs, "capacity", "replicas for a target peak, from a measured sweep",
                  cmd_capacity, lambda a: options(CapacityOptions, a))
    parser.add_argument("result", type=Path, help="a `tmr perf sweep` folder or its sweep.json")
    parser.add_argument("--target-rps", type=float, required=True, help="the peak to serve")
    add_p99_budget(parser)
    parser.add_argument("--headroom", type=float, default=0.2, help="spare share above the target")

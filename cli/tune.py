"""`tmr tune`: measure this host and write the host profile that `tmr serve` serves
(server/tune.py measures, core/host_profile.py decides); `tmr tune --show` says what serves
and why."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cli.options import add_command, add_json, add_repository, existing_repository, options
from core.host_profile import DEFAULT_MEMORY_BUDGET_MB

MODE_FLAGS = ("quick", "full")  # default: neither


@dataclass(frozen=True)
class TuneOptions:
    """What `tmr tune` does: show, check, or measure in one mode."""

    repository: Path
    mode: str
    memory_budget_mb: float
    show: bool
    if_stale: bool
    json: bool = False
    objective_ms: float | None = None  # score at this p99 (default: the tuner's rule)
    only: tuple[str, ...] = ()  # `tmr add`: the models added, timed alone (server/tune.py)


def make_options(args: argparse.Namespace) -> TuneOptions:
    mode = next((m for m in MODE_FLAGS if getattr(args, m)), "default")
    return options(TuneOptions, args, mode=mode,
                   repository=existing_repository(args.repository))


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "tune", "measure this host and write the profile `tmr serve` "
                         "serves", tune_command, make_options)
    add_repository(parser)
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true",
                       help="2 rounds at 1 to 8 clients (about 1.5 min on 2 cores)")
    speed.add_argument("--full", action="store_true",
                       help="5 rounds at 1 to 32 clients; several encoder instances, "
                       "TorchScript and OpenVINO FP32 too (about 8 min)")
    parser.add_argument("--memory-budget", dest="memory_budget_mb", type=float,
                        default=DEFAULT_MEMORY_BUDGET_MB, metavar="MB",
                        help="refuse a candidate whose whole server holds more RSS than this "
                        "(default %(default).0f)")
    parser.add_argument("--objective-ms", type=float, default=None, metavar="MS",
                        help="score every candidate by its requests/s at this p99 (default: "
                        "60 ms, or twice the reviewed configs' p99 with one client where "
                        "that is more)")
    parser.add_argument("--show", action="store_true",
                        help="say what serves on this host and why; measure nothing")
    parser.add_argument("--if-stale", action="store_true",
                        help="measure only when there is no profile or it no longer fits "
                        "(what `make setup` runs)")
    add_json(parser)


def progress_bar(started: float) -> Callable[[str, float], None]:
    """A one-line progress bar on stderr: fraction, elapsed seconds, the current step."""
    def show(what: str, done: float) -> None:
        filled = int(done * 30)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done:4.0%} "
                         f"{time.monotonic() - started:4.0f}s  {what[:60]:<60}")
        if done >= 1.0:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return show


def tune_command(opts: TuneOptions) -> int:
    """A ProfileError is the error boundary's one line and exit 2 (cli/errors.py)."""
    from core.tune_record import changes_here
    from server.profile import status

    if opts.show:
        return show(opts)
    if opts.if_stale:
        fits, why = status(opts.repository)
        if fits and not changes_here(opts.repository):  # measure what changed
            if opts.json:
                return show(opts)
            print(f"tmr tune: the host profile fits this host ({why}); nothing to do")
            return 0
        print(f"tmr tune: {why}: tuning", file=sys.stderr)
    from export.gate import precision_gate
    from server.tune import NothingToTime, tune

    try:
        tune(opts.repository, precision_gate, opts.mode, opts.memory_budget_mb,
             progress_bar(time.monotonic()), objective_ms=opts.objective_ms, only=opts.only)
    except NothingToTime as err:
        print(f"tmr tune: {err}")
        return 0
    return show(opts)


def record_json(repository: Path) -> dict | None:
    """The record as JSON, or None (none written, or unreadable: `status` says which)."""
    from core.host_profile import ProfileError
    from core.tune_record import read_record

    try:
        record = read_record(repository)
    except ProfileError:
        return None
    return None if record is None else record.to_json()


def show(opts: TuneOptions) -> int:
    """What serves on this host and why: the text report, or one JSON document."""
    from core.host_profile import ProfileError
    from server.profile import describe, select, status

    if not opts.json:
        print(describe(opts.repository))
        return 0
    fits, why = status(opts.repository)
    try:
        variant, serving = select(opts.repository)
        config_name = variant.name or None
    except ProfileError as err:
        config_name, serving = None, str(err)
    print(json.dumps({"repository": str(opts.repository), "fits": fits, "why": why,
                      "model_config_name": config_name, "serving": serving,
                      "profile": record_json(opts.repository)}, indent=2, default=str))
    return 0

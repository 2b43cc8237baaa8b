"""`tmr rollout start MODEL VERSION` (or `tmr rollout MODEL VERSION`) and
`tmr rollout status|pause|resume|abort [MODEL]`.

MODEL is an encoder that a front model routes to as its primary (e.g. minilm_onnx);
VERSION an exported version of it. The command is the controller: it runs in the
foreground until the rollout ends (exit 0 promoted, 3 rolled back, 4 aborted, 1 refused).
docs/serving.md ("Rolling out a new version") has the flow; server/rollout.py the steps.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from cli.errors import UsageError
from cli.names import ENCODER, resolve_name
from cli.options import (
    ENVIRONMENT_HELP,
    HelpFormatter,
    add_command,
    add_repository,
    resolve_url,
)
from core import rollout, versions
from core.variant import Variant
from server import rollout_judge
from server.profile import served_variant
from server.settings import Ports

ACTIONS = ("status", "pause", "resume", "abort")
EXIT = {rollout.PROMOTED: 0, rollout.ROLLED_BACK: 3, rollout.ABORTED: 4}
DEFAULTS = {f.name: f.default for f in fields(rollout.RolloutState)}


@dataclass(frozen=True)
class RolloutOptions:
    """What `tmr rollout` was asked, parsed."""

    action: str  # "start" or one of ACTIONS
    model: str | None
    version: int | None
    steps: str
    canary_shadow: float
    min_requests: int
    min_seconds: float
    min_pairs: int
    max_error_rate: float
    step_timeout_s: float
    max_p99_ratio: float | None
    poll_s: float
    no_gate: bool
    urls: list[str]
    metrics_urls: list[str]
    repository: Path
    json: bool = False


def make(args: argparse.Namespace) -> RolloutOptions:
    urls = [resolve_url(u) for u in args.url or [None]]
    metrics = args.metrics_url or [f"http://{u.rsplit(':', 1)[0]}:{Ports().metrics}/metrics"
                                   for u in urls]
    if len(metrics) != len(urls):
        raise UsageError("give one --metrics-url per --url (one pair per replica)")
    model = args.model
    if model is not None:
        model = resolve_name(args.repository, model, ENCODER)
    return RolloutOptions(args.action, model, getattr(args, "version", None), args.steps,
                          args.canary_shadow, args.min_requests, args.min_seconds,
                          args.min_pairs, args.max_error_rate, args.step_timeout_s,
                          args.max_p99_ratio, args.poll_s, args.no_gate, urls, metrics,
                          args.repository, getattr(args, "json", False))


def with_verb(argv: Sequence[str]) -> list[str]:
    """`tmr rollout MODEL VERSION`, the shorthand the tests and runbooks use, as
    `tmr rollout start MODEL VERSION`."""
    argv = list(argv)
    at = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    if at is None or argv[at] != "rollout" or at + 1 >= len(argv):
        return argv
    following = argv[at + 1]
    if following.startswith("-") or following in (*ACTIONS, "start"):
        return argv
    return [*argv[:at + 1], "start", *argv[at + 1:]]


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "rollout", "shadow, canary, then promote VERSION of MODEL, "
                         "judged live", rollout_command, make)
    parser.set_defaults(**START_DEFAULTS, version=None, no_gate=False, poll_s=1.0, model=None)
    verbs = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                  prog="tmr rollout")
    start = verb(verbs, "start", "start a rollout of VERSION of MODEL and run it as its "
                 "controller, in the foreground (`tmr rollout MODEL VERSION` is the same)")
    start.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    start.add_argument("version", type=int, metavar="VERSION",
                       help="the exported version to roll out")
    add_start_options(start)
    add_replicas(start)
    status = verb(verbs, "status", "each model's running rollout (or the last one's "
                  "outcome), with the live figures")
    status.add_argument("model", nargs="?", default=None, metavar="MODEL",
                        help=f"{MODEL_HELP} (default: every model)")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    add_replicas(status)
    for action, summary in (("pause", "hold the running step (a breach still rolls back)"),
                            ("resume", "release a pause, or take over a dead controller"),
                            ("abort", "end the rollout: the stable version takes all "
                                      "traffic now")):
        parser = verb(verbs, action, summary)
        parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
        if action == "resume":
            add_poll(parser)
        add_replicas(parser)


MODEL_HELP = "the encoder (a model's name or its front resolve to the encoder it serves)"
START_DEFAULTS = {"steps": rollout_judge.DEFAULT_STEPS,
                  "canary_shadow": rollout_judge.DEFAULT_CANARY_SHADOW,
                  **{name: DEFAULTS[name] for name in ("min_requests", "min_seconds",
                                                       "min_pairs", "max_error_rate",
                                                       "step_timeout_s")},
                  "max_p99_ratio": None}


def verb(verbs: argparse._SubParsersAction, name: str, summary: str) -> argparse.ArgumentParser:
    return verbs.add_parser(name, help=summary, description=summary, epilog=ENVIRONMENT_HELP,
                            formatter_class=HelpFormatter)


def add_poll(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll-s", type=float, default=1.0,
                        help="how often the controller looks, in seconds")


def add_start_options(parser: argparse.ArgumentParser) -> None:
    """How a rollout steps and what rolls it back."""
    parser.add_argument("--steps", default=rollout_judge.DEFAULT_STEPS,
                        help="shadow:PERCENT and growing canary:PERCENT steps before the "
                             "promotion")
    parser.add_argument("--canary-shadow-fraction", dest="canary_shadow", type=float,
                        default=rollout_judge.DEFAULT_CANARY_SHADOW,
                        help="the fraction (0..1) of calls a canary step still shadows")
    parser.add_argument("--min-requests", type=int, default=DEFAULTS["min_requests"],
                        help="candidate rows a step needs")
    parser.add_argument("--min-seconds", type=float, default=DEFAULTS["min_seconds"],
                        help="a step's minimum duration, in seconds")
    parser.add_argument("--min-pairs", type=int, default=DEFAULTS["min_pairs"],
                        help="shadowed calls before agreement and p99 judge a step")
    parser.add_argument("--max-error-fraction", dest="max_error_rate", type=float,
                        default=DEFAULTS["max_error_rate"],
                        help="the fraction (0..1) of failed candidate calls that rolls back")
    parser.add_argument("--step-timeout-s", type=float, default=DEFAULTS["step_timeout_s"],
                        help="a step not judged by then rolls back, in seconds")
    parser.add_argument("--max-p99-ratio", type=float, default=None,
                        help="the candidate's p99 over the served version's that rolls back "
                             "(default: the model's gate_max_p99_ratio)")
    add_poll(parser)
    parser.add_argument("--no-gate", action="store_true",
                        help="skip the offline release gate before the live steps")


def add_replicas(parser: argparse.ArgumentParser) -> None:
    """The replicas (`--url` and `--metrics-url` pairs) and the repository."""
    parser.add_argument("--url", action="append", default=None,
                        help="a replica's HTTP [http://]HOST:PORT; repeat for each replica "
                             f"(default: $TMR_URL, else localhost:{Ports().http})")
    parser.add_argument("--metrics-url", action="append", default=None,
                        help="each replica's metrics URL, in --url's order "
                             f"(default http://HOST:{Ports().metrics}/metrics)")
    add_repository(parser)


def rollout_command(opts: RolloutOptions) -> int:
    """Its refusals (RolloutError, VersionError, ReleaseError) are the error boundary's
    one line and exit 1 (cli/errors.py)."""
    from server import rollout as ctl

    replicas = [ctl.Replica(u, m) for u, m in zip(opts.urls, opts.metrics_urls)]
    if opts.action == "status":
        return status(opts, replicas)
    model_dir = opts.repository / opts.model
    if opts.action == "pause":
        ctl.set_paused(model_dir, True)
        print(f"{opts.model}: rollout paused (breaches still roll back)")
        return 0
    if opts.action == "abort":
        state = ctl.abort(model_dir, replicas, "aborted by an operator", served(opts))
        print(f"{opts.model}: rollout of v{state.version} aborted; v{state.stable} serves")
        return EXIT[rollout.ABORTED]
    if opts.action == "resume":
        return resume(opts, model_dir, replicas)
    return start(opts, model_dir, replicas)


def start(opts: RolloutOptions, model_dir: Path, replicas: list) -> int:
    from server import rollout as ctl

    steps = rollout_judge.parse_steps(opts.steps, opts.canary_shadow)
    state = rollout.RolloutState(
        version=opts.version, stable=0, steps=steps,
        min_requests=opts.min_requests, min_seconds=opts.min_seconds,
        min_pairs=opts.min_pairs, max_error_rate=opts.max_error_rate,
        step_timeout_s=opts.step_timeout_s, max_p99_ratio=opts.max_p99_ratio)
    if not (model_dir / "config.pbtxt").exists():
        raise rollout.RolloutError(f"unknown model {opts.model!r}: no {model_dir}/config.pbtxt")
    variant = served(opts)
    ctl.check_start(model_dir, opts.version, variant)  # names a running rollout
    with ctl.controller_lock(model_dir):
        stable = ctl.check_start(model_dir, opts.version, variant)
        if not opts.no_gate:
            from export.gate import run_gate

            result = run_gate(model_dir, opts.version)
            print(result.table())
            if not result.passed:
                print(f"tmr rollout: error: rollout of {opts.model} v{opts.version} refused "
                      "by the gate",
                      file=sys.stderr)
                return 1
        controller = ctl.Controller(model_dir, replicas, variant, poll_s=opts.poll_s)
        state = controller.start(rollout.RolloutState(**{**state.__dict__, "stable": stable}))
        print(f"{opts.model}: rolling out v{opts.version} beside v{stable}: "
              f"{' -> '.join(s.describe() for s in state.steps)} -> promotion", flush=True)
        return finished(opts.model, state, controller.run(state), model_dir)


def served(opts: RolloutOptions) -> Variant:
    """The config variant `tmr serve` serves from the rollout's repository."""
    return served_variant(opts.repository)[0]


def resume(opts: RolloutOptions, model_dir: Path, replicas: list) -> int:
    """Release a pause and, when no controller runs, become the controller."""
    from server import rollout as ctl

    state = ctl.set_paused(model_dir, False)
    if ctl.controller_running(model_dir):
        print(f"{opts.model}: rollout resumed; its controller goes on")
        return 0
    with ctl.controller_lock(model_dir):
        print(f"{opts.model}: resuming the rollout of v{state.version} at "
              f"{state.current.describe()} as its controller", flush=True)
        controller = ctl.Controller(model_dir, replicas, served(opts), poll_s=opts.poll_s)
        return finished(opts.model, state, controller.run(state), model_dir)


def finished(model: str, state: rollout.RolloutState, outcome: str, model_dir: Path) -> int:
    last = rollout.last_of(versions.read_config(model_dir)) or {}
    print(f"{model}: v{state.version} {outcome.replace('_', ' ')}: {last.get('reason', '')}")
    return EXIT.get(outcome, 1)


def status_of(model_dir: Path, replicas: list) -> dict:
    """One model's rollout for `--json`: the running one's state, controller and live
    figures (null when the servers do not answer), the last outcome, the recent log."""
    from server import rollout as ctl

    config = versions.read_config(model_dir)
    state, last = rollout.state_of(config), rollout.last_of(config)
    report: dict = {"model": model_dir.name, "last": last, "running": None}
    if state is not None:
        try:
            figures = ctl.scrape(replicas, model_dir.name, state).figures()
        except OSError as err:
            figures = {"error": str(err)}
        report["running"] = {"version": state.version, "stable": state.stable,
                             "step": state.step + 1, "steps": len(state.steps),
                             "current": state.current.describe(), "paused": state.paused,
                             "controller_running": ctl.controller_running(model_dir),
                             "figures": figures,
                             "log": ctl.read_log(model_dir, state.id)[-5:]}
    return report


def status(opts: RolloutOptions, replicas: list) -> int:
    """Each model's running rollout (or the last one's outcome), with the live figures."""
    from server import rollout as ctl

    dirs = [opts.repository / opts.model] if opts.model else sorted(
        p.parent for p in opts.repository.glob("*/config.pbtxt"))
    if opts.json:
        print(json.dumps([status_of(d, replicas) for d in dirs], indent=2, default=str))
        return 0
    shown = 0
    for model_dir in dirs:
        config = versions.read_config(model_dir)
        state, last = rollout.state_of(config), rollout.last_of(config)
        if state is None and last is None:
            continue
        shown += 1
        if state is None:
            print(f"{model_dir.name}: no rollout running; the last, v{last['version']}, "
                  f"{last['outcome'].replace('_', ' ')} at {last['at']}: {last['reason']}")
            continue
        running = "running" if ctl.controller_running(model_dir) else \
            "NO CONTROLLER (`tmr rollout resume` continues it)"
        print(f"{model_dir.name}: v{state.version} beside v{state.stable}, step "
              f"{state.step + 1}/{len(state.steps)} {state.current.describe()}"
              f"{' PAUSED' if state.paused else ''}; controller {running}")
        try:
            window = ctl.scrape(replicas, model_dir.name, state)
        except OSError as err:
            print(f"  no live figures: {err}")
        else:
            for key, value in window.figures().items():
                shown_value = "-" if value is None else f"{value:.4g}"
                print(f"  {key:<18} {shown_value}  (since the servers started)")
        for line in ctl.read_log(model_dir, state.id)[-5:]:
            print(f"  {line['at']} {line['event']:<10} {line['step_name']}: {line['reason']}")
    if not shown:
        print("no rollouts")
    return 0


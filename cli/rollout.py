"""`tmr rollout MODEL VERSION` and `tmr rollout status|pause|resume|abort [MODEL]`.

MODEL is an encoder that a front model routes to as its primary (e.g. minilm_onnx);
VERSION an exported version of it. The command is the controller: it runs in the
foreground until the rollout ends (exit 0 promoted, 3 rolled back, 4 aborted, 1 refused).
docs/serving.md ("Rolling out a new version") has the flow; server/rollout.py the steps.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from cli.options import add_command, add_repository, server_url
from core import rollout as r
from core import versions as v
from core.families.catalog import served_encoder
from server.settings import Ports

ACTIONS = ("status", "pause", "resume", "abort")
EXIT = {r.PROMOTED: 0, r.ROLLED_BACK: 3, r.ABORTED: 4}
DEFAULTS = {f.name: f.default for f in fields(r.RolloutState)}


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


def make(args: argparse.Namespace) -> RolloutOptions:
    words = list(args.words)
    action = words.pop(0) if words and words[0] in ACTIONS else "start"
    model = words.pop(0) if words else None
    version = None
    if action == "start":
        if len(words) != 1 or not words[0].isdigit() or model is None:
            raise SystemExit("usage: tmr rollout MODEL VERSION | tmr rollout "
                             "status|pause|resume|abort [MODEL]")
        version = int(words.pop())
    elif words or (model is None and action != "status"):
        shape = "[MODEL]" if action == "status" else "MODEL"
        raise SystemExit(f"usage: tmr rollout {action} {shape}")
    urls = args.url or [server_url("http")]
    metrics = args.metrics_url or [f"http://{u.rsplit(':', 1)[0]}:{Ports().metrics}/metrics"
                                   for u in urls]
    if len(metrics) != len(urls):
        raise SystemExit("give one --metrics-url per --url (one pair per replica)")
    if model is not None:
        model = served_encoder(args.repository, model)
    return RolloutOptions(action, model, version, args.steps, args.canary_shadow / 100,
                          args.min_requests, args.min_seconds, args.min_pairs,
                          args.max_error_rate / 100, args.step_timeout_s, args.max_p99_ratio,
                          args.poll_s,
                          args.no_gate, urls, metrics, args.repository)


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(sub, "rollout", "shadow, canary, then promote VERSION of MODEL, "
                         "judged live", rollout_command, make)
    parser.add_argument("words", nargs="+", metavar="MODEL VERSION | ACTION [MODEL]",
                        help="MODEL VERSION starts a rollout; status|pause|resume|abort "
                             "[MODEL] acts on the running one")
    parser.add_argument("--steps", default=r.DEFAULT_STEPS,
                        help=f"shadow:PERCENT and growing canary:PERCENT steps before the "
                             f"promotion (default {r.DEFAULT_STEPS})")
    parser.add_argument("--canary-shadow", type=float, default=r.DEFAULT_CANARY_SHADOW * 100,
                        help="percent of calls a canary step still shadows (default %(default)g)")
    parser.add_argument("--min-requests", type=int, default=DEFAULTS["min_requests"],
                        help="candidate rows a step needs (default %(default)s)")
    parser.add_argument("--min-seconds", type=float, default=DEFAULTS["min_seconds"],
                        help="a step's minimum duration (default %(default)g)")
    parser.add_argument("--min-pairs", type=int, default=DEFAULTS["min_pairs"],
                        help="shadowed calls before agreement and p99 judge a step "
                             "(default %(default)s)")
    parser.add_argument("--max-error-rate", type=float,
                        default=DEFAULTS["max_error_rate"] * 100,
                        help="percent of failed candidate calls that rolls back "
                             "(default %(default)g)")
    parser.add_argument("--step-timeout-s", type=float, default=DEFAULTS["step_timeout_s"],
                        help="a step not judged by then rolls back (default %(default)g)")
    parser.add_argument("--max-p99-ratio", type=float, default=None,
                        help="the candidate's p99 over the served version's that rolls back "
                             "(default: the model's gate_max_p99_ratio)")
    parser.add_argument("--poll-s", type=float, default=1.0,
                        help="how often the controller looks (default %(default)g)")
    parser.add_argument("--no-gate", action="store_true",
                        help="skip the offline release gate before the live steps")
    parser.add_argument("--url", action="append", default=None,
                        help="a replica's HTTP HOST:PORT; repeat for each replica "
                             "(default: $TMR_URL, else localhost)")
    parser.add_argument("--metrics-url", action="append", default=None,
                        help="each replica's metrics URL, in --url's order "
                             "(default http://HOST:8002/metrics)")
    add_repository(parser)


def rollout_command(opts: RolloutOptions) -> int:
    from server import rollout as ctl
    from server.errors import ReleaseError

    replicas = [ctl.Replica(u, m) for u, m in zip(opts.urls, opts.metrics_urls)]
    try:
        if opts.action == "status":
            return status(opts, replicas)
        model_dir = opts.repository / opts.model
        if opts.action == "pause":
            ctl.set_paused(model_dir, True)
            print(f"{opts.model}: rollout paused (breaches still roll back)")
            return 0
        if opts.action == "abort":
            state = ctl.abort(model_dir, replicas, "aborted by an operator")
            print(f"{opts.model}: rollout of v{state.version} aborted; v{state.stable} serves")
            return EXIT[r.ABORTED]
        if opts.action == "resume":
            return resume(opts, model_dir, replicas)
        return start(opts, model_dir, replicas)
    except (r.RolloutError, v.VersionError, ReleaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def start(opts: RolloutOptions, model_dir: Path, replicas: list) -> int:
    from server import rollout as ctl

    state = r.RolloutState(
        version=opts.version, stable=0, steps=r.parse_steps(opts.steps, opts.canary_shadow),
        min_requests=opts.min_requests, min_seconds=opts.min_seconds,
        min_pairs=opts.min_pairs, max_error_rate=opts.max_error_rate,
        step_timeout_s=opts.step_timeout_s, max_p99_ratio=opts.max_p99_ratio)
    if not (model_dir / "config.pbtxt").exists():
        raise r.RolloutError(f"unknown model {opts.model!r}: no {model_dir}/config.pbtxt")
    ctl.check_start(model_dir, opts.version)  # the refusal that names the running rollout
    with ctl.controller_lock(model_dir):
        stable = ctl.check_start(model_dir, opts.version)
        if not opts.no_gate:
            from export.gate import run_gate

            result = run_gate(model_dir, opts.version)
            print(result.table())
            if not result.passed:
                print(f"error: rollout of {opts.model} v{opts.version} refused by the gate",
                      file=sys.stderr)
                return 1
        controller = ctl.Controller(model_dir, replicas, poll_s=opts.poll_s)
        state = controller.start(r.RolloutState(**{**state.__dict__, "stable": stable}))
        print(f"{opts.model}: rolling out v{opts.version} beside v{stable}: "
              f"{' -> '.join(s.describe() for s in state.steps)} -> promotion", flush=True)
        return finished(opts.model, state, controller.run(state), model_dir)


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
        controller = ctl.Controller(model_dir, replicas, poll_s=opts.poll_s)
        return finished(opts.model, state, controller.run(state), model_dir)


def finished(model: str, state: r.RolloutState, outcome: str, model_dir: Path) -> int:
    last = r.last_of(v.read_config(model_dir)) or {}
    print(f"{model}: v{state.version} {outcome.replace('_', ' ')}: {last.get('reason', '')}")
    return EXIT.get(outcome, 1)


def status(opts: RolloutOptions, replicas: list) -> int:
    """Each model's running rollout (or the last one's outcome), with the live figures."""
    from server import rollout as ctl

    dirs = [opts.repository / opts.model] if opts.model else sorted(
        p.parent for p in opts.repository.glob("*/config.pbtxt"))
    shown = 0
    for model_dir in dirs:
        if not (model_dir / "config.pbtxt").exists():
            print(f"error: unknown model {model_dir.name!r}", file=sys.stderr)
            return 1
        config = v.read_config(model_dir)
        state, last = r.state_of(config), r.last_of(config)
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


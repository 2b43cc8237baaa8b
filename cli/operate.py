"""`tmr degrade MODEL --level N` and `tmr health [MODEL...]`: a front model's ladder and
the deep health check of a running server."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from cli.names import FRONT, resolve_name
from cli.options import (
    add_command,
    add_control_mode,
    add_json,
    add_model,
    add_models,
    add_repository,
    add_server,
    add_wait,
    model_of,
    models_of,
    options,
    resolve_url,
    text_front,
)
from core.paths import DEFAULT_REPOSITORY
from core.timeouts import LEVEL_WAIT

LEVELS = ["auto", "0", "1", "2", "3", "4"]


@dataclass(frozen=True)
class DegradeOptions:
    """`tmr degrade`: force a front model's level, or give it back to the signals."""

    model: str
    level: str
    url: str
    control_mode: str
    repository: Path
    timeout_s: float


@dataclass(frozen=True)
class HealthOptions:
    """`tmr health`: a real inference through these models (None: every family model)."""

    url: str
    models: list[str] | None
    json: bool = False


def register(sub: argparse._SubParsersAction) -> None:
    parser = add_command(
        sub, "degrade", "force a front model's degradation level (or `auto`)", degrade_command,
        lambda a: options(DegradeOptions, a, url=resolve_url(a.url), model=resolve_name(
            a.repository, model_of(a, text_front()), FRONT)))
    add_model(parser, default=text_front(), optional=True, help="the front model")
    parser.add_argument("--level", required=True, choices=LEVELS,
                        help="the level to force (0: none; higher degrades more), or auto: the "
                             "signals decide again")
    add_server(parser)
    add_control_mode(parser)
    add_repository(parser)
    add_wait(parser, LEVEL_WAIT)

    parser = add_command(
        sub, "health", "deep health: a real inference through every model", health_command,
        lambda a: HealthOptions(resolve_url(a.url), models_of(a), a.json))
    add_models(parser, help="only these (default: every family model the server loads)")
    add_server(parser)
    add_json(parser)


def degrade_command(opts: DegradeOptions) -> int:
    """In explicit mode through the load API, in poll mode by editing config.pbtxt."""
    from server.admin import AUTO, force_level_explicit, force_level_poll, wait_for_level

    level = AUTO if opts.level == "auto" else int(opts.level)
    if opts.control_mode == "poll":
        force_level_poll(opts.repository, level, opts.model)
    else:
        force_level_explicit(opts.url, level, opts.model)
    reported = wait_for_level(opts.url, level, opts.timeout_s, model=opts.model)
    print(f"{opts.model} now reports: {reported}")
    return 0


def cpu_policies(by_model: dict) -> str:
    """Each CPU policy the server's processes run at, and whose (lanes at normal, the
    shared path yielding: core/cpu_policy.py)."""
    models: dict[str, list[str]] = {}
    for name, row in sorted(by_model.items()):
        models.setdefault(row.get("cpu") or "?", []).append(name)
    return "; ".join(f"{policy}: {', '.join(names)}" for policy, names in models.items())


def profile_line() -> str:
    """What this repository serves on this host and since when (server/profile.py), in
    one line: a rollout since the tuning is named, not an error."""
    from core.host_profile import ProfileError
    from server.profile import select

    try:
        return select(DEFAULT_REPOSITORY)[1].splitlines()[0]
    except ProfileError as err:
        return str(err).splitlines()[0]


def health_command(opts: HealthOptions) -> int:
    from tmr_client.errors import ServerUnreachableError

    from server.admin import deep_health, idle_models, server_memory_report

    checks = deep_health(opts.url, opts.models)
    down = [c.error for c in checks if isinstance(c.error, ServerUnreachableError)]
    if down and len(down) == len(checks):
        raise down[0]  # the error boundary's line: where, and how to start it
    probed = {c.model for c in checks}
    idle = [] if opts.models is not None else [
        m for m in idle_models(opts.url) if m not in probed]
    memory = server_memory_report(opts.url)
    configs = profile_line()
    if opts.json:
        print(json.dumps({"url": opts.url, "ok": all(c.ok for c in checks), "checks": [
            {"model": c.model, "ok": c.ok, "ms": round(c.ms, 3), "detail": c.detail}
            for c in checks], "not_loaded": idle, "memory": memory, "configs": configs},
            indent=2))
        return 0 if all(c.ok for c in checks) else 1
    width = max((len(c.model) for c in checks), default=20)
    for c in checks:
        print(f"{'OK  ' if c.ok else 'FAIL'} {c.model:<{width}} {c.ms:>8.1f} ms  {c.detail}")
    print(f"configs here: {configs}")
    if idle:
        print(f"not loaded (on demand, not probed): {', '.join(idle)}")
    if memory is not None:
        whole = memory["total"]
        print(f"memory: {whole['rss_mib']:,.0f} MiB RSS (PSS {whole['pss_mib']:,.0f}) in "
              f"{whole['processes']} processes; per model: `tmr health --json`")
        print(f"cpu: {cpu_policies(memory['by_model'])}")
    return 0 if all(c.ok for c in checks) else 1

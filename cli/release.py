"""`tmr versions / gate / promote / rollback`: parsing, printing and exit codes."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tmr_client.errors import TritonClientError

from cli.errors import Tried, report, with_scheme
from cli.names import ENCODER, FOLDER, resolve_name
from cli.options import (
    add_command,
    add_control_mode,
    add_json,
    add_model,
    add_repository,
    add_server,
    add_wait,
    options,
    resolve_url,
)
from core import versions
from core.timeouts import RELEASE_WAIT

ENCODER_HELP = "the encoder (a model's name or its front resolve to the encoder it serves)"


@dataclass(frozen=True)
class VersionsOptions:
    """`tmr versions [MODEL]`: one model, or every model of the repository."""

    model: str | None
    url: str
    repository: Path
    json: bool = False


@dataclass(frozen=True)
class GateOptions:
    """`tmr gate MODEL VERSION`."""

    model: str
    version: int
    repository: Path


@dataclass(frozen=True)
class ReleaseOptions:
    """`tmr promote MODEL VERSION` (`action` promote) or `tmr rollback MODEL [--to N]`."""

    action: str
    model: str
    version: int | None
    no_gate: bool
    url: str
    repository: Path
    control_mode: str
    timeout_s: float


def make_release(args: argparse.Namespace) -> ReleaseOptions:
    version = args.version if args.action == "promote" else args.to
    return options(ReleaseOptions, args, url=resolve_url(args.url), version=version,
                   model=resolve_name(args.repository, args.model, ENCODER))


def register(sub: argparse._SubParsersAction) -> None:
    """The four release commands."""
    parser = add_command(sub, "versions", "versions on disk, selected, and READY",
                         versions_command,
                         lambda a: options(VersionsOptions, a, url=resolve_url(a.url),
                                           model=a.model and resolve_name(
                                               a.repository, a.model, FOLDER)))
    add_model(parser, optional=True, help="the model (default: every model)")
    add_server(parser)
    add_repository(parser)
    add_json(parser)

    parser = add_command(sub, "gate", "release gate: fidelity and speed of a candidate",
                         gate_command, lambda a: options(
                             GateOptions, a, model=resolve_name(a.repository, a.model,
                                                                ENCODER)))
    add_model(parser, help=ENCODER_HELP)
    parser.add_argument("version", type=int, metavar="VERSION", help="the candidate version")
    add_repository(parser)

    parser = add_command(sub, "promote", "serve VERSION of MODEL (gated)", release_command,
                         make_release)
    add_model(parser, help=ENCODER_HELP)
    parser.add_argument("version", type=int, metavar="VERSION", help="the version to serve")
    parser.add_argument("--no-gate", action="store_true",
                        help="skip the offline release gate (fidelity and speed)")
    add_release_options(parser)
    parser.set_defaults(action="promote")

    parser = add_command(sub, "rollback", "return MODEL to its previous (or --to) version",
                         release_command, make_release)
    add_model(parser, help=ENCODER_HELP)
    parser.add_argument("--to", type=int, default=None, metavar="VERSION",
                        help="the version to return to (default: the previous one)")
    add_release_options(parser)
    parser.set_defaults(action="rollback", no_gate=True)


def add_release_options(parser: argparse.ArgumentParser) -> None:
    add_server(parser)
    add_repository(parser)
    add_control_mode(parser)
    add_wait(parser, RELEASE_WAIT)


def versions_command(args: VersionsOptions) -> int:
    """The disk's versions, and the server's states when it answers; the server's error
    (after the disk's listing) makes it exit 1."""
    models = [args.model] if args.model else sorted(
        p.name for p in args.repository.iterdir() if (p / "config.pbtxt").exists())
    failure: TritonClientError | None = None
    rows = []
    for model in models:
        states: dict = {}
        if failure is None:
            states, failure = server_states(args.url, model)
        rows.append(version_rows(args.repository / model, states))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print_versions(row)
    if failure is not None:
        return report(failure, Tried("versions", with_scheme(args.url, "http"), args.model))
    return 0


def server_states(url: str, model: str) -> tuple[dict, TritonClientError | None]:
    from server import release

    try:
        return release.index_states(url, model), None
    except TritonClientError as err:  # server down or admin key refused: the disk only
        return {}, err


def version_rows(model_dir: Path, states: dict) -> dict:
    """One model's versions on disk, selected and as the server reports them."""
    from server.admin_client import ModelState

    selected = versions.selected_on_disk(model_dir)
    ready = sorted(n for n, (s, _) in states.items() if s == ModelState.READY)
    rows = []
    for version in versions.versions_on_disk(model_dir):
        p = versions.read_provenance(model_dir / str(version)) or {}
        rows.append({"version": version, "selected": version in selected,
                         "state": states.get(version, (None, ""))[0],
                         "created_at": p.get("created_at"),
                         "sha256": p.get("artifact", {}).get("sha256"),
                         "checks": summarize(p.get("checks", {}))})
    return {"model": model_dir.name, "selected": selected,
            "server_ready": ready if states else None, "versions": rows}


def print_versions(row: dict) -> None:
    ready = row["server_ready"]
    drift = "" if ready is None or ready == row["selected"] else f"  DRIFT: server READY {ready}"
    print(f"{row['model']}: selected {row['selected']}{drift}")
    for r in row["versions"]:
        print(f"  v{r['version']:<3} {'*' if r['selected'] else ' '} {r['state'] or '-':<12} "
              f"{r['created_at'] or '?':<26} sha256 {(r['sha256'] or '?')[:12]}  {r['checks']}")


def summarize(checks: dict) -> str:
    """The provenance figures worth a glance: parity and INT8 fidelity."""
    parts = []
    parity = checks.get("parity_max_abs_diff")
    if isinstance(parity, dict) and parity:
        parts.append(f"parity max|diff| {max(parity.values()):.2g}")
    fidelity = checks.get("fidelity_vs_fp32_onnx")
    if isinstance(fidelity, dict):
        parts.append(f"cosine mean {fidelity.get('mean', 0):.4f} min {fidelity.get('min', 0):.4f}")
    return ", ".join(parts)


def gate_command(args: GateOptions) -> int:
    from export.gate import run_gate
    from server import release

    release.check_candidate(args.repository / args.model, args.version)
    result = run_gate(args.repository / args.model, args.version)
    print(result.table())
    return 0 if result.passed else 1


def release_command(args: ReleaseOptions) -> int:
    """Its refusals (VersionError, ReleaseError) are the error boundary's one line, exit 1."""
    from server import release

    began = time.monotonic()
    model_dir = args.repository / args.model
    from server.profile import served_variant

    variant = served_variant(args.repository)[0]
    target = release.Target(model_dir, args.url, variant, args.control_mode, args.timeout_s)
    version = (args.version if args.action == "promote"
               else release.rollback_target(model_dir, args.version))
    release.check_candidate(model_dir, version)
    if not args.no_gate:
        from export.gate import run_gate

        result = run_gate(model_dir, version)
        print(result.table())
        if not result.passed:
            print(f"tmr {args.action}: error: promotion of {args.model} v{version} refused "
                  "by the gate", file=sys.stderr)
            return 1
    timing = release.switch(target, version, args.action)
    print(f"{args.model} v{version} is serving ({args.action}, {args.control_mode} mode): "
          f"{timing.describe()}; the whole command {time.monotonic() - began:.2f} s")
    return 0

"""`tmr versions / gate / promote / rollback`: parsing, printing and exit codes."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cli.options import (
    add_command,
    add_control_mode,
    add_model,
    add_repository,
    add_server,
    add_timeout,
    options,
    resolve_url,
)
from client.errors import TritonClientError
from core import versions as v
from core.families.catalog import served_encoder

RELEASE_TIMEOUT_S = 90.0  # until the new version answers


@dataclass(frozen=True)
class VersionsOptions:
    """`tmr versions [MODEL]`: one model, or every model of the repository."""

    model: str | None
    url: str
    repository: Path


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
                   model=served_encoder(args.repository, args.model))


def register(sub: argparse._SubParsersAction) -> None:
    """The four release commands."""
    parser = add_command(sub, "versions", "versions on disk, selected, and READY",
                         versions_command,
                         lambda a: options(VersionsOptions, a, url=resolve_url(a.url)))
    add_model(parser, optional=True, help="the model (default: every model)")
    add_server(parser)
    add_repository(parser)

    parser = add_command(sub, "gate", "release gate: fidelity and speed of a candidate",
                         gate_command, lambda a: options(
                             GateOptions, a, model=served_encoder(a.repository, a.model)))
    add_model(parser)
    parser.add_argument("version", type=int, metavar="VERSION")
    add_repository(parser)

    parser = add_command(sub, "promote", "serve VERSION of MODEL (gated)", release_command,
                         make_release)
    add_model(parser)
    parser.add_argument("version", type=int, metavar="VERSION")
    parser.add_argument("--no-gate", action="store_true")
    add_release_options(parser)
    parser.set_defaults(action="promote")

    parser = add_command(sub, "rollback", "return MODEL to its previous (or --to) version",
                         release_command, make_release)
    add_model(parser)
    parser.add_argument("--to", type=int, default=None, metavar="VERSION",
                        help="the version to return to (default: the previous one)")
    add_release_options(parser)
    parser.set_defaults(action="rollback", no_gate=True)


def add_release_options(parser: argparse.ArgumentParser) -> None:
    add_server(parser)
    add_repository(parser)
    add_control_mode(parser)
    add_timeout(parser, RELEASE_TIMEOUT_S, help="how long to wait for the new version")


def versions_command(args: VersionsOptions) -> int:
    from server import release

    models = [args.model] if args.model else sorted(
        p.name for p in args.repository.iterdir() if (p / "config.pbtxt").exists())
    for model in models:
        model_dir = args.repository / model
        selected = v.selected_on_disk(model_dir)
        try:
            states = release.index_states(args.url, model)
        except TritonClientError as err:  # server down or admin key refused: show the disk
            states, note = {}, f"(no server state: {err})"
        else:
            note = ""
        ready = sorted(n for n, (s, _) in states.items() if s == "READY")
        drift = "" if ready == selected or not states else f"  DRIFT: server READY {ready}"
        print(f"{model}: selected {selected}{drift} {note}".rstrip())
        for version in v.versions_on_disk(model_dir):
            p = v.read_provenance(model_dir / str(version))
            print(f"  v{version:<3} {'*' if version in selected else ' '} "
                  f"{states.get(version, ('-', ''))[0]:<12} {p.get('created_at', '?'):<26} "
                  f"sha256 {p.get('artifact', {}).get('sha256', '?')[:12]}  "
                  f"{summarize(p.get('checks', {}))}")
    return 0


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
    from server import release

    began = time.monotonic()
    model_dir = args.repository / args.model
    target = release.Target(model_dir, args.url, args.control_mode, args.timeout_s)
    try:
        version = (args.version if args.action == "promote"
                   else release.rollback_target(model_dir, args.version))
        release.check_candidate(model_dir, version)
        if not args.no_gate:
            from export.gate import run_gate

            result = run_gate(model_dir, version)
            print(result.table())
            if not result.passed:
                print(f"error: promotion of {args.model} v{version} refused by the gate",
                      file=sys.stderr)
                return 1
        timing = release.switch(target, version, args.action)
    except (v.VersionError, release.ReleaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{args.model} v{version} is serving ({args.action}, {args.control_mode} mode): "
          f"{timing.describe()}; the whole command {time.monotonic() - began:.2f} s")
    return 0

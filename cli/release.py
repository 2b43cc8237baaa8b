"""The `tmr versions / gate / promote / rollback` commands (printing and exit codes)."""

from __future__ import annotations

import argparse
import sys
import time

from core import versions as v
from server import release


def versions_command(args: argparse.Namespace) -> int:
    models = [args.model] if args.model else sorted(
        p.name for p in args.repository.iterdir() if (p / "config.pbtxt").exists())
    for model in models:
        model_dir = args.repository / model
        on_disk = v.versions_on_disk(model_dir)
        selected = v.selected_versions(v.parse_config((model_dir / "config.pbtxt").read_text()),
                                       on_disk)
        try:
            states = release.index_states(args.url, model)
        except Exception as err:  # server down or admin key refused: still show the disk
            states, note = {}, f"(no server state: {err})"
        else:
            note = ""
        ready = sorted(n for n, (s, _) in states.items() if s == "READY")
        drift = "" if ready == selected or not states else f"  DRIFT: server READY {ready}"
        print(f"{model}: selected {selected}{drift} {note}".rstrip())
        for version in on_disk:
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


def gate_command(args: argparse.Namespace) -> int:
    from export.gate import run_gate

    release.check_candidate(args.repository / args.model, args.version)
    result = run_gate(args.repository / args.model, args.version)
    print(result.table())
    return 0 if result.passed else 1


def release_command(args: argparse.Namespace) -> int:
    began = time.monotonic()
    model_dir = args.repository / args.model
    target = release.Target(model_dir, args.url, args.mode, args.timeout_s)
    try:
        version = (args.version if args.action == "promote"
                   else release.rollback_target(model_dir, args.to))
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
    print(f"{args.model} v{version} is serving ({args.action}, {args.mode} mode): "
          f"{timing.describe()}; the whole command {time.monotonic() - began:.2f} s")
    return 0

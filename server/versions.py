"""Versions of a model in the repository: what is on disk, what `version_policy` selects,
and atomic, validated edits of that policy (pure file logic; no server calls)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

HISTORY = "version_history.json"
_POLICY = re.compile(r"^version_policy\s*:?\s*\{.*\}\s*$", re.MULTILINE)


class VersionError(ValueError):
    """A version operation that is refused before anything changes."""


def parse_config(text: str) -> model_config_pb2.ModelConfig:
    """config.pbtxt text parsed exactly as Triton parses it."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def versions_on_disk(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def selected_versions(config: model_config_pb2.ModelConfig, on_disk: list[int]) -> list[int]:
    """The versions Triton would load under the config's version_policy."""
    policy = config.version_policy
    if policy.HasField("specific"):
        return sorted(v for v in policy.specific.versions if v in on_disk)
    if policy.HasField("all"):
        return list(on_disk)
    latest = policy.latest.num_versions if policy.HasField("latest") else 1
    return on_disk[-(latest or 1):]


def read_provenance(version_dir: Path) -> dict[str, Any]:
    path = version_dir / "provenance.json"
    return json.loads(path.read_text()) if path.exists() else {}


def policy_line(version: int) -> str:
    return f"version_policy: {{ specific: {{ versions: [ {version} ] }} }}"


def with_specific_version(text: str, version: int) -> str:
    """config.pbtxt text whose one-line version_policy selects exactly `version`."""
    new, count = _POLICY.subn(policy_line(version), text)
    if count == 0:
        new = text.rstrip("\n") + "\n" + policy_line(version) + "\n"
    elif count > 1:
        raise VersionError("config.pbtxt has more than one version_policy line")
    parsed = parse_config(new)  # refuse to write anything Triton would not parse
    if list(parsed.version_policy.specific.versions) != [version]:
        raise VersionError(f"edited config does not select version {version}")
    return new


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def config_files(model_dir: Path) -> list[Path]:
    """config.pbtxt and every hardware profile in configs/: all carry the same policy."""
    profiles = sorted((model_dir / "configs").glob("*.pbtxt"))
    return [model_dir / "config.pbtxt", *profiles]


def set_version(model_dir: Path, version: int) -> dict[Path, str]:
    """Select `version` in every config file; returns the previous texts (for undo)."""
    previous = {path: path.read_text() for path in config_files(model_dir)}
    edited = {path: with_specific_version(text, version) for path, text in previous.items()}
    for path, text in edited.items():
        write_atomically(path, text)
    return previous


def pin_served_version(model_dir: Path) -> int | None:
    """Before a new version folder is added: make `version_policy` name the version served
    now, so the new one takes no traffic until `tmr promote` (poll mode would load it at the
    next scan, explicit mode at the next start). A `specific` policy already does; the
    shipped configs have one. Returns the served version, or None when nothing is served
    yet (the first export of a model serves at once: there is nothing to gate it against).
    """
    if not (model_dir / "config.pbtxt").exists():
        return None  # a folder Triton does not serve (an export outside a repository)
    config = parse_config((model_dir / "config.pbtxt").read_text())
    selected = selected_versions(config, versions_on_disk(model_dir))
    if selected and not config.version_policy.HasField("specific"):
        set_version(model_dir, selected[-1])
    return selected[-1] if selected else None


def gate_baseline(model_dir: Path, candidate: int) -> int | None:
    """What a candidate is gated against: the version served now (the one `version_policy`
    selects), or, when the candidate is that version, the one promoted before it; never
    the candidate itself. None when there is no other version."""
    on_disk = versions_on_disk(model_dir)
    selected = selected_versions(parse_config((model_dir / "config.pbtxt").read_text()), on_disk)
    if selected and selected[-1] != candidate:
        return selected[-1]
    earlier = [e.version for e in read_history(model_dir)
               if e.version != candidate and e.version in on_disk]
    return earlier[-1] if earlier else None


def restore(previous: dict[Path, str]) -> None:
    for path, text in previous.items():
        if text:
            write_atomically(path, text)


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    action: str
    at: str


def read_history(model_dir: Path) -> list[HistoryEntry]:
    path = model_dir / HISTORY
    if not path.exists():
        return []
    return [HistoryEntry(**e) for e in json.loads(path.read_text())]


def append_history(model_dir: Path, version: int, action: str) -> None:
    entries = [*read_history(model_dir),
               HistoryEntry(version, action, datetime.now(UTC).isoformat(timespec="seconds"))]
    write_atomically(model_dir / HISTORY,
                     json.dumps([e.__dict__ for e in entries], indent=1) + "\n")


def previous_version(history: list[HistoryEntry], current: int) -> int:
    """The version promoted before `current` (what `rollback` without --to returns to)."""
    for entry in reversed(history):
        if entry.version != current:
            return entry.version
    raise VersionError("no earlier version in the history to roll back to")

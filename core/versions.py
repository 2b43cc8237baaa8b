"""Versions of a model in the repository, in one place: integer version folders, what
`version_policy` selects, provenance, history (the policy edits are core.config_edit's).

Pure file logic, no server calls. Used by export (next version, up-to-date), by the
release commands (select, history, gate baseline), and inside the stub by the router
(the version an encoder serves, read off the request path). Configs are parsed with
Triton's own protobuf (`tritonclient.grpc.model_config_pb2`), exactly as Triton reads them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from core import rollout
from core.errors import CoreError
from core.files import write_atomically
from core.model_config import mc as model_config_pb2
from core.variant import Variant

HISTORY = "version_history.json"
PROVENANCE_FILE = "provenance.json"


class VersionError(CoreError, ValueError):
    """A version operation that is refused before anything changes."""


def parse_config(text: str) -> model_config_pb2.ModelConfig:
    """config.pbtxt text parsed exactly as Triton parses it."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def read_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    """The reviewed config.pbtxt: what every edit starts from."""
    return parse_config((model_dir / "config.pbtxt").read_text(encoding="utf-8"))


def served_config(model_dir: Path, variant: Variant) -> model_config_pb2.ModelConfig:
    """The config Triton serves for the model under `variant` (core/variant.py): what
    routing, precision, warmup and the load API's config override must read."""
    return parse_config(variant.config_path(model_dir).read_text(encoding="utf-8"))


def served_config_json(model_dir: Path, variant: Variant) -> dict[str, Any]:
    """served_config in Triton's JSON form, as the model's own stub gets it."""
    return json_format.MessageToDict(served_config(model_dir, variant),
                                     preserving_proto_field_name=True)


def read_config_json(model_dir: Path) -> dict[str, Any]:
    """The config in Triton's JSON form, as a stub's `model_config` gives it: what the
    settings' `from_parameters` and `from_config` read."""
    return json_format.MessageToDict(read_config(model_dir), preserving_proto_field_name=True)


def versions_on_disk(model_dir: Path) -> list[int]:
    """Sorted integer-named subfolders of model_dir (Triton's versions); [] if it is absent."""
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isascii() and p.name.isdigit() and int(p.name) > 0)


def next_version(model_dir: Path) -> int:
    """One more than the highest existing version, or 1."""
    versions = versions_on_disk(model_dir)
    return versions[-1] + 1 if versions else 1


def selected_versions(config: model_config_pb2.ModelConfig, on_disk: list[int]) -> list[int]:
    """The versions Triton would load under the config's version_policy."""
    policy = config.version_policy
    if policy.HasField("specific"):
        return sorted(v for v in policy.specific.versions if v in on_disk)
    if policy.HasField("all"):
        return list(on_disk)
    latest = policy.latest.num_versions if policy.HasField("latest") else 1
    return on_disk[-(latest or 1):]


def selected_on_disk(model_dir: Path) -> list[int]:
    """The versions the model's config.pbtxt selects among those on disk: what Triton
    loads, and so what it serves (the one answer every command and the router use)."""
    return selected_versions(read_config(model_dir), versions_on_disk(model_dir))


def served_version(model_dir: Path) -> int | None:
    """The version the model serves: the (newest) one its policy selects on disk, and
    during a rollout the stable one, not the candidate (core/rollout.py); or None."""
    config = read_config(model_dir)
    selected = selected_versions(config, versions_on_disk(model_dir))
    state = rollout.state_of(config)
    stable = [v for v in selected if state is None or v != state.version]
    return stable[-1] if stable else None


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def read_provenance(version_dir: Path) -> dict[str, Any] | None:
    """The parsed provenance.json of a version folder, or None if missing or unreadable."""
    try:
        data = json.loads((Path(version_dir) / PROVENANCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_provenance(version_dir: Path, provenance: dict[str, Any]) -> Path:
    """Write provenance.json (sorted keys, indented) into version_dir."""
    path = Path(version_dir) / PROVENANCE_FILE
    path.write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def artifact_file(model_dir: Path, version: int | None = None) -> Path:
    """The artifact of a version (by default the one the config serves), as its
    provenance names it."""
    version = served_version(model_dir) if version is None else version
    provenance = read_provenance(Path(model_dir) / str(version)) or {}
    return Path(model_dir) / str(version) / provenance["artifact"]["file"]


def artifact_intact(version_dir: Path, provenance: dict[str, Any]) -> bool:
    """True if the artifact named in provenance exists with the recorded sha256."""
    artifact = provenance.get("artifact")
    if not isinstance(artifact, dict) or not artifact.get("file") or not artifact.get("sha256"):
        return False
    path = Path(version_dir) / str(artifact["file"])
    return path.is_file() and sha256_file(path) == artifact["sha256"]


def is_up_to_date(model_dir: Path, fingerprint: str) -> int | None:
    """The latest version, if it was built from `fingerprint` and its artifact is intact.

    Only the latest version counts: an older matching version would not be the newest
    export, which is what `tmr export` compares against.
    """
    versions = versions_on_disk(model_dir)
    if not versions:
        return None
    version_dir = Path(model_dir) / str(versions[-1])
    provenance = read_provenance(version_dir)
    if provenance is None or provenance.get("source_fingerprint") != fingerprint:
        return None
    return versions[-1] if artifact_intact(version_dir, provenance) else None


def policy_line(versions: list[int]) -> str:
    """How a rendered config writes a `specific` policy (core.families.configs.render)."""
    return f"version_policy: {{ specific: {{ versions: [ {', '.join(map(str, versions))} ] }} }}"


def config_files(model_dir: Path) -> list[Path]:
    """config.pbtxt and every hardware profile in configs/: all carry the same policy."""
    profiles = sorted((model_dir / "configs").glob("*.pbtxt"))
    return [model_dir / "config.pbtxt", *profiles]


def gate_baseline(model_dir: Path, candidate: int) -> int | None:
    """What a candidate is gated against: the version served now (the one `version_policy`
    selects), or, when the candidate is that version, the one promoted before it; never
    the candidate itself. None when there is no other version."""
    on_disk = versions_on_disk(model_dir)
    selected = selected_on_disk(model_dir)
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

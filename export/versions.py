"""Triton's versioned folder layout: <model_dir>/<integer version>/<artifact> + provenance.json."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

PROVENANCE_FILE = "provenance.json"

log = logging.getLogger(__name__)


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def list_versions(model_dir: Path) -> list[int]:
    """Sorted integer-named subfolders of model_dir (Triton's versions); [] if it is absent."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(
        int(p.name)
        for p in model_dir.iterdir()
        if p.is_dir() and p.name.isascii() and p.name.isdigit() and int(p.name) > 0
    )


def next_version(model_dir: Path) -> int:
    """One more than the highest existing version, or 1."""
    versions = list_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def read_provenance(version_dir: Path) -> dict[str, Any] | None:
    """The parsed provenance.json of a version folder, or None if missing or unreadable."""
    path = Path(version_dir) / PROVENANCE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.debug("no usable provenance at %s: %s", path, exc)
        return None
    return data if isinstance(data, dict) else None


def write_provenance(version_dir: Path, provenance: dict[str, Any]) -> Path:
    """Write provenance.json (sorted keys, indented) into version_dir."""
    path = Path(version_dir) / PROVENANCE_FILE
    path.write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def artifact_intact(version_dir: Path, provenance: dict[str, Any]) -> bool:
    """True if the artifact named in provenance exists with the recorded sha256."""
    artifact = provenance.get("artifact")
    if not isinstance(artifact, dict) or not artifact.get("file") or not artifact.get("sha256"):
        return False
    path = Path(version_dir) / str(artifact["file"])
    return path.is_file() and sha256_file(path) == artifact["sha256"]


def is_up_to_date(model_dir: Path, fingerprint: str) -> int | None:
    """The latest version, if it was built from `fingerprint` and its artifact is intact.

    Only the latest version counts: an older matching version would not be the one Triton's
    default "latest" policy serves.
    """
    versions = list_versions(model_dir)
    if not versions:
        return None
    version_dir = Path(model_dir) / str(versions[-1])
    provenance = read_provenance(version_dir)
    if provenance is None or provenance.get("source_fingerprint") != fingerprint:
        return None
    return versions[-1] if artifact_intact(version_dir, provenance) else None

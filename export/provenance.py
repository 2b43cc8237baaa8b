"""provenance.json contents and the source fingerprint that decides whether to re-export."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

TOOL_PACKAGES: tuple[str, ...] = (
    "torch", "onnx", "onnxruntime", "transformers", "tokenizers", "numpy",
)  # fmt: skip
# Tools whose version changes the artifact's bytes or numerics, hence part of the fingerprint.
FINGERPRINT_TOOLS: tuple[str, ...] = ("torch", "onnx", "onnxruntime", "transformers")


def tool_versions() -> dict[str, str]:
    """Installed versions of the export toolchain, plus the Python version."""
    versions = {}
    for package in TOOL_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "absent"
    versions["python"] = platform.python_version()
    return versions


def source_fingerprint(
    weights_sha256: str,
    export_format: str,
    opset: int | None,
    tools: dict[str, str],
    settings: dict[str, Any],
) -> str:
    """sha256 over everything that determines an artifact: weights, format, opset, tools, settings.

    `settings` must be JSON-serialisable; its key order does not matter.
    """
    payload = {
        "weights_sha256": weights_sha256,
        "format": export_format,
        "opset": opset,
        "tools": {name: tools.get(name, "absent") for name in FINGERPRINT_TOOLS},
        "settings": settings,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601, second precision, with a +00:00 offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def build_provenance(
    *,
    model_name: str,
    version: int,
    weights: Path,
    weights_sha256: str,
    artifact: Path,
    artifact_sha256: str,
    export_format: str,
    opset: int | None,
    tools: dict[str, str],
    settings: dict[str, Any],
    checks: dict[str, Any],
    created_at: str | None = None,
) -> dict[str, Any]:
    """The provenance.json dict of one version folder."""
    return {
        "model_name": model_name,
        "version": version,
        "created_at": created_at or utc_now_iso(),
        "format": export_format,
        "source": {"weights": str(weights), "weights_sha256": weights_sha256},
        "artifact": {
            "file": artifact.name,
            "sha256": artifact_sha256,
            "size_bytes": artifact.stat().st_size,
        },
        "tools": tools,
        "opset": opset,
        "settings": settings,
        "source_fingerprint": source_fingerprint(
            weights_sha256, export_format, opset, tools, settings
        ),
        "checks": checks,
    }

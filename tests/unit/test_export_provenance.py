"""export.provenance: the source fingerprint and the provenance.json dict."""

from __future__ import annotations

import re
from pathlib import Path

from export.provenance import build_provenance, source_fingerprint, tool_versions

TOOLS = {"torch": "2.13.0", "onnx": "1.22.0", "onnxruntime": "1.32.0", "transformers": "5.24.0"}


def _fingerprint(**changes: object) -> str:
    args: dict = {
        "weights_sha256": "w" * 64,
        "export_format": "onnx",
        "opset": 17,
        "tools": TOOLS,
        "settings": {"a": 1, "b": [1, 2]},
    }
    args.update(changes)
    return source_fingerprint(**args)


def test_fingerprint_is_a_stable_sha256_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{64}", _fingerprint())
    assert _fingerprint() == _fingerprint()


def test_fingerprint_ignores_settings_key_order() -> None:
    assert _fingerprint(settings={"b": [1, 2], "a": 1}) == _fingerprint()


def test_fingerprint_changes_with_each_input() -> None:
    base = _fingerprint()
    assert _fingerprint(weights_sha256="x" * 64) != base
    assert _fingerprint(export_format="int8") != base
    assert _fingerprint(opset=18) != base
    assert _fingerprint(tools={**TOOLS, "onnxruntime": "1.33.0"}) != base
    assert _fingerprint(settings={"a": 2, "b": [1, 2]}) != base


def test_fingerprint_ignores_tools_that_do_not_shape_the_artifact() -> None:
    assert _fingerprint(tools={**TOOLS, "numpy": "9.9", "python": "3.99"}) == _fingerprint()


def test_tool_versions_name_the_toolchain_and_python() -> None:
    versions = tool_versions()
    expected = {"torch", "onnx", "onnxruntime", "transformers", "tokenizers", "numpy", "python"}
    assert set(versions) == expected


def test_build_provenance_records_artifact_source_tools_and_checks(tmp_path: Path) -> None:
    artifact = tmp_path / "model.onnx"
    artifact.write_bytes(b"12345")
    provenance = build_provenance(
        model_name="minilm_onnx", version=3, weights=Path("/w/model.safetensors"),
        weights_sha256="w" * 64, artifact=artifact, artifact_sha256="a" * 64,
        export_format="onnx", opset=17, tools=TOOLS, settings={"a": 1, "b": [1, 2]},
        checks={"parity": 1e-7},
    )  # fmt: skip
    assert provenance["artifact"] == {"file": "model.onnx", "sha256": "a" * 64, "size_bytes": 5}
    assert provenance["source"] == {"weights": "/w/model.safetensors", "weights_sha256": "w" * 64}
    assert provenance["source_fingerprint"] == _fingerprint()
    assert provenance["version"] == 3
    assert provenance["checks"] == {"parity": 1e-7}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", provenance["created_at"])

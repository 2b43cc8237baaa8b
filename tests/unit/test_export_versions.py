"""export.versions: Triton's integer version folders and the up-to-date decision."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from core.versions import (
    is_up_to_date,
    next_version,
    read_provenance,
    sha256_file,
    write_provenance,
)
from core.versions import (
    versions_on_disk as list_versions,
)


def _version(model_dir: Path, version: int, fingerprint: str, content: bytes = b"weights") -> Path:
    """A version folder with an artifact and a provenance.json that records it."""
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(content)
    provenance = {
        "source_fingerprint": fingerprint,
        "artifact": {"file": "model.onnx", "sha256": hashlib.sha256(content).hexdigest()},
    }
    write_provenance(version_dir, provenance)
    return version_dir


def test_list_versions_of_missing_folder_is_empty(tmp_path: Path) -> None:
    assert list_versions(tmp_path / "absent") == []


def test_list_versions_sorts_numerically(tmp_path: Path) -> None:
    for name in ("10", "2", "1"):
        (tmp_path / name).mkdir()
    assert list_versions(tmp_path) == [1, 2, 10]


def test_list_versions_ignores_files_temp_and_non_integer_folders(tmp_path: Path) -> None:
    (tmp_path / "3").mkdir()
    (tmp_path / ".tmp-123").mkdir()
    (tmp_path / "v4").mkdir()
    (tmp_path / "0").mkdir()
    (tmp_path / "-5").mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    (tmp_path / "config.pbtxt").write_text("")
    assert list_versions(tmp_path) == [3]


def test_next_version_starts_at_one(tmp_path: Path) -> None:
    assert next_version(tmp_path) == 1
    assert next_version(tmp_path / "absent") == 1


def test_next_version_skips_non_integer_folders(tmp_path: Path) -> None:
    for name in ("1", "2", "latest", "9b"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 3


def test_next_version_follows_the_highest_even_with_gaps(tmp_path: Path) -> None:
    for name in ("1", "5"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 6


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = bytes(range(256)) * 5000
    path.write_bytes(data)
    assert sha256_file(path, chunk_size=1000) == hashlib.sha256(data).hexdigest()


def test_read_provenance_round_trips_write_provenance(tmp_path: Path) -> None:
    write_provenance(tmp_path, {"version": 2, "nested": {"b": 1, "a": [1, 2]}})
    assert read_provenance(tmp_path) == {"version": 2, "nested": {"b": 1, "a": [1, 2]}}
    assert json.loads((tmp_path / "provenance.json").read_text())["version"] == 2


def test_read_provenance_of_missing_or_broken_file_is_none(tmp_path: Path) -> None:
    assert read_provenance(tmp_path) is None
    (tmp_path / "provenance.json").write_text("{not json")
    assert read_provenance(tmp_path) is None
    (tmp_path / "provenance.json").write_text("[1, 2]")
    assert read_provenance(tmp_path) is None


def test_is_up_to_date_returns_latest_version_with_same_fingerprint(tmp_path: Path) -> None:
    _version(tmp_path, 1, "old")
    _version(tmp_path, 2, "abc")
    assert is_up_to_date(tmp_path, "abc") == 2


def test_is_up_to_date_is_none_without_versions(tmp_path: Path) -> None:
    assert is_up_to_date(tmp_path, "abc") is None


def test_is_up_to_date_is_none_when_fingerprint_differs(tmp_path: Path) -> None:
    _version(tmp_path, 1, "abc")
    assert is_up_to_date(tmp_path, "def") is None


def test_is_up_to_date_only_considers_the_latest_version(tmp_path: Path) -> None:
    _version(tmp_path, 1, "abc")
    _version(tmp_path, 2, "newer-settings")
    assert is_up_to_date(tmp_path, "abc") is None


def test_is_up_to_date_is_none_when_artifact_was_deleted(tmp_path: Path) -> None:
    version_dir = _version(tmp_path, 1, "abc")
    (version_dir / "model.onnx").unlink()
    assert is_up_to_date(tmp_path, "abc") is None


def test_is_up_to_date_is_none_when_artifact_bytes_changed(tmp_path: Path) -> None:
    version_dir = _version(tmp_path, 1, "abc")
    (version_dir / "model.onnx").write_bytes(b"tampered")
    assert is_up_to_date(tmp_path, "abc") is None


def test_is_up_to_date_is_none_when_latest_has_no_provenance(tmp_path: Path) -> None:
    _version(tmp_path, 1, "abc")
    (tmp_path / "2").mkdir()
    assert is_up_to_date(tmp_path, "abc") is None


def test_is_up_to_date_is_none_when_provenance_names_no_artifact(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    write_provenance(tmp_path / "1", {"source_fingerprint": "abc"})
    assert is_up_to_date(tmp_path, "abc") is None

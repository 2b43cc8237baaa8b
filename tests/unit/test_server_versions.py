"""Version policy edits, selection and history: pure file logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import config_edit, versions
from core.paths import DEFAULT_REPOSITORY

CONFIG = (DEFAULT_REPOSITORY / "minilm_onnx" / "config.pbtxt").read_text()
SHIPPED_POLICY = "version_policy: { specific: { versions: [ 1 ] } }"
LATEST = CONFIG.replace(SHIPPED_POLICY, "version_policy: { latest: { num_versions: 1 } }")


def model_dir(tmp_path: Path, numbers: list[int], text: str = CONFIG) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (tmp_path / str(n)).mkdir()
    (tmp_path / "config.pbtxt").write_text(text)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "gpu.pbtxt").write_text(text)
    return tmp_path


def test_the_shipped_policy_names_the_served_version_whatever_else_is_on_disk() -> None:
    assert SHIPPED_POLICY in CONFIG
    assert versions.selected_versions(versions.parse_config(CONFIG), [1, 2, 5]) == [1]


def test_latest_policy_selects_the_highest_version_on_disk() -> None:
    assert versions.selected_versions(versions.parse_config(LATEST), [1, 2, 5]) == [5]


def test_with_specific_version_rewrites_the_one_policy_line_and_parses() -> None:
    edited = config_edit.with_specific_version(LATEST, 2)
    assert "version_policy: { specific: { versions: [ 2 ] } }" in edited
    assert list(versions.parse_config(edited).version_policy.specific.versions) == [2]
    assert edited.replace(versions.policy_line([2]), "") == LATEST.replace(
        "version_policy: { latest: { num_versions: 1 } }", "")  # nothing else changed
    assert versions.selected_versions(versions.parse_config(edited), [1, 2, 3]) == [2]


def test_set_version_edits_every_profile_and_restore_undoes_it(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, [1, 2])
    previous = config_edit.set_version(folder, 1)
    files = versions.config_files(folder)
    assert all("specific: { versions: [ 1 ] }" in p.read_text() for p in files)
    versions.restore(previous)
    assert (folder / "config.pbtxt").read_text() == CONFIG


def test_a_config_triton_would_not_parse_is_never_written() -> None:
    from google.protobuf.text_format import ParseError

    with pytest.raises(ParseError, match=r'has no field named "not_a_field"'):
        config_edit.with_specific_version(CONFIG + "\nnot_a_field: 1\n", 2)


def test_rollback_without_a_target_goes_to_the_previously_promoted_version(tmp_path) -> None:
    for version, action in ((2, "initial"), (1, "rollback"), (2, "promote")):
        versions.append_history(tmp_path, version, action)
    history = versions.read_history(tmp_path)
    assert versions.previous_version(history, 2) == 1
    versions.append_history(tmp_path, 1, "rollback")
    history = versions.read_history(tmp_path)
    assert versions.previous_version(history, 1) == 2  # twice: back to the start
    with pytest.raises(versions.VersionError, match="no earlier version"):
        versions.previous_version([versions.HistoryEntry(3, "initial", "t")], 3)


def test_router_reports_the_version_the_policy_selects(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, [1, 2])
    assert versions.served_version(folder) == 1
    config_edit.set_version(folder, 2)
    assert versions.served_version(folder) == 2
    (folder / "config.pbtxt").write_text(CONFIG.replace(SHIPPED_POLICY, "# " + SHIPPED_POLICY))
    assert versions.served_version(folder) == 2  # a commented-out policy is no policy: latest


def test_pinning_before_an_export_turns_latest_into_the_version_served_now(tmp_path) -> None:
    folder = model_dir(tmp_path, [1, 2], LATEST)
    assert config_edit.pin_served_version(folder) == 2
    assert all(versions.policy_line([2]) in p.read_text() for p in versions.config_files(folder))
    (folder / "3").mkdir()  # the export's new folder: not selected
    assert versions.selected_versions(versions.parse_config((folder / "config.pbtxt").read_text()),
                                      versions.versions_on_disk(folder)) == [2]


def test_pinning_leaves_a_specific_policy_and_a_model_with_no_version_alone(tmp_path) -> None:
    pinned = model_dir(tmp_path / "pinned", [1, 2])
    assert config_edit.pin_served_version(pinned) == 1
    assert (pinned / "config.pbtxt").read_text() == CONFIG
    empty = model_dir(tmp_path / "empty", [], LATEST)
    assert config_edit.pin_served_version(empty) is None  # the first export serves at once
    assert (empty / "config.pbtxt").read_text() == LATEST
    assert config_edit.pin_served_version(tmp_path / "no_config") is None


def test_a_candidate_is_gated_against_the_served_version_never_itself(tmp_path) -> None:
    folder = model_dir(tmp_path, [1, 2, 3])
    assert versions.gate_baseline(folder, 2) == 1  # the served version
    assert versions.gate_baseline(folder, 1) is None  # served, and nothing promoted before it
    versions.append_history(folder, 3, "promote")
    versions.append_history(folder, 1, "rollback")
    assert versions.gate_baseline(folder, 1) == 3  # served: the one promoted before it

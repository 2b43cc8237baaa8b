"""core.config_edit: a config edit is parse, change the protobuf, render; never a regex."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core import config_edit
from core.config_edit import edited, header_of, select_version
from core.families.configs import family_of
from core.paths import DEFAULT_REPOSITORY
from core.repository import edit_config, put_parameter, set_parameter
from core.versions import parse_config, read_config

CONFIGS = sorted(DEFAULT_REPOSITORY.glob("*/config.pbtxt")) + sorted(
    DEFAULT_REPOSITORY.glob("*/configs/*.pbtxt"))
FAMILY_CONFIGS = [p for p in CONFIGS if family_of(parse_config(p.read_text())) is not None]


def copy_model(tmp_path: Path, model: str) -> Path:
    shutil.copytree(DEFAULT_REPOSITORY / model, tmp_path / model,
                    ignore=lambda folder, names: [n for n in names if n.isdigit()])
    return tmp_path


@pytest.mark.parametrize("path", FAMILY_CONFIGS,
                         ids=lambda p: str(p.relative_to(DEFAULT_REPOSITORY)))
def test_an_edit_that_changes_nothing_writes_the_shipped_text_back(path: Path) -> None:
    text = path.read_text()
    assert edited(text, lambda config: None) == text


def test_setting_a_parameter_changes_that_parameter_only(tmp_path: Path) -> None:
    repo = copy_model(tmp_path, "embed")
    before = (repo / "embed" / "config.pbtxt").read_text()
    set_parameter(repo, "embed", "forced_level", "2")
    after = (repo / "embed" / "config.pbtxt").read_text()
    assert read_config(repo / "embed").parameters["forced_level"].string_value == "2"
    assert after == before.replace('key: "forced_level" value: { string_value: "-1" }',
                                   'key: "forced_level" value: { string_value: "2" }')


def test_a_parameter_that_is_not_there_is_refused_and_nothing_is_written(tmp_path) -> None:
    repo = copy_model(tmp_path, "embed")
    before = (repo / "embed" / "config.pbtxt").read_text()
    with pytest.raises(ValueError, match="embed has no parameter 'no_such_knob'"):
        set_parameter(repo, "embed", "no_such_knob", "1")
    assert (repo / "embed" / "config.pbtxt").read_text() == before


def test_put_parameter_adds_a_missing_key_and_sets_an_existing_one(tmp_path: Path) -> None:
    repo = copy_model(tmp_path, "embed")
    put_parameter(repo, "embed", "gc_policy", "frozen")
    put_parameter(repo, "embed", "new_knob", "7")
    params = read_config(repo / "embed").parameters
    assert (params["gc_policy"].string_value, params["new_knob"].string_value) == ("frozen", "7")


def test_a_typed_edit_keeps_the_header_of_a_config_outside_the_families(tmp_path) -> None:
    repo = copy_model(tmp_path, "health")
    text = (repo / "health" / "config.pbtxt").read_text()
    previous = edit_config(repo, "health", lambda c: c.instance_group[0].__setattr__("count", 2))
    assert previous == text
    new = (repo / "health" / "config.pbtxt").read_text()
    assert new.startswith("".join(f"# {line}".rstrip() + "\n"
                                  for line in header_of(text).splitlines()))
    expected = parse_config(text)
    expected.instance_group[0].count = 2
    assert parse_config(new) == expected


def test_a_policy_laid_out_by_hand_is_edited_as_well(tmp_path: Path) -> None:
    """The regex editor needed the policy on one line; parsing does not."""
    text = (DEFAULT_REPOSITORY / "minilm_onnx" / "config.pbtxt").read_text().replace(
        "version_policy: { specific: { versions: [ 1 ] } }",
        "version_policy {\n  specific {\n    versions: 1\n  }\n}")
    new = edited(text, select_version(3))
    assert list(parse_config(new).version_policy.specific.versions) == [3]
    assert "version_policy: { specific: { versions: [ 3 ] } }" in new  # the shipped layout


def test_the_benchmarks_no_batching_variant_has_no_dynamic_batcher(tmp_path: Path) -> None:
    repo = copy_model(tmp_path, "embed")
    edit_config(repo, "embed", lambda config: config.ClearField("dynamic_batching"))
    assert not read_config(repo / "embed").HasField("dynamic_batching")
    assert config_edit.header_of((repo / "embed" / "config.pbtxt").read_text()) == header_of(
        (DEFAULT_REPOSITORY / "embed" / "config.pbtxt").read_text())

"""`tmr export` says which stage it is in: a line as each slow stage starts, the result
line as each format ends, and the same exit codes; plain lines when stdout is a log."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cli.errors import Tried, message_for
from cli.export import ExportOptions
from core.families.catalog import find
from core.paths import DEFAULT_REPOSITORY
from export import pipeline
from export.errors import ExportCheckError, ExportRequestError
from export.pipeline import ExportResult

STAGE_LINE = re.compile(r"^\[ *\d+\.\ds\] ")


class FakeRecipe:
    """What export_model reads of a recipe, without loading any weights."""

    weights_sha256 = "0" * 64

    def opset(self, fmt: str) -> int:
        return 17

    def settings(self, fmt: str, precision: str = "fp32") -> dict[str, Any]:
        return {}


def test_export_model_announces_the_source_and_only_the_formats_it_builds(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built: list[str] = []
    monkeypatch.setattr(pipeline, "recipe_for", lambda *a: FakeRecipe())
    monkeypatch.setattr(pipeline, "write_front_files", lambda *a: None)
    monkeypatch.setattr(pipeline.versions, "is_up_to_date",
                        lambda model_dir, _: 3 if model_dir.name == "minilm_int8" else None)
    monkeypatch.setattr(pipeline, "publish", lambda recipe, model_dir, fmt, *_: built.append(fmt)
                        or ExportResult(model_dir.name, 4, "written", tmp_path))
    stages: list[str] = []
    model = find(DEFAULT_REPOSITORY, "minilm")
    routing = {p: p.read_text() for p in (DEFAULT_REPOSITORY / "embed").rglob("*.pbtxt")}
    results = pipeline.export_model(DEFAULT_REPOSITORY, model, ["onnx", "torchscript", "int8"],
                                    on_stage=stages.append)
    # Exporting makes versions; it never changes which encoder the front calls.
    assert {p: p.read_text() for p in (DEFAULT_REPOSITORY / "embed").rglob("*.pbtxt")} == routing
    assert stages[0].startswith("minilm: loading ")
    assert stages[1:] == ["minilm_onnx: exporting onnx",
                          "minilm_torchscript: exporting torchscript"]
    assert built == ["onnx", "torchscript"]
    assert [r.action for r in results] == ["written", "written", "up to date"]


def test_an_unknown_format_is_refused_before_anything_is_loaded() -> None:
    with pytest.raises(ValueError, match=r"minilm has no encoder for \['fp16'\]"):
        pipeline.wanted_formats(find(DEFAULT_REPOSITORY, "minilm"), ["onnx", "fp16"])


def export_args(**changes: Any) -> ExportOptions:
    defaults = {"model": "minilm", "all": False, "repository": DEFAULT_REPOSITORY,
                "formats": ["onnx", "int8"], "force": False, "threads": 1, "verbose": False}
    return ExportOptions(**{**defaults, **changes})


def fake_export(fail_on: str | None = None) -> Any:
    def export_model(repository: Path, model: Any, formats: list[str], *, on_result: Any,
                     on_stage: Any, **_: Any) -> list[ExportResult]:
        on_stage(f"{model.base}: loading its source")
        for fmt in formats:
            on_stage(f"{model.encoder(fmt)}: exporting {fmt}")
            if fmt == fail_on:
                raise ExportCheckError(f"{fmt} parity", 0.97, 0.99)
            on_result(ExportResult(model.encoder(fmt), 2, "written", repository,
                                   {"took": "1.0s"}))
        return []
    return export_model


def test_tmr_export_prints_each_stage_as_it_starts_and_each_result_as_it_ends(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.export import export_command

    monkeypatch.setattr(pipeline, "export_model", fake_export())
    assert export_command(export_args()) == 0
    lines = capsys.readouterr().out.splitlines()  # not a terminal: no bar, plain lines only
    assert [STAGE_LINE.sub("", line) for line in lines[:-1]] == [
        "minilm: loading its source",
        "minilm_onnx: exporting onnx",
        "minilm_onnx              v2   written                took=1.0s",
        "minilm_int8: exporting int8",
        "minilm_int8              v2   written                took=1.0s",
    ]
    assert all(STAGE_LINE.match(line) for line in (lines[0], lines[1], lines[3]))
    assert lines[-1].startswith("done in ")


def test_tmr_export_keeps_its_exit_codes_for_a_failed_check_and_an_unknown_format(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.export import export_command

    monkeypatch.setattr(pipeline, "export_model", fake_export(fail_on="int8"))
    assert export_command(export_args()) == 1
    out, err = capsys.readouterr()
    assert "minilm_onnx              v2   written" in out and "done in" not in out
    assert "export failed, nothing written for this format: int8 parity: measured 0.97" in err
    with pytest.raises(ExportRequestError) as refused:
        export_command(export_args(formats=["fp16"]))
    text, code = message_for(refused.value, Tried("export"))
    assert code == 2 and text.startswith("minilm has no encoder for ['fp16']")

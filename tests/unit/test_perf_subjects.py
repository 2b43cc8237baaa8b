"""perf.subjects.build_repository: the benchmark's repository can be served as built."""

from __future__ import annotations

from pathlib import Path

from perf.subjects import FIXTURES, build_repository, text_model


def test_every_python_fixture_gets_the_fronts_tokenizer_and_the_bare_model_its_onnx(
        tmp_path: Path) -> None:
    repo = build_repository(tmp_path, [])
    front = repo / text_model(repo).front / "1" / "tokenizer.json"
    coded = [f.name for f in FIXTURES.iterdir() if (f / "1" / "model.py").exists()]
    assert coded, "no Python fixtures found"
    for name in coded:
        assert (repo / name / "1" / "tokenizer.json").read_bytes() == front.read_bytes(), name
    config = (repo / "embed_bare" / "config.pbtxt").read_text()
    assert 'key: "onnx_path" value: { string_value: "" }' not in config


def test_text_only_keeps_the_text_models_folders_and_no_fixture(tmp_path: Path) -> None:
    repo = build_repository(tmp_path, [], text_only=True)
    assert {p.name for p in repo.iterdir()} == set(text_model(repo).models)


def test_text_only_keeps_the_fixtures_named_ready_to_serve(tmp_path: Path) -> None:
    repo = build_repository(tmp_path, [], text_only=True, fixtures=["embed_bare"])
    model = text_model(repo)
    assert {p.name for p in repo.iterdir()} == {*model.models, "embed_bare"}
    assert (repo / "embed_bare" / "1" / "tokenizer.json").read_bytes() == (
        repo / model.front / "1" / "tokenizer.json").read_bytes()
    config = (repo / "embed_bare" / "config.pbtxt").read_text()
    assert 'key: "onnx_path" value: { string_value: "" }' not in config

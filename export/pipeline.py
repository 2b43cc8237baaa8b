"""Exporting a family model into the repository, and adding a new one (`tmr add`).

Every format is built in `<model_dir>/.tmp-<pid>`, checked by the family's recipe, given
a provenance.json and only then renamed to the next integer version, so Triton never sees
a half-written version; the version policy is pinned first, so the new version serves
only once promoted. A model is added in a staging folder beside the repository's models
and moved in only when every format passed its checks: a bad source leaves nothing.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import config_edit, versions
from core.families import TEXT_EMBEDDING, Family, family
from core.families.catalog import FamilyModel, UnknownModelError, find
from core.families.configs import (
    EncoderSpec,
    FrontSpec,
    encoder_spec,
    write_encoder,
    write_front,
)
from core.files import write_atomically
from core.hardware import FP32
from export import primary_choice, warmup
from export.errors import ExportRequestError
from export.provenance import build_provenance, source_fingerprint, tool_versions
from export.recipe import ExportRecipe, recipe_module
from export.sources import resolve, stored

FRONT_VERSION = "1"  # a front model's files (its tokenizer) live in version 1


class AddError(ExportRequestError):
    """`tmr add` refused: the name is taken by something else, or the family is unknown."""


@dataclass(frozen=True)
class ExportResult:
    """What happened to one model: a new version written, or already up to date."""

    model_name: str
    version: int
    action: str  # "written" | "up to date"
    path: Path
    figures: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        figures = " ".join(f"{k}={val}" for k, val in self.figures.items())
        action = self.action if self.action == "written" else f"up to date (version {self.version})"
        return f"{self.model_name:<24} v{self.version:<3} {action:<22} {figures}".rstrip()


def recipe_for(fam: Family, source: str, threads: int,
               repository: Path | None = None) -> ExportRecipe:
    """The family's export recipe for a source (folder, distribution or parts:...)."""
    return recipe_module(fam).recipe(resolve(source, repository), threads)


def publish(recipe: ExportRecipe, model_dir: Path, fmt: str, fingerprint: str,
            precision: str = FP32) -> ExportResult:
    """Build, check and publish one new version of a format (see the module docstring)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    work = model_dir / f".tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    started = time.perf_counter()
    try:
        checks, figures = recipe.build(fmt, work, precision)
        artifact = work / recipe.family.format(fmt).artifact
        version = versions.next_version(model_dir)
        versions.write_provenance(work, build_provenance(
            model_name=model_dir.name, version=version, weights=recipe.facts.weights,
            weights_sha256=recipe.weights_sha256, artifact=artifact,
            artifact_sha256=versions.sha256_file(artifact), export_format=fmt,
            opset=recipe.opset(fmt),
            tools=tool_versions(), settings=recipe.settings(fmt, precision), checks=checks))
        size_mib = artifact.stat().st_size / 2**20
        final = model_dir / str(version)
        config_edit.pin_served_version(model_dir)  # the new version serves only once promoted
        work.rename(final)  # atomic on one filesystem; fails if the version appeared meanwhile
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {**figures, "size": f"{size_mib:.1f}MiB",
               "took": f"{time.perf_counter() - started:.1f}s"}
    return ExportResult(model_dir.name, version, "written", final, figures)


def write_front_files(recipe: ExportRecipe, front_dir: Path) -> None:
    """The front model's files (its tokenizer), each replaced atomically."""
    folder = front_dir / FRONT_VERSION
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in recipe.front_files().items():
        write_atomically(folder / name, content)


PRIMARY = "primary"  # `--format primary`: the format the model's front serves on this host


def wanted_formats(model: FamilyModel, formats: Sequence[str] | None = None) -> list[str]:
    """The formats to export (all the family's by default; `primary` is the one its front
    serves here, core.families.catalog's served view); ExportRequestError for one the model
    has no encoder for."""
    named = [model.primary if f == PRIMARY else f for f in formats or []]
    wanted = list(dict.fromkeys(named or [f.name for f in model.family.formats]))
    unknown = [f for f in wanted if f not in model.encoders]
    if unknown:
        raise ExportRequestError(f"{model.base} has no encoder for {unknown}; it has "
                                 f"{sorted(model.encoders)}")
    return wanted


def export_model(repository: Path, model: FamilyModel, formats: Sequence[str] | None = None,
                 force: bool = False, threads: int = 2,
                 on_result: Callable[[ExportResult], None] | None = None,
                 sources_root: Path | None = None,
                 on_stage: Callable[[str], None] | None = None) -> list[ExportResult]:
    """Export the model's formats (all by default), skipping those up to date unless
    `force`; then its front model's files and warmup data (export/warmup.py). Raises
    ExportCheckError on a failed check. A relative source is found in `sources_root` (the
    repository by default). `on_stage` hears each slow stage as it starts: loading the
    source, each format built. Exporting makes versions and never changes which encoder a
    front calls: the reviewed configs choose, and `tmr tune` fits them to the host."""
    fam = model.family
    wanted = wanted_formats(model, formats)
    stage = on_stage or (lambda _: None)
    spec = encoder_spec(versions.read_config(repository / model.encoder(wanted[0])))
    stage(f"{model.base}: loading {spec.source}")
    recipe = recipe_for(fam, spec.source, threads, sources_root or repository)
    tools = tool_versions()
    results = []
    for fmt in wanted:
        model_dir = repository / model.encoder(fmt)
        precision = encoder_spec(versions.read_config(model_dir)).precision
        fingerprint = source_fingerprint(recipe.weights_sha256, fmt, recipe.opset(fmt), tools,
                                         recipe.settings(fmt, precision))
        current = None if force else versions.is_up_to_date(model_dir, fingerprint)
        if current is None:
            stage(f"{model_dir.name}: exporting {fmt}")
        result = (ExportResult(model_dir.name, current, "up to date", model_dir / str(current))
                  if current is not None
                  else publish(recipe, model_dir, fmt, fingerprint, precision))
        results.append(result)
        if on_result is not None:
            on_result(result)
    if model.front:
        write_front_files(recipe, repository / model.front)
        warmup.write_warmup(repository, model)  # its real inputs, from the front's files
    return results


def add_model(repository: Path, name: str, family_name: str, source: str,
              front: str | None = None, threads: int = 2,
              on_result: Callable[[ExportResult], None] | None = None,
              primary: str | None = None,
              on_stage: Callable[[str], None] | None = None,
              matryoshka_dims: Sequence[int] = ()) -> list[ExportResult]:
    """`tmr add`: a new model of a known family, exported, configured and wired to its front
    model (its reviewed primary: `primary`, else the family's; `tmr tune` then fits it to
    the host); run again with the same arguments, it only checks that all is up to date.
    `on_stage` hears each stage as it starts (`tmr add` prints it). `matryoshka_dims`: a
    text model's smaller sizes (else those its folder declares).

    The configs record the source as given, or relative to the repository when it lies
    inside it (an image model keeps its source.py in its front's folder: <front>/source)."""
    fam = family(family_name)
    if primary:
        primary_choice.check_primary(fam, primary)  # refused before anything is loaded
    front = front or name
    source = stored(source, repository)
    try:
        existing = find(repository, name)
    except UnknownModelError:
        existing = None
    stage = on_stage or (lambda text: None)
    if existing is not None:
        stage(f"'{name}' is in the repository: checking its versions")
        return readd(repository, existing, fam, source, threads, on_result, on_stage)
    taken = [m for m in [front, *(fam.encoder_name(name, f.name) for f in fam.formats)]
             if (repository / m).exists() and not only_a_source(repository / m)]
    if taken:
        raise AddError(f"{', '.join(taken)} already in {repository} and not a {fam.name} "
                       f"model of '{name}': choose another name")
    # The source is checked (and loaded) before anything is written.
    stage(f"loading {source}")
    recipe = recipe_for(fam, source, threads, repository)
    staging = repository / f".add-{name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    facts = recipe.facts
    parameters = front_parameters(fam, facts, matryoshka_dims)
    try:
        for fmt in fam.formats:
            write_encoder(staging, EncoderSpec(fam.name, name, fmt.name, facts.dimension, source,
                                               facts.input_shape))  # FP32: portable
        write_front(staging, FrontSpec(fam.name, front, name, facts.dimension, parameters,
                                       primary=None if primary == fam.serving.primary else primary))
        staged = find(staging, name)
        results = export_model(staging, staged, threads=threads, on_result=on_result,
                               sources_root=repository, on_stage=on_stage)
        stage(f"moving {name}'s folders into {repository}")
        # The front last: it loads its encoders' configs at start; its lane links to it.
        for folder in [*staged.encoders.values(), *filter(None, [staged.lane]), front]:
            move_into(staging / folder, repository / folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return results


def front_parameters(fam: Family, facts: Any, matryoshka_dims: Sequence[int]) -> dict[str, str]:
    """The front config's values of the model: its facts', with `--matryoshka-dims` (a
    text model's, each under its own size) over what its folder declares."""
    if not matryoshka_dims:
        return facts.front_parameters
    if fam is not TEXT_EMBEDDING:
        raise AddError(f"--matryoshka-dims is for a {TEXT_EMBEDDING.name} model, not "
                       f"{fam.name}")
    sizes = sorted(set(matryoshka_dims), reverse=True)
    if sizes[0] >= facts.dimension or sizes[-1] < 1:
        raise AddError(f"--matryoshka-dims {','.join(map(str, sizes))}: each size must be "
                       f"from 1 to {facts.dimension - 1} (the model's embeddings have "
                       f"{facts.dimension})")
    return {**facts.front_parameters, "matryoshka_dims": ",".join(map(str, sizes))}


def only_a_source(folder: Path) -> bool:
    """A front's folder holding nothing but the model's own source, before `tmr add`."""
    return folder.is_dir() and {p.name for p in folder.iterdir()} <= {"source"}


def move_into(staged: Path, target: Path) -> None:
    """Rename a staged model folder into the repository; into its existing folder (its
    source) item by item, the config last."""
    if not target.exists():
        staged.rename(target)
        return
    for item in sorted(staged.iterdir(), key=lambda p: p.name == "config.pbtxt"):
        item.rename(target / item.name)


def readd(repository: Path, model: FamilyModel, fam: Family, source: str, threads: int,
          on_result: Callable[[ExportResult], None] | None,
          on_stage: Callable[[str], None] | None = None) -> list[ExportResult]:
    """The model exists: the same family and source make `tmr add` a check; others refuse."""
    spec = encoder_spec(versions.read_config(repository / next(iter(model.encoders.values()))))
    if model.family.name != fam.name or spec.source != source:
        raise AddError(f"'{model.base}' already exists as a {model.family.name} model from "
                       f"{spec.source!r}; remove its folders first to add it from {source!r}")
    return export_model(repository, model, threads=threads, on_result=on_result,
                        on_stage=on_stage)

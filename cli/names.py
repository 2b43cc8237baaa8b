"""One word means one thing: each command takes the kind of name it acts on, and resolves
the other kinds of a family model's names to it, saying so on stderr.

    ENCODER  what a release acts on (rollout, promote, rollback, gate, perf plan): an
             encoder folder (minilm_onnx); a model's name (minilm) or its front (embed)
             resolve to the encoder its front serves here (core.families.catalog)
    FRONT    what `tmr degrade` acts on: a front model (embed); a model's name or one of
             its encoders resolve to its front
    FOLDER   what `tmr versions` lists: any model folder; a model's name resolves like
             ENCODER

A name no kind has is a UsageError that lists the valid names.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cli.errors import UsageError
from core.families.catalog import FamilyModel, catalog, served_encoder
from server.profile import served_variant

Kind = Literal["encoder", "front", "folder"]
ENCODER: Kind = "encoder"
FRONT: Kind = "front"
FOLDER: Kind = "folder"
WHAT = {ENCODER: "an encoder", FRONT: "a front model", FOLDER: "a model folder"}


@dataclass(frozen=True)
class Resolved:
    """The name a command acts on, and what the user gave."""

    name: str
    given: str

    @property
    def note(self) -> str:
        return "" if self.name == self.given else f"{self.given!r} resolved to {self.name!r}"


def folders(repository: Path) -> list[str]:
    return sorted(p.parent.name for p in repository.glob("*/config.pbtxt"))


def valid_names(repository: Path, kind: Kind, models: list[FamilyModel]) -> list[str]:
    """What a command of `kind` accepts, for the error that lists them."""
    bases = {m.base for m in models}
    if kind == FRONT:
        return sorted({*(m.front for m in models if m.front), *bases})
    if kind == FOLDER:
        return sorted({*folders(repository), *bases})
    family = {name for m in models for name in m.models}
    encoders = {name for m in models for name in m.encoders.values()}
    return sorted(bases | encoders | (set(folders(repository)) - family))


def resolve(repository: Path, name: str, kind: Kind) -> Resolved:
    """The name of `kind` that `name` stands for (pure but for reading the repository)."""
    models = catalog(repository)
    model = next((m for m in models if name == m.base or name in m.models), None)
    if kind == FRONT and model is not None and model.front:
        return Resolved(name if name == model.lane else model.front, name)
    is_folder = (repository / name / "config.pbtxt").is_file()
    if kind == FOLDER and is_folder:
        return Resolved(name, name)
    if kind != FRONT and (is_folder or model is not None):
        return Resolved(served_encoder(repository, name, served_variant(repository)[0]), name)
    if kind == FRONT and is_folder and model is None:
        return Resolved(name, name)  # a model outside the families: the server decides
    valid = ", ".join(valid_names(repository, kind, models)) or "none"
    raise UsageError(f"unknown model {name!r} in "
                     f"{repository} (this command takes {WHAT[kind]}); valid names: {valid}")


def resolve_name(repository: Path, name: str, kind: Kind, strict: bool = True) -> str:
    """`resolve`, with its note on stderr; a missing repository (the tools image) resolves
    nothing, and neither does an unknown name unless `strict` (a call's model: the server
    may hold models this repository does not)."""
    if not repository.is_dir():
        return name
    try:
        resolved = resolve(repository, name, kind)
    except UsageError:
        if strict:
            raise
        return name
    if resolved.note:
        print(f"tmr: {resolved.note} ({WHAT[kind]}, what this command acts on)",
              file=sys.stderr)
    return resolved.name

"""Which family models a repository holds, read from its configs (nothing is named in code).

A model of a family is a front model plus its encoders, one per format; their configs
say so in their parameters (`family`, `format`, `front_model`). `tmr serve`, export, the
release commands, health, the watchdog, perf and the tests all find models here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.errors import CoreError
from core.families import Family, family
from core.families.configs import parameters_of
from core.families.lanes import LANE_PARAMETER
from core.variant import REVIEWED, Variant
from core.versions import read_config, served_config, versions_on_disk

# A front config's parameter: "true" makes it its family's default front (default_front).
DEFAULT_FRONT_PARAMETER = "default_front"


class UnknownModelError(CoreError, KeyError):
    """A name that is neither a model nor a front model of any family in the repository."""

    exit_code = 2


@dataclass(frozen=True)
class FamilyModel:
    """A model of a family in a repository: its front model and its encoders by format."""

    family: Family
    base: str
    front: str | None
    encoders: dict[str, str] = field(default_factory=dict)  # format -> model folder
    primary_format: str = ""  # the format its front calls normally; "": the family's
    lane: str | None = None  # its front's interactive lane (core/families/lanes.py)

    @property
    def primary(self) -> str:
        """The format the front routes to normally (its config's `primary_model`)."""
        return self.primary_format or self.family.serving.primary

    @property
    def models(self) -> list[str]:
        """The front first, its lane, then the encoders in the family's order of formats."""
        ordered = [self.encoders[f.name] for f in self.family.formats if f.name in self.encoders]
        return [m for m in (self.front, self.lane) if m] + ordered

    def encoder(self, fmt: str) -> str:
        return self.encoders[fmt]


def catalog(repository: Path, variant: Variant = REVIEWED) -> list[FamilyModel]:
    """Every family model of `repository`, sorted by name; a front's primary is the one it
    calls under `variant` (the models themselves are every variant's)."""
    fronts: dict[str, tuple[Family, str, str]] = {}  # front -> (family, base, primary)
    lanes: dict[str, str] = {}  # front -> its lane
    found: dict[tuple[str, str], FamilyModel] = {}
    for path in sorted(repository.glob("*/config.pbtxt")):
        params = parameters_of(served_config(path.parent, variant))
        if "family" not in params:
            continue
        fam = family(params["family"])
        if "format" in params:
            base = path.parent.name.removesuffix("_" + params["format"])
            model = found.setdefault((fam.name, base), FamilyModel(fam, base, None))
            model.encoders[params["format"]] = path.parent.name
        elif LANE_PARAMETER in params:
            lanes[params[LANE_PARAMETER]] = path.parent.name
        elif "primary_model" in params:
            fronts[path.parent.name] = (fam, *fam.split_encoder_name(params["primary_model"]))
    models = []
    for (fam_name, base), model in sorted(found.items()):
        front, primary = next(((f, p) for f, (fam, b, p) in fronts.items()
                               if fam.name == fam_name and b == base), (None, ""))
        models.append(FamilyModel(model.family, base, front, model.encoders, primary,
                                  lanes.get(front or "")))
    return models


def find(repository: Path, name: str, variant: Variant = REVIEWED) -> FamilyModel:
    """The family model called `name` (its base name, its front or one of its encoders),
    its primary as `variant` serves it."""
    for model in catalog(repository, variant):
        if name == model.base or name in model.models:
            return model
    known = ", ".join(m.base for m in catalog(repository)) or "none"
    raise UnknownModelError(f"no model {name!r} in {repository}; its models: {known}")


def served_encoder(repository: Path, name: str, variant: Variant) -> str:
    """The encoder a release command acts on: `name` itself when it is a model folder that
    is not a front; for a model's name or its front, the encoder the front serves as its
    primary here (the host profile's where one serves), so `tmr rollout minilm 2` works
    whatever format this host's profile picked. A name no model has is returned as given
    (the command names it in its own error)."""
    if (repository / name / "config.pbtxt").exists() and not any(
            name == m.front for m in catalog(repository)):
        return name
    try:
        model = find(repository, name, variant)
    except UnknownModelError:
        return name
    return model.encoder(model.primary)


def default_front(repository: Path, family_name: str) -> str:
    """The front model a command calls when it is given none: the family's front whose
    config sets `default_front` to "true", else its first by name. A repository fact, so
    no code names a model. UnknownModelError when the repository has no such front."""
    fronts = [m.front for m in catalog(repository) if m.family.name == family_name and m.front]
    if not fronts:
        raise UnknownModelError(f"no {family_name} front model in {repository}; "
                                "name one with --model")
    marked = [f for f in fronts if parameters_of(read_config(repository / f)).get(
        DEFAULT_FRONT_PARAMETER) == "true"]
    return (marked or fronts)[0]


def missing_exports(repository: Path) -> list[str]:
    """Encoders (and fronts) of the repository that have no version folder yet."""
    return [name for model in catalog(repository) for name in model.models
            if not versions_on_disk(repository / name)]

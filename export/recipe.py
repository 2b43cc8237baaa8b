"""What a family's export recipe is: the one interface export, `tmr add` and the release
gate use, whatever the family (text_embedding.py and image_classification.py implement it).

`RECIPE_MODULES` names each family's recipe module (the export layer knows its families;
core never names a module above it). Its `recipe(folder, threads)` returns an
`ExportRecipe`, and its `warmup_files(repository, model)` makes the model's warmup data
(export/warmup.py writes it). Nothing outside the recipe module probes it for optional
methods or looks its family's metric or warmup up in a table: every member below is part
of the interface, the quality judge included.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from core.families import Family
from core.families.catalog import FamilyModel
from export.errors import ExportRequestError
from export.quality import Judgement
from export.signature import Signature


class RecipeFacts(Protocol):
    """What a source says about its model, as the pipeline and `tmr add` need it."""

    weights: Path  # what the provenance fingerprints
    dimension: int  # the embedding size, or the classes

    @property
    def input_shape(self) -> tuple[int, ...]: ...  # () for a model without one (text)

    @property
    def front_parameters(self) -> Mapping[str, str]: ...  # the front config's model values


class ExportRecipe(Protocol):
    """One source of one family, exported in every format of the family."""

    family: Family
    facts: RecipeFacts
    threads: int
    contract: Signature  # the exported graphs' tensor names, equal to the configs'

    @property
    def weights_sha256(self) -> str: ...

    def build(self, fmt: str, work: Path,
              precision: str = "fp32") -> tuple[dict[str, Any], dict[str, Any]]:
        """Write format `fmt`'s artifact into `work`, checked at `precision` where the
        format runs at the host's (core.families.spec.Format.host_precision); (checks,
        figures)."""
        ...

    def opset(self, fmt: str) -> int | None: ...

    def settings(self, fmt: str, precision: str = "fp32") -> dict[str, Any]: ...

    def front_files(self) -> dict[str, bytes]:
        """The files of the front model's version folder (its tokenizer, its labels)."""
        ...

    def eager(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The eager PyTorch reference the gate compares against."""
        ...

    def gate_batches(self) -> list[dict[str, np.ndarray]]: ...

    def judge_quality(self, reference: np.ndarray, candidate: np.ndarray,
                      gates: Mapping[str, float]) -> Judgement:
        """The gate's verdict on the candidate's outputs of `gate_batches` against the
        reference's (export/quality.py has the families' judges)."""
        ...


class RecipeModule(Protocol):
    """A family's recipe module."""

    def recipe(self, folder: Path, threads: int = 2) -> ExportRecipe: ...

    def warmup_files(self, repository: Path, model: FamilyModel) -> dict[str, bytes]:
        """The model's warmup data by file name (core/families/warmup.py names them): a
        real input of its clients for the front, and what the front makes of it for the
        encoders; read from the front's exported files (its tokenizer, its config)."""
        ...


# Each family's recipe module, by family name: imported on first use (they import torch).
RECIPE_MODULES = {"text_embedding": "export.text_embedding",
                  "image_classification": "export.image_classification",
                  "text_ranking": "export.text_ranking"}


def recipe_module(fam: Family) -> RecipeModule:
    """The family's recipe module, or ExportRequestError naming the families that have one."""
    if fam.name not in RECIPE_MODULES:
        raise ExportRequestError(f"no export recipe for the {fam.name} family; "
                                 f"export/recipe.py RECIPE_MODULES has {sorted(RECIPE_MODULES)}")
    return cast(RecipeModule, importlib.import_module(RECIPE_MODULES[fam.name]))

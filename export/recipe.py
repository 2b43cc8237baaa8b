"""What a family's export recipe is: the one interface export, `tmr add` and the release
gate use, whatever the family (text_embedding.py and image_classification.py implement it).

export/pipeline.py names each family's recipe module (`RECIPE_MODULES`); its `recipe(folder,
threads)` returns an `ExportRecipe`. Nothing outside the recipe module probes it for
optional methods or looks its family's metric up in a table: every member below is part
of the interface, the quality judge included.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from core.families import Family
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

"""The model families this repository serves, by name (see families/spec.py)."""

from __future__ import annotations

from collections.abc import Mapping

from core.errors import UnknownFamilyError
from core.families.image_classification import IMAGE_CLASSIFICATION
from core.families.spec import DIM, PRECISION_PARAMETER, Family, Format, Tensor
from core.families.text_embedding import TEXT_EMBEDDING
from core.families.text_ranking import TEXT_RANKING

FAMILIES: dict[str, Family] = {f.name: f for f in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION,
                                                   TEXT_RANKING)}


def family(name: str) -> Family:
    """The family called `name`, or an UnknownFamilyError naming the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UnknownFamilyError(f"unknown model family {name!r}; known: "
                       f"{', '.join(sorted(FAMILIES))}") from None


def served_precision(params: Mapping[str, str]) -> str:
    """What an encoder computes in, from its config's parameters: int8, bf16 or fp32 (what
    SERVED_BY reports)."""
    if "family" not in params or "format" not in params:
        return "fp32"
    fmt = family(params["family"]).format(params["format"])
    return params.get(PRECISION_PARAMETER, fmt.precision) if fmt.host_precision else fmt.precision


__all__ = ["DIM", "FAMILIES", "IMAGE_CLASSIFICATION", "TEXT_EMBEDDING", "TEXT_RANKING", "Family",
           "Format", "Tensor", "family", "served_precision"]

"""The model families this repository serves, by name (see families/spec.py)."""

from __future__ import annotations

from core.families.image_classification import IMAGE_CLASSIFICATION
from core.families.spec import DIM, Family, Format, Tensor
from core.families.text_embedding import TEXT_EMBEDDING

FAMILIES: dict[str, Family] = {f.name: f for f in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION)}


def family(name: str) -> Family:
    """The family called `name`, or a KeyError naming the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown model family {name!r}; known: "
                       f"{', '.join(sorted(FAMILIES))}") from None


__all__ = ["DIM", "FAMILIES", "IMAGE_CLASSIFICATION", "TEXT_EMBEDDING", "Family", "Format",
           "Tensor", "family"]

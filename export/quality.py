"""How the release gate judges a candidate's outputs against a reference, per kind of
output: a family's recipe picks its judge (`ExportRecipe.judge_quality`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from export.image_eval import top1_accuracy, top1_agreement
from export.parity import fidelity

Judgement = tuple[dict[str, float], str | None]  # the figures, and why it fails (or None)


def cosine_quality(reference: np.ndarray, candidate: np.ndarray,
                   gates: Mapping[str, float]) -> Judgement:
    """Row cosines (text embeddings): mean and minimum against their thresholds."""
    stats = fidelity(reference, candidate)
    need_mean, need_min = gates["gate_mean_cosine"], gates["gate_min_cosine"]
    failed = stats.mean < need_mean or stats.min < need_min
    why = (f"mean cosine {stats.mean:.5f} / min {stats.min:.5f} under {need_mean} / {need_min}"
           if failed else None)
    return {"mean_cosine": stats.mean, "min_cosine": stats.min}, why


def top1_quality(reference: np.ndarray, candidate: np.ndarray, gates: Mapping[str, float],
                 labels: np.ndarray | None = None) -> Judgement:
    """Classes (image classification): top-1 agreement with the reference, and the
    accuracy points lost where the evaluation set has labels."""
    stats = {"agreement": top1_agreement(reference, candidate)}
    why = []
    if stats["agreement"] < gates["gate_min_agreement"]:
        why.append(f"top-1 agreement {stats['agreement']:.4f} under {gates['gate_min_agreement']}")
    if labels is not None:
        stats["top1"] = top1_accuracy(candidate, labels)
        stats["top1_drop"] = top1_accuracy(reference, labels) - stats["top1"]
        if stats["top1_drop"] > gates["gate_max_top1_drop"]:
            why.append(f"top-1 {stats['top1_drop'] * 100:.2f} points under the reference, "
                       f"over {gates['gate_max_top1_drop'] * 100:g}")
    return stats, "; ".join(why) or None

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


def rankings(scores: np.ndarray, documents: int) -> np.ndarray:
    """Scores [n, 1] of consecutive groups of `documents` pairs as [groups, documents]."""
    flat = np.asarray(scores, dtype=np.float64).reshape(-1)
    if flat.size % documents:
        raise ValueError(f"{flat.size} scores are not groups of {documents} documents")
    return flat.reshape(-1, documents)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two score vectors (ranks by order; 1.0 for a
    constant pair, which has no order to disagree on)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = float(np.sqrt((ra ** 2).sum() * (rb ** 2).sum()))
    return 1.0 if denominator == 0 else float((ra * rb).sum() / denominator)


def rank_quality(reference: np.ndarray, candidate: np.ndarray, gates: Mapping[str, float],
                 documents: int | None = None) -> Judgement:
    """Rankings (rerankers): over each query's documents (consecutive groups of
    `documents`, or all as one), the mean Spearman correlation of the candidate's order
    with the reference's, the mean share of the reference's top 3 it keeps in its own,
    and the largest change of a score after the sigmoid; each against its gate."""
    from core.rollout import sigmoid

    size = documents or int(np.asarray(reference).size)
    ref, cand = rankings(reference, size), rankings(candidate, size)
    top = min(3, size)
    kept = [len(set(np.argsort(-r)[:top]) & set(np.argsort(-c)[:top])) / top
            for r, c in zip(ref, cand)]
    stats = {"rank_correlation": float(np.mean([spearman(r, c) for r, c in zip(ref, cand)])),
             "top3_overlap": float(np.mean(kept)),
             "max_score_error": float(np.abs(sigmoid(ref) - sigmoid(cand)).max()),
             "queries": int(ref.shape[0])}
    why = []
    if stats["rank_correlation"] < gates["gate_min_rank_correlation"]:
        why.append(f"rank correlation {stats['rank_correlation']:.4f} under "
                   f"{gates['gate_min_rank_correlation']}")
    if stats["top3_overlap"] < gates["gate_min_top3_overlap"]:
        why.append(f"top-3 kept {stats['top3_overlap']:.3f} under "
                   f"{gates['gate_min_top3_overlap']}")
    if stats["max_score_error"] > gates["gate_max_score_error"]:
        why.append(f"a score changed by {stats['max_score_error']:.4f}, over "
                   f"{gates['gate_max_score_error']}")
    return stats, "; ".join(why) or None


def gate_floats(gate: Mapping[str, str]) -> dict[str, float]:
    """A format's gate parameters as numbers, without the speed gates (measured apart)."""
    return {k: float(v) for k, v in gate.items()
            if k not in ("gate_min_throughput_ratio", "gate_max_p99_ratio")}

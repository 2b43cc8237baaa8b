"""Figures of a classifier's logits: top-1 accuracy and agreement, disagreements, top-5."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.images import top_k


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose arg-max is the label."""
    if len(logits) != len(labels) or len(labels) == 0:
        raise ValueError(f"{len(logits)} rows of logits for {len(labels)} labels")
    return float(np.mean(np.argmax(logits, axis=1) == labels))


def top1_agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows where both predict the same class."""
    if reference.shape != candidate.shape or len(reference) == 0:
        raise ValueError(f"shape mismatch: {reference.shape} vs {candidate.shape}")
    return float(np.mean(reference.argmax(axis=1) == candidate.argmax(axis=1)))


def top1_in_top5(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of rows where the candidate's top-1 is among the reference's top-5."""
    top5 = np.argsort(-reference, axis=1, kind="stable")[:, :5]
    return float(np.mean(np.any(top5 == candidate.argmax(axis=1)[:, None], axis=1)))


def disagreements(names: Sequence[str], reference: np.ndarray, candidate: np.ndarray,
                  labels: Sequence[str]) -> list[dict[str, str]]:  # fmt: skip
    """The rows whose top-1 differ, with both labels."""
    ref, cand = reference.argmax(axis=1), candidate.argmax(axis=1)
    return [{"image": names[i], "fp32": labels[ref[i]], "int8": labels[cand[i]]}
            for i in np.flatnonzero(ref != cand)]  # fmt: skip


def top5_table(logits: np.ndarray, labels: Sequence[str]) -> list[list[Any]]:
    """[[class id, label, probability rounded to 4 places], ...] best first, for one row."""
    ids, names, probs = top_k(logits, 5, labels)
    return [[int(i), str(n), round(float(p), 4)] for i, n, p in zip(ids, names, probs)]


def sanity_report(names: Sequence[str], logits: dict[str, np.ndarray], labels: Sequence[str],
                  expected: dict[str, tuple[int, ...]]) -> dict[str, Any]:  # fmt: skip
    """Per photo: expected ids, and per runtime its top-5 and whether top-1 is expected."""
    report: dict[str, Any] = {}
    for row, name in enumerate(names):
        entry: dict[str, Any] = {"expected": [labels[i] for i in expected[name]]}
        for runtime, values in logits.items():
            table = top5_table(values[row], labels)
            entry[f"{runtime}_top5"] = table
            if expected[name]:
                entry[f"{runtime}_top1_expected"] = table[0][0] in expected[name]
        report[name] = entry
    return report

"""Numerical comparison of embeddings: parity (max abs diff) and fidelity (row cosines)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from export.errors import ExportCheckError


def _same_shape(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    return a, b


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest elementwise |a - b| (0.0 for empty arrays)."""
    a, b = _same_shape(a, b)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of a with the same row of b, shape [N]."""
    a, b = _same_shape(a, b)
    if a.ndim != 2:
        raise ValueError(f"expected 2-D arrays, got {a.ndim}-D")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    if np.any(norms == 0):
        raise ValueError("cosine of a zero row is undefined")
    return np.sum(a * b, axis=1) / norms


@dataclass(frozen=True)
class FidelityStats:
    """Summary of row cosines between a reference and a candidate."""

    mean: float
    min: float
    p01: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def fidelity(reference: np.ndarray, candidate: np.ndarray) -> FidelityStats:
    """Mean, minimum and 1st percentile of row cosines, over n rows."""
    cosines = cosine_rows(reference, candidate)
    if cosines.size == 0:
        raise ValueError("fidelity needs at least one row")
    return FidelityStats(
        mean=float(np.mean(cosines)),
        min=float(np.min(cosines)),
        p01=float(np.percentile(cosines, 1)),
        n=int(cosines.size),
    )


def check_max_abs_diff(name: str, diff: float, threshold: float) -> None:
    """Raise ExportCheckError unless diff <= threshold."""
    if not diff <= threshold:  # also catches NaN
        raise ExportCheckError(f"{name} max abs diff", f"{diff:.3e}", f"<= {threshold:.0e}")


def check_fidelity(name: str, stats: FidelityStats, min_mean: float, min_min: float) -> None:
    """Raise ExportCheckError unless mean cosine >= min_mean and minimum cosine >= min_min."""
    if not stats.mean >= min_mean:
        raise ExportCheckError(
            f"{name} mean cosine", f"{stats.mean:.5f}", f">= {min_mean}", f"n={stats.n}"
        )
    if not stats.min >= min_min:
        raise ExportCheckError(
            f"{name} min cosine", f"{stats.min:.5f}", f">= {min_min}", f"n={stats.n}"
        )

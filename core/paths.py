"""Where things are: the checkout, the shipped repository, perf results; and the one
latency objective every benchmark and planning command judges against."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
RESULTS_DIR = PROJECT_ROOT / "perf" / "results"  # git-ignored; one folder per run
# The serving objective: a request's p99 at most this. Goodput, the knee of a sweep and
# `tmr perf plan|capacity` all count against it.
P99_OBJECTIVE_MS = 60.0


def results_dir(kind: str, stamp: str) -> Path:
    """perf/results/<kind>-<stamp>/ (not created)."""
    return RESULTS_DIR / f"{kind}-{stamp}"

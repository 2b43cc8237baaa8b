"""Median wall time of a runner, for the speed figures an export reports beside fidelity."""

from __future__ import annotations

import statistics
import time

import numpy as np

from runtime.runners import Runner


def median_ms(run: Runner, feeds: dict[str, np.ndarray], runs: int = 10, warmup: int = 2) -> float:
    """Median wall time (ms) of `run(feeds)` over `runs` calls, after `warmup` calls."""
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(feeds)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)

"""A front model's side of a rollout (core/rollout.py): the sticky split, the shadowed
calls, and the figures the controller judges, as Prometheus counters.

The router (python_backends/front.py) hands every primary-encoder call of a batch here
while its primary encoder has a rollout running. Rows whose key (the row's own cache
key: its text or image digest, or the request's `rollout_key` parameter) falls in the
canary share go to the candidate version; a candidate call that fails is counted and
its rows go to the stable version, so the client never sees it. At level 0 a share of
the stable calls is shadowed: the same inputs also go to the candidate, in random order
(neither side always runs on warm caches), both are timed, and each row's agreement is
counted; the answer stays the stable version's. Nothing here decides anything: the
controller (server/rollout.py) reads the counters and edits the repository.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.rollout import (
    LATENCY_BUCKETS_S,
    ROLE_CANDIDATE,
    ROLE_STABLE,
    ROLLED_BACK,
    RolloutState,
    to_candidate,
)
from python_backends.metrics import Counter, CounterFamily, Gauge, Histogram
from runtime.errors import ChildModelError

Call = Callable[[int], np.ndarray]  # an encoder call pinned to a version
Agreement = Callable[[np.ndarray, np.ndarray], np.ndarray]  # per-row score of two outputs


def latency_buckets(name: str, labels: dict[str, str]) -> Histogram:
    """Encoder call latency in the rollout's buckets (core.rollout.LATENCY_BUCKETS_S)."""
    return Histogram(name, "Seconds of encoder calls", labels, LATENCY_BUCKETS_S)


@dataclass
class Side:
    """One version's counters in one role and path (served or shadowed)."""

    calls: Counter
    errors: Counter
    rows: Counter
    latency: Histogram


class RolloutMetrics:
    """The counters and gauges of one front model's rollouts of one encoder."""

    PREFIX = "tmr_rollout"

    def __init__(self, front: str, encoder: str) -> None:
        self.base = {"model": front, "encoder": encoder}
        self.sides: dict[tuple[str, str, str], Side] = {}
        self.agreement: dict[str, tuple[Counter, Counter, Counter]] = {}
        self.share = Gauge(f"{self.PREFIX}_canary_share", "Share of rows the candidate answers",
                           self.base)
        self.shadow_share = Gauge(f"{self.PREFIX}_shadow_share",
                                  "Share of primary calls shadowed to the candidate", self.base)
        self.step = Gauge(f"{self.PREFIX}_step", "Step of the running rollout (-1: none)",
                          self.base)
        self.step.set(-1)
        self.rollbacks = CounterFamily(f"{self.PREFIX}_rollbacks_total",
                                       "Rollouts that ended rolled back, seen by this front",
                                       self.base)
        self.rollbacks.inc(0, version="none")  # so increase() exists before the first one

    def side(self, version: int, role: str, path: str) -> Side:
        key = (str(version), role, path)
        side = self.sides.get(key)
        if side is None:
            labels = {**self.base, "version": key[0], "role": role, "path": path}
            side = Side(Counter(f"{self.PREFIX}_calls_total", "Encoder calls", labels),
                        Counter(f"{self.PREFIX}_call_errors_total", "Failed encoder calls",
                                labels),
                        Counter(f"{self.PREFIX}_rows_total", "Rows sent to the encoder", labels),
                        latency_buckets(f"{self.PREFIX}_call_seconds", labels))
            self.sides[key] = side
        return side

    def agreed(self, version: int, scores: np.ndarray, min_agreement: float | None) -> None:
        pair = self.agreement.get(str(version))
        if pair is None:
            labels = {**self.base, "version": str(version)}
            pair = (Counter(f"{self.PREFIX}_disagreement_sum",
                            "Sum of shadowed rows' 1 - agreement with the served version",
                            labels),
                    Counter(f"{self.PREFIX}_agreement_below_total",
                            "Shadowed rows under the minimum agreement (gate_min_cosine)",
                            labels),
                    Counter(f"{self.PREFIX}_agreement_rows_total",
                            "Shadowed rows compared with the served version", labels))
            self.agreement[str(version)] = pair
        # The disagreement (1 - agreement), not the agreement, is summed: a scrape between
        # the two counters' updates (a step's baseline, or its end) then shifts the mean by
        # one call's disagreement, about 0 for a faithful candidate, where a summed
        # agreement shifted it by a whole call (a copy of the served version judged at
        # 69/70 = 0.98571, under gate_mean_cosine).
        pair[2].inc(float(scores.size))
        pair[0].inc(float(np.clip(1.0 - scores, 0.0, None).sum()))  # a cosine may pass 1
        if min_agreement is not None:
            pair[1].inc(float((scores < min_agreement).sum()))

    def show(self, state: RolloutState | None) -> None:
        self.share.set(state.current.canary if state else 0.0)
        self.shadow_share.set(state.current.shadow if state else 0.0)
        self.step.set(state.step if state else -1)


class RolloutTraffic:
    """Splits, shadows and measures the primary encoder's calls during a rollout."""

    def __init__(self, front: str, encoder: str, agreement: Agreement,
                 min_agreement: float | None, rng: random.Random | None = None) -> None:
        self.metrics = RolloutMetrics(front, encoder)
        self.agreement, self.min_agreement = agreement, min_agreement
        self.rng = rng or random.Random()
        self.state: RolloutState | None = None
        self.last_seen: str | None = None  # the last outcome's id, once read

    def observe(self, state: RolloutState | None, last: dict | None) -> None:
        """The state on disk (read off the request path); counts a new rollback."""
        self.state = state
        self.metrics.show(state)
        outcome_id = (last or {}).get("id")
        if self.last_seen is not None and outcome_id and outcome_id != self.last_seen \
                and last.get("outcome") == ROLLED_BACK:
            self.metrics.rollbacks.inc(version=str(last.get("version")))
        self.last_seen = outcome_id or self.last_seen or ""

    def split(self, state: RolloutState, keys: Sequence[str]) -> list[bool]:
        """Which rows the candidate answers at the state's step. The router reads
        `self.state` once per batch and passes it to every call (the background reader
        may replace it meanwhile)."""
        return to_candidate(keys, state.current.canary, str(state.version))

    def timed(self, call: Call, version: int, role: str, path: str, rows: int
              ) -> np.ndarray:
        side = self.metrics.side(version, role, path)
        side.calls.inc()
        side.rows.inc(rows)
        began = time.perf_counter()
        try:
            out = call(version)
        except ChildModelError:
            side.errors.inc()
            raise
        side.latency.observe(time.perf_counter() - began)
        return out

    def answer(self, state: RolloutState, call: Call, rows: int) -> np.ndarray | None:
        """The candidate's answer for canary rows, or None when it failed (counted)."""
        try:
            return self.timed(call, state.version, ROLE_CANDIDATE, "served", rows)
        except ChildModelError:
            return None

    def stable(self, state: RolloutState, call: Call, rows: int, may_shadow: bool
               ) -> np.ndarray:
        """The stable version's answer; a share of the calls shadowed to the candidate."""
        if not may_shadow or self.rng.random() >= state.current.shadow:
            return self.timed(call, state.stable, ROLE_STABLE, "served", rows)
        candidate_first = self.rng.random() < 0.5
        shadow = None
        if candidate_first:
            shadow = self._shadow(call, state.version, rows)
        # A BLS output may live in shared memory the next call reuses: copy before it.
        out = self.timed(call, state.stable, ROLE_STABLE, "paired", rows).copy()
        if not candidate_first:
            shadow = self._shadow(call, state.version, rows)
        if shadow is not None:
            scores = self.agreement(out, shadow)
            self.metrics.agreed(state.version, scores, self.min_agreement)
        return out

    def _shadow(self, call: Call, version: int, rows: int) -> np.ndarray | None:
        try:
            return self.timed(call, version, ROLE_CANDIDATE, "shadow", rows).copy()
        except ChildModelError:
            return None


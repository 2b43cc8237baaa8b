"""A rollout's plan and the verdict on each of its steps (pure; no server calls).

The plan: `--steps` ("shadow:25,canary:1,...") parsed into the steps a RolloutState
(core/rollout.py) carries. The verdict: the controller (server/rollout.py) sums the
front models' `tmr_rollout_*` counters into a Window (window_from, minus since the step
began) and `judge` decides to advance, recheck, wait or roll back, on the thresholds of
the candidate's gate parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.rollout import ROLE_CANDIDATE, ROLE_STABLE, RolloutError, RolloutState, Step

# -- the plan --------------------------------------------------------------------------
DEFAULT_STEPS = "shadow:25,canary:1,canary:10,canary:50"  # then promotion
DEFAULT_CANARY_SHADOW = 0.05  # the share of calls a canary step still shadows (agreement)


def parse_steps(text: str, canary_shadow: float) -> tuple[Step, ...]:
    """"shadow:25,canary:1,canary:10,canary:50" (percent) as steps; canary steps shadow
    `canary_shadow` (0..1) of the calls. Shares of a canary must grow; promotion follows
    the last step."""
    steps: list[Step] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, share = part.partition(":")
        try:
            percent = float(share)
        except ValueError:
            raise RolloutError(f"step {part!r}: expected NAME:PERCENT, e.g. canary:10") from None
        if not 0 < percent < 100 or not math.isfinite(percent):
            raise RolloutError(f"step {part!r}: the percent must be in (0, 100); promotion "
                               "(100%) follows the last step")
        if name == "shadow":
            steps.append(Step("shadow", 0.0, percent / 100))
        elif name == "canary":
            if steps and percent / 100 <= steps[-1].canary:
                raise RolloutError(f"step {part!r}: canary shares must grow")
            steps.append(Step("canary", percent / 100, canary_shadow))
        else:
            raise RolloutError(f"step {part!r}: a step is shadow:PERCENT or canary:PERCENT")
    if not steps:
        raise RolloutError("a rollout needs at least one step before promotion")
    if not any(s.shadow > 0 for s in steps):
        raise RolloutError("no step shadows any call: agreement and latency could not be judged")
    return tuple(steps)


# -- judging a step -----------------------------------------------------------------------
def percentile(buckets: Mapping[float, float], q: float) -> float | None:
    """The q-quantile of cumulative bucket counts {upper bound: count <= it} (Prometheus
    `le` buckets), as the bucket's upper bound; None without samples."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    for upper in bounds:
        if buckets[upper] >= q * total:
            return upper
    return bounds[-1]


@dataclass(frozen=True)
class Thresholds:
    """What a step must hold, from the candidate's gate parameters (the offline gate's)."""

    mean_agreement: float  # gate_mean_cosine (text) or gate_min_agreement (images)
    min_agreement: float | None  # gate_min_cosine: every shadowed row; None: not judged
    max_p99_ratio: float  # gate_max_p99_ratio


@dataclass
class Window:
    """What the front models measured for one step (deltas of their counters)."""

    candidate_calls: float = 0.0  # answered (canary) or shadowed
    candidate_errors: float = 0.0
    candidate_rows: float = 0.0  # answered or shadowed
    shadow_rows: float = 0.0  # rows shadowed
    agreement_rows: float = 0.0  # rows compared (a shadow call in flight is not yet)
    disagreement_sum: float = 0.0  # sum of the compared rows' 1 - agreement
    below_min_rows: float = 0.0
    paired_calls: float = 0.0
    # latency buckets ({le: calls}) of each side: the shadow step compares the paired
    # calls (the same inputs, one after the other), a canary step the calls each version
    # answered (both under the same load; the candidate's shadow calls would queue behind
    # its canary calls and bias a paired comparison)
    stable_paired: dict[float, float] = field(default_factory=dict)
    candidate_shadow: dict[float, float] = field(default_factory=dict)
    stable_served: dict[float, float] = field(default_factory=dict)
    candidate_served: dict[float, float] = field(default_factory=dict)

    def latency(self, canary: bool) -> tuple[dict[float, float], dict[float, float]]:
        """(stable, candidate) latency buckets a step of this kind compares."""
        if canary:
            return self.stable_served, self.candidate_served
        return self.stable_paired, self.candidate_shadow

    def figures(self, canary: bool = False) -> dict[str, float | None]:
        """The step's figures, as logged with every decision. Both sides' tails are read
        at the same quantile: p99, or lower while the smaller side has under 100 calls
        (1 - 1/n: the max of a small sample against the p99 of a large one would judge
        a canary of 1% by its single slowest call)."""
        stable, candidate = self.latency(canary)
        calls = min(max(stable.values(), default=0.0), max(candidate.values(), default=0.0))
        q = min(0.99, 1 - 1 / calls) if calls > 1 else 0.99
        stable_p99, candidate_p99 = percentile(stable, q), percentile(candidate, q)
        return {
            "candidate_calls": self.candidate_calls,
            "candidate_rows": self.candidate_rows,
            "error_rate": self.candidate_errors / self.candidate_calls
            if self.candidate_calls else 0.0,
            "shadow_rows": self.shadow_rows,
            "mean_agreement": 1.0 - self.disagreement_sum / self.agreement_rows
            if self.agreement_rows else None,
            "below_min_rows": self.below_min_rows,
            "paired_calls": self.paired_calls,
            "latency_calls": calls,
            "latency_quantile": q,
            "stable_p99_ms": None if stable_p99 is None else stable_p99 * 1000,
            "candidate_p99_ms": None if candidate_p99 is None else candidate_p99 * 1000,
            "p99_ratio": candidate_p99 / stable_p99 if stable_p99 and candidate_p99 else None,
        }


class Action(StrEnum):
    """What the controller does after looking at a step."""

    ADVANCE = "advance"  # the step passed: take the next one (or promote after the last)
    ROLLBACK = "rollback"  # a breach, or a step left unjudged past its timeout
    RECHECK = "recheck"  # a first latency breach: measure the step again from zero
    WAIT = "wait"  # not enough evidence yet, or paused


@dataclass(frozen=True)
class Verdict:
    """The controller's decision on a step, why, and the figures it judged."""

    action: Action
    reason: str
    figures: dict[str, float | None]


def judge(state: RolloutState, window: Window, thresholds: Thresholds,
          elapsed_s: float, rechecking: bool = False) -> Verdict:
    """The verdict on the current step. A breach rolls back at once: any candidate error
    rate over the limit, any shadowed row under the minimum agreement; the mean agreement
    once `min_pairs` shadowed calls give it meaning, the p99 ratio once the step has
    lasted `min_seconds` and each side has `min_pairs` timed calls (Window.latency says
    which). A latency breach is confirmed
    before it rolls back: the first one asks for a "recheck" (the controller measures the
    step again from zero, `rechecking`), so one stall of a shared host is not a verdict
    while a slow candidate breaches twice. A step passes
    when it has lasted `min_seconds`, seen `min_requests` candidate rows and (when it
    shadows) `min_pairs` paired calls; paused, it holds; past `step_timeout_s` unjudged,
    it rolls back: an unjudged candidate never takes more traffic."""
    canary = state.current.canary > 0
    f = window.figures(canary)
    if window.candidate_errors and f["error_rate"] > state.max_error_rate:
        return Verdict(Action.ROLLBACK, f"candidate error rate {f['error_rate']:.1%} over "
                       f"{state.max_error_rate:.1%} ({window.candidate_errors:.0f} of "
                       f"{window.candidate_calls:.0f} calls)", f)
    if thresholds.min_agreement is not None and window.below_min_rows:
        return Verdict(Action.ROLLBACK, f"{window.below_min_rows:.0f} shadowed rows agree under "
                       f"{thresholds.min_agreement:g} with the served version", f)
    enough_pairs = window.paired_calls >= state.min_pairs
    if enough_pairs and f["mean_agreement"] is not None \
            and f["mean_agreement"] < thresholds.mean_agreement:
        return Verdict(Action.ROLLBACK, f"mean agreement {f['mean_agreement']:.5f} under "
                       f"{thresholds.mean_agreement:g}", f)
    limit = state.max_p99_ratio or thresholds.max_p99_ratio
    if elapsed_s >= state.min_seconds and f["latency_calls"] >= state.min_pairs \
            and f["p99_ratio"] is not None and f["p99_ratio"] > limit:
        on = "the calls each answered" if canary else "the same inputs"
        return Verdict(Action.ROLLBACK if rechecking else Action.RECHECK,
                       f"p99 {f['candidate_p99_ms']:.1f} ms is "
                       f"{f['p99_ratio']:.2f}x the served version's {f['stable_p99_ms']:.1f} "
                       f"ms on {on} (limit {limit:g}x)", f)
    judged = (elapsed_s >= state.min_seconds and window.candidate_rows >= state.min_requests
              and (enough_pairs or state.current.shadow == 0))
    if judged and not state.paused:
        return Verdict(Action.ADVANCE, f"{state.current.describe()} passed", f)
    if elapsed_s > state.step_timeout_s and not state.paused:
        return Verdict(Action.ROLLBACK, f"{state.current.describe()} not judged within "
                       f"{state.step_timeout_s:g} s ({window.candidate_rows:.0f} candidate rows, "
                       f"{window.paired_calls:.0f} paired calls)", f)
    return Verdict(Action.WAIT, "paused" if state.paused else "collecting", f)


def thresholds(gate: Mapping[str, str], mean_key: str, min_key: str | None) -> Thresholds:
    """A step's thresholds from an encoder's gate parameters and its family's keys."""
    try:
        return Thresholds(float(gate[mean_key]),
                          float(gate[min_key]) if min_key else None,
                          float(gate.get("gate_max_p99_ratio", "1.5")))
    except (KeyError, ValueError) as err:
        raise RolloutError(f"the candidate's gate parameters cannot judge a rollout: "
                           f"{err}") from err


# -- the window, from the front models' counters ----------------------------------------------
COUNTER_FIELDS = {  # Window field -> (metric, role, path): summed over fronts and instances
    "candidate_calls": ("tmr_rollout_calls_total", ROLE_CANDIDATE, None),
    "candidate_errors": ("tmr_rollout_call_errors_total", ROLE_CANDIDATE, None),
    "candidate_rows": ("tmr_rollout_rows_total", ROLE_CANDIDATE, None),
    "shadow_rows": ("tmr_rollout_rows_total", ROLE_CANDIDATE, "shadow"),
    "paired_calls": ("tmr_rollout_calls_total", ROLE_STABLE, "paired"),
}


def window_from(samples: Sequence[Any], encoder: str, state: RolloutState) -> Window:
    """The rollout's totals in Prometheus samples (prometheus_client's parser: `name`,
    `labels`, `value`) of one or more servers."""
    window = Window()
    candidate, stable = str(state.version), str(state.stable)
    for s in samples:
        labels = s.labels
        if labels.get("encoder") != encoder:
            continue
        name = s.name
        version, role, path = labels.get("version"), labels.get("role"), labels.get("path")
        for attr, (metric, want_role, want_path) in COUNTER_FIELDS.items():
            if name in (metric, metric.removesuffix("_total")) and role == want_role \
                    and (want_path is None or path == want_path) \
                    and version == (candidate if role == ROLE_CANDIDATE else stable):
                setattr(window, attr, getattr(window, attr) + s.value)
        if version == candidate and name in ("tmr_rollout_disagreement_sum",
                                             "tmr_rollout_disagreement_sum_total"):
            window.disagreement_sum += s.value
        if version == candidate and name.startswith("tmr_rollout_agreement_below"):
            window.below_min_rows += s.value
        if version == candidate and name.startswith("tmr_rollout_agreement_rows"):
            window.agreement_rows += s.value
        if name.startswith("tmr_rollout_call_seconds_bucket") and "le" in labels:
            le = float(labels["le"])
            side = {(ROLE_STABLE, "paired", stable): window.stable_paired,
                    (ROLE_CANDIDATE, "shadow", candidate): window.candidate_shadow,
                    (ROLE_STABLE, "served", stable): window.stable_served,
                    (ROLE_CANDIDATE, "served", candidate): window.candidate_served,
                    }.get((role, path, version))
            if side is not None:
                side[le] = side.get(le, 0.0) + s.value
    return window


def minus(now: Window, base: Window) -> Window | None:
    """The counts since `base`; None when any count went down (a server restarted, its
    counters from zero): the step's window starts again."""
    delta = Window()
    for attr in ("candidate_calls", "candidate_errors", "candidate_rows", "shadow_rows",
                 "agreement_rows", "disagreement_sum", "below_min_rows", "paired_calls"):
        value = getattr(now, attr) - getattr(base, attr)
        if value < -1e-9:
            return None
        setattr(delta, attr, value)
    for attr in ("stable_paired", "candidate_shadow", "stable_served", "candidate_served"):
        old, new = getattr(base, attr), getattr(now, attr)
        if any(new.get(k, 0.0) < v - 1e-9 for k, v in old.items()):
            return None
        setattr(delta, attr, {k: v - old.get(k, 0.0) for k, v in new.items()})
    return delta

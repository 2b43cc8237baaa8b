"""Progressive delivery of an encoder version: its state in the repository, the sticky
split and the measures the front models take (pure; no server calls). The plan's parsing
and the verdict on a step are the controller's (server/rollout_judge.py).

A rollout takes a candidate version of a front's primary encoder through steps, each
judged live on what the front models measure (python_backends/rollout_traffic.py):

    shadow        a share of the primary's calls is also sent to the candidate (the answer
                  stays the served version's): agreement and paired latency
    canary N%     the candidate answers N% of the rows (a sticky hash of each row's key),
                  and a share of the calls is still shadowed, so every step is judged on
                  the same paired figures
    promotion     the candidate takes all traffic (`tmr promote`'s edit)

The state lives in the encoder's config.pbtxt, as its version policy does: the policy
selects both versions (Triton loads both) and the `rollout` parameter holds this state
as JSON. The routers read it from disk (every second, off the request path) and the
controller (server/rollout.py: with_state) advances it. An edit of the repository is
therefore what rolls back (the policy back to the stable version, the parameter gone),
and a server restarted mid-rollout resumes at the step on disk. `rollout_last` keeps the
outcome of the last rollout (promoted, rolled back, aborted) for the dashboards.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from core.errors import CoreError
from core.model_config import mc

STATE_PARAMETER = "rollout"  # the running rollout (JSON), in the encoder's config
LAST_PARAMETER = "rollout_last"  # how the last one ended (JSON)
ROLE_STABLE, ROLE_CANDIDATE = "stable", "candidate"
PROMOTED, ROLLED_BACK, ABORTED = "promoted", "rolled_back", "aborted"


class RolloutError(CoreError, ValueError):
    """A rollout request refused before anything changes."""


@dataclass(frozen=True)
class Step:
    """One step: the share of rows the candidate answers and the share of calls shadowed."""

    name: str  # "shadow" or "canary"
    canary: float = 0.0  # 0..1
    shadow: float = 0.0  # 0..1

    def describe(self) -> str:
        if self.canary == 0:
            return f"shadow {self.shadow:.0%}"
        return f"canary {self.canary:.0%} (shadow {self.shadow:.0%})"


@dataclass(frozen=True)
class RolloutState:
    """A running rollout, as the `rollout` parameter holds it."""

    version: int  # the candidate
    stable: int  # the version served before it, which answers every other row
    steps: tuple[Step, ...]
    step: int = 0  # index into steps
    paused: bool = False
    min_requests: int = 200  # candidate rows (answered or shadowed) a step needs
    min_seconds: float = 60.0  # ... and its minimum duration
    min_pairs: int = 100  # shadowed calls before agreement and p99 may pass or fail a step
    max_error_rate: float = 0.01  # failed candidate calls / calls
    step_timeout_s: float = 900.0  # a step not judged by then rolls back
    max_p99_ratio: float | None = None  # an operator's limit instead of gate_max_p99_ratio
    id: str = ""  # when it started (UTC, ISO 8601): names it in logs and metrics

    @property
    def current(self) -> Step:
        return self.steps[self.step]

    @property
    def last_step(self) -> bool:
        return self.step == len(self.steps) - 1

    def advanced(self) -> RolloutState:
        return replace(self, step=self.step + 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RolloutState:
        data = json.loads(text)
        data["steps"] = tuple(Step(**s) for s in data["steps"])
        return cls(**data)


def state_of(config: mc.ModelConfig) -> RolloutState | None:
    """The running rollout of an encoder's config, or None; a state that does not parse is
    refused (RolloutError): never guess at which version takes traffic."""
    raw = config.parameters[STATE_PARAMETER].string_value \
        if STATE_PARAMETER in config.parameters else ""
    if not raw:
        return None
    try:
        return RolloutState.from_json(raw)
    except (ValueError, TypeError, KeyError) as err:
        raise RolloutError(f"{config.name}: unreadable `{STATE_PARAMETER}` parameter: "
                           f"{err}") from err


def last_of(config: mc.ModelConfig) -> dict[str, Any] | None:
    """How the encoder's last rollout ended ({id, version, outcome, reason, at}), or None."""
    raw = config.parameters[LAST_PARAMETER].string_value \
        if LAST_PARAMETER in config.parameters else ""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


# -- the sticky split ----------------------------------------------------------------------
def bucket(key: str, salt: str) -> float:
    """A key's place in [0, 1): the same key, salt and share always fall on the same side,
    on every instance and replica, and a growing share keeps the rows it had."""
    digest = hashlib.blake2b(f"{salt}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def to_candidate(keys: Sequence[str], share: float, salt: str) -> list[bool]:
    """Which rows the candidate answers at `share`."""
    if share <= 0:
        return [False] * len(keys)
    return [bucket(k, salt) < share for k in keys]


# -- what the front models measure ----------------------------------------------------------
LATENCY_BUCKETS_S = tuple(round(0.0005 * 1.15 ** k, 6) for k in range(72))  # 0.5 ms .. 10 s


# -- agreement of two outputs, per family (core/families: Family.rollout) ------------------
def row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's cosine between two embedding batches (text agreement)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, 1e-12)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow warnings for large logits (float64)."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def score_agreement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 minus each pair's change of score after the sigmoid, from two logit batches
    [n, 1] (a reranker's agreement: 1 is the same score, 0 the opposite end)."""
    return 1.0 - np.abs(sigmoid(a) - sigmoid(b)).reshape(len(a), -1).max(axis=1)


def top1_agreement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 where two logit batches pick the same class, else 0 (image agreement)."""
    return (a.argmax(axis=1) == b.argmax(axis=1)).astype(np.float64)

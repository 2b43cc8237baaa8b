"""The degradation ladder of `embed` and the policy that climbs it (pure; no Triton imports).

Levels, in the seeds' order (smaller batches, a cheaper model on the CPU, cached answers,
rejecting low priority, then 503):

    0 normal          primary encoder (minilm_onnx), whole dynamic batch per call
    1 small_batches   primary encoder, at most `small_batch_rows` rows per call
    2 fallback_model  the CPU INT8 encoder (minilm_int8)
    3 cached_answers  requests whose texts are all in the router's cache are answered from
                      it; the rest go to the fallback encoder
    4 shed_low        as 3, and low-priority requests get UNAVAILABLE
    5 unavailable     every request gets UNAVAILABLE (an operator's decision only)

Signals: an EWMA of the batch's encoder time against `latency_budget_ms`, an EWMA of how
full the dynamic batches arrive (the queue-wait proxy: a Python model cannot see Triton's
queue, but a batch that arrives full means requests were waiting), encoder failures (by
reason), and memory (GPU through NVML, else process RSS) against `memory_limit_mb`.
Hysteresis: a level is held for at least `min_dwell_s`; it rises one step when a signal
is over its "up" threshold and falls one step only when every signal is under its "down"
threshold. The signals stop at level 4, so high priority is always
served by something. An operator can force any level (`forced_level`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from python_backends.params import parameter, positive_int


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: which encoder, how many rows a call, what is refused."""

    number: int
    name: str
    encoder: str | None  # "primary", "fallback" or None (no model call)
    max_rows: int | None = None
    use_cache: bool = False
    shed_low: bool = False


def ladder(small_batch_rows: int) -> tuple[Level, ...]:
    return (
        Level(0, "normal", "primary"),
        Level(1, "small_batches", "primary", max_rows=small_batch_rows),
        Level(2, "fallback_model", "fallback"),
        Level(3, "cached_answers", "fallback", use_cache=True),
        Level(4, "shed_low", "fallback", use_cache=True, shed_low=True),
        Level(5, "unavailable", None, use_cache=True, shed_low=True),
    )


TOP_LEVEL = 5


@dataclass(frozen=True)
class PolicySettings:
    """Thresholds of the policy, read from embed's config parameters."""

    latency_budget_ms: float = 250.0
    up_ratio: float = 1.0  # EWMA above budget * up_ratio: go up
    down_ratio: float = 0.5  # EWMA below budget * down_ratio (and no failures): go down
    ewma_alpha: float = 0.3
    min_dwell_s: float = 5.0
    failures_to_degrade: int = 3  # consecutive encoder failures
    memory_limit_mb: float = 4096.0
    small_batch_rows: int = 8
    full_batch_ratio: float = 0.9  # EWMA of batch fill above this: requests are queueing
    forced_level: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PolicySettings:
        def number(key: str, default: float) -> float:
            return parameter(config, key, default, float)

        forced = parameter(config, "forced_level", -1, int)
        if forced > TOP_LEVEL:
            raise ValueError(f"forced_level {forced} is above the top level {TOP_LEVEL}")
        return cls(
            latency_budget_ms=number("latency_budget_ms", cls.latency_budget_ms),
            up_ratio=number("degrade_up_ratio", cls.up_ratio),
            down_ratio=number("degrade_down_ratio", cls.down_ratio),
            ewma_alpha=number("latency_ewma_alpha", cls.ewma_alpha),
            min_dwell_s=number("min_dwell_s", cls.min_dwell_s),
            failures_to_degrade=parameter(config, "failures_to_degrade",
                                          cls.failures_to_degrade, positive_int),
            memory_limit_mb=number("memory_limit_mb", cls.memory_limit_mb),
            small_batch_rows=parameter(config, "small_batch_rows", cls.small_batch_rows,
                                       positive_int),
            full_batch_ratio=number("full_batch_ratio", cls.full_batch_ratio),
            forced_level=None if forced < 0 else forced,
        )


@dataclass
class Transition:
    """A level change and why it happened."""

    old: int
    new: int
    reason: str


@dataclass
class DegradationPolicy:
    """Per-instance state of the ladder; feed it observations, ask it for the level."""

    settings: PolicySettings
    level: int = 0
    since: float = 0.0
    ewma_ms: float | None = None
    consecutive_failures: int = 0
    memory_mb: float = 0.0
    fill: float = 0.0  # EWMA of rows / max_batch_size of the arriving dynamic batches
    history: list[Transition] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.settings.forced_level is not None:
            self.level = self.settings.forced_level

    def observe_latency(self, ms: float) -> None:
        alpha = self.settings.ewma_alpha
        self.ewma_ms = ms if self.ewma_ms is None else alpha * ms + (1 - alpha) * self.ewma_ms
        self.consecutive_failures = 0

    def observe_batch(self, rows: int, max_rows: int) -> None:
        alpha = self.settings.ewma_alpha
        self.fill = alpha * min(rows / max_rows, 1.0) + (1 - alpha) * self.fill

    def observe_failure(self) -> None:
        self.consecutive_failures += 1

    def observe_memory(self, mb: float) -> None:
        self.memory_mb = mb

    def pressure(self) -> str | None:
        """Why the level should go up now, or None."""
        s = self.settings
        if self.consecutive_failures >= s.failures_to_degrade:
            return f"{self.consecutive_failures} consecutive encoder failures"
        if self.memory_mb > s.memory_limit_mb:
            return f"memory {self.memory_mb:.0f} MB over {s.memory_limit_mb:.0f} MB"
        if self.ewma_ms is not None and self.ewma_ms > s.latency_budget_ms * s.up_ratio:
            return f"latency EWMA {self.ewma_ms:.0f} ms over budget {s.latency_budget_ms:.0f} ms"
        if self.fill > s.full_batch_ratio:
            return f"batches arrive {self.fill:.0%} full: requests are queueing"
        return None

    def relaxed(self) -> bool:
        """Every signal is under its 'down' threshold."""
        s = self.settings
        return (self.consecutive_failures == 0
                and self.memory_mb < 0.9 * s.memory_limit_mb
                and self.fill < s.full_batch_ratio * s.down_ratio
                and (self.ewma_ms is None or self.ewma_ms < s.latency_budget_ms * s.down_ratio))

    def decide(self, now: float) -> Transition | None:
        """Move at most one step, respecting the dwell time; return the change, if any."""
        if self.settings.forced_level is not None:
            return None
        if now - self.since < self.settings.min_dwell_s:
            return None
        reason = self.pressure()
        if reason and self.level < TOP_LEVEL - 1:  # 5 (503) only by operator force
            return self._move(self.level + 1, reason, now)
        if not reason and self.level > 0 and self.relaxed():
            return self._move(self.level - 1, "signals under the down thresholds", now)
        return None

    def _move(self, new: int, reason: str, now: float) -> Transition:
        transition = Transition(self.level, new, reason)
        self.level, self.since = new, now
        self.ewma_ms = None  # measure the new level afresh
        self.consecutive_failures = 0
        self.history.append(transition)
        return transition

    def fail_over(self, reason: str, now: float) -> Transition | None:
        """The primary encoder is gone (unloaded, dead stub): jump to the fallback at once."""
        if self.settings.forced_level is not None or self.level >= 2:
            return None
        return self._move(2, reason, now)


def throttled(read: Callable[[], float], period_s: float,
              clock: Callable[[], float]) -> Callable[[], float]:
    """`read`, called at most once per `period_s` of `clock`; the last value in between.

    Reading memory costs a syscall (or an NVML call); once per batch it showed up as 7% of
    the router's samples under load (perf/profile.py), while memory moves slowly.
    """
    last: list[float] = []  # [time of the read, value]

    def sample() -> float:
        now = clock()
        if not last or now - last[0] >= period_s:
            last[:] = [now, read()]
        return last[1]

    return sample


class EmbeddingCache:
    """A small LRU of text -> (embedding, served_by), filled by successful calls."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[np.ndarray, str]] = OrderedDict()

    def get(self, text: str) -> tuple[np.ndarray, str] | None:
        item = self._items.get(text)
        if item is not None:
            self._items.move_to_end(text)
        return item

    def put(self, text: str, vector: np.ndarray, served_by: str) -> None:
        if self.capacity <= 0:
            return
        self._items[text] = (vector, served_by)
        self._items.move_to_end(text)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

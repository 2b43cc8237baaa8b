"""The degradation ladder of `embed` and the policy that climbs it (pure; no Triton imports).

Levels, in the seeds' order (smaller batches, a cheaper model on the CPU, cached answers,
then 503):

    0 normal          the primary encoder (FP32), whole dynamic batch per call
    1 small_batches   primary encoder, at most `small_batch_rows` rows per call
    2 fallback_model  the fallback encoder (INT8, on the CPU)
    3 cached_answers  requests whose texts are all in the router's cache are answered from
                      it; the rest go to the fallback encoder
    4 unavailable     every request gets UNAVAILABLE (an operator's decision only)

No level refuses low priority: Triton's own priority queues already serve level 1 first
and bound level 2 (docs/reliability.md measured what router shedding added on top:
nothing a client following Triton's documentation could use), and a Python model cannot
see a request's priority anyway.

Signals:
- queue: an average over the last few dynamic batches (`queue_ewma_alpha`) of the rows
  of a dynamic batch beyond its largest request, over the rows one execution takes when
  more are queued (the front's preferred batch, else `max_batch_size`).
  With no queue delay, every request of a batch was waiting when an instance freed up, so
  rows that came along with the first request are a queue the model can measure (a
  Python model cannot see Triton's); one large request (a bulk client's chunk) alone is
  not a queue;
- consecutive encoder failures (`failures_to_degrade`);
- memory (GPU through NVML, else process RSS) against `memory_limit_mb`.
Hysteresis: the level rises one step when a signal is over its threshold and the level
has been held `min_dwell_s`; it falls one step when every signal is under its "down"
threshold (`degrade_down_ratio` of it) and the level has been held `recover_dwell_s`.
Rising is slow and falling is fast: once the pressure is gone, full quality returns
within a few seconds, and a saw-tooth load moves the level at most once per rise dwell.
The signals stop at level 3, so every request is served by something; an operator can
force any level (`forced_level`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from core.served_by import ServedBy
from core.settings import TOP_LEVEL, LadderSettings


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: which encoder, how many rows a call, whether to use the cache."""

    number: int
    name: str
    encoder: str | None  # "primary", "fallback" or None (no model call)
    max_rows: int | None = None
    use_cache: bool = False


FALLBACK_LEVEL = 2  # the first rung served by the fallback encoder: where a failover lands


def ladder(small_batch_rows: int) -> tuple[Level, ...]:
    return (
        Level(0, "normal", "primary"),
        Level(1, "small_batches", "primary", max_rows=small_batch_rows),
        Level(FALLBACK_LEVEL, "fallback_model", "fallback"),
        Level(3, "cached_answers", "fallback", use_cache=True),
        Level(4, "unavailable", None, use_cache=True),
    )


TOP_AUTOMATIC_LEVEL = TOP_LEVEL - 1  # what the signals reach; 503 for all only by force


def queued_share(request_rows: Sequence[int], max_batch_size: int) -> float:
    """Rows of a dynamic batch beyond its largest request, as a share of max_batch_size:
    what was waiting beside the first request when an instance freed up."""
    if not request_rows:
        return 0.0
    return min((sum(request_rows) - max(request_rows)) / max(max_batch_size, 1), 1.0)


@dataclass
class Transition:
    """A level change and why it happened."""

    old: int
    new: int
    reason: str


@dataclass
class DegradationPolicy:
    """Per-instance state of the ladder; feed it observations, ask it for the level."""

    settings: LadderSettings  # the thresholds, from the front's config (core/settings.py)
    level: int = 0
    since: float = 0.0
    consecutive_failures: int = 0
    memory_mb: float = 0.0
    queued: float = 0.0  # the queue signal: an EWMA of `queued_share` over batches
    history: list[Transition] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.settings.forced is not None:
            self.level = self.settings.forced

    def observe_batch(self, request_rows: Sequence[int], max_batch_size: int) -> None:
        """A dynamic batch arrived: its rows per request."""
        self.observe_share(queued_share(request_rows, max_batch_size))

    def observe_share(self, share: float) -> None:
        """What waited, as a share of a full execution (queued_share, or a worker pool's
        backlog_share)."""
        alpha = self.settings.queue_ewma_alpha
        self.queued = alpha * share + (1 - alpha) * self.queued

    def observe_success(self) -> None:
        self.consecutive_failures = 0

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
        if self.queued > s.queue_ratio:
            return (f"requests are queueing: {self.queued:.0%} of a batch waited beside its "
                    "first request")
        return None

    def relaxed(self) -> bool:
        """Every signal is under its 'down' threshold (memory moves slowly: 90% of it)."""
        s = self.settings
        return (self.consecutive_failures == 0
                and self.memory_mb < 0.9 * s.memory_limit_mb
                and self.queued < s.queue_ratio * s.degrade_down_ratio)

    def decide(self, now: float) -> Transition | None:
        """Move at most one step, respecting the dwell times; return the change, if any."""
        s = self.settings
        if s.forced is not None:
            return None
        held = now - self.since
        reason = self.pressure()
        if reason and self.level < TOP_AUTOMATIC_LEVEL and held >= s.min_dwell_s:
            return self._move(self.level + 1, reason, now)
        if not reason and 0 < self.level <= TOP_AUTOMATIC_LEVEL \
                and held >= s.recover_dwell_s and self.relaxed():
            return self._move(self.level - 1, "every signal under its down threshold", now)
        return None

    def _move(self, new: int, reason: str, now: float) -> Transition:
        transition = Transition(self.level, new, reason)
        self.level, self.since = new, now
        self.consecutive_failures = 0
        self.history.append(transition)
        return transition

    def fail_over(self, reason: str, now: float) -> Transition | None:
        """The primary encoder is gone (unloaded, dead stub): jump to the fallback at once."""
        if self.settings.forced is not None or self.level >= FALLBACK_LEVEL:
            return None
        return self._move(FALLBACK_LEVEL, reason, now)


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


class ResponseCache:
    """A small LRU of a row's key (its text, an image's digest) -> (the encoder's output,
    what served it), filled by successful calls, for every family's front model."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[np.ndarray, ServedBy]] = OrderedDict()

    def get(self, text: str) -> tuple[np.ndarray, ServedBy] | None:
        item = self._items.get(text)
        if item is not None:
            self._items.move_to_end(text)
        return item

    def put(self, text: str, vector: np.ndarray, served_by: ServedBy) -> None:
        if self.capacity <= 0:
            return
        self._items[text] = (vector, served_by)
        self._items.move_to_end(text)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

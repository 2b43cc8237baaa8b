"""Retry with exponential backoff and full jitter, only for retriable errors, within a deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass

from client.errors import TritonClientError


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to back off; `attempts` counts the first try."""

    attempts: int = 3
    base_delay_s: float = 0.05
    max_delay_s: float = 1.0

    def backoff(self, retry_index: int, rng: random.Random) -> float:
        """Full-jitter delay before retry number `retry_index` (0-based)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**retry_index))
        return rng.uniform(0, ceiling)


NO_RETRY = RetryPolicy(attempts=1)


def next_delay(policy: RetryPolicy, attempt: int, error: TritonClientError,
               remaining_s: float | None, rng: random.Random) -> float | None:
    """The delay before another try, or None to give up and raise `error`.

    `attempt` is the number of tries made so far; `remaining_s` is the caller's
    deadline budget left (None: no deadline).
    """
    if not error.retriable or attempt >= policy.attempts:
        return None
    delay = policy.backoff(attempt - 1, rng)
    if remaining_s is not None and delay >= remaining_s:
        return None
    return delay

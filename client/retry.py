"""Retry with exponential backoff and full jitter, only for retriable errors, within a deadline.

A server's `Retry-After` (HTTP 429 and 503 at the front door; `TritonClientError.retry_after_s`)
is a floor: the next try waits at least that long. One longer than the time left before the
call's deadline, or than `max_retry_after_s`, is not waited: the error is raised at once.
gRPC answers carry no Retry-After, so gRPC retries back off by the policy alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tmr_client.contract import MAX_RETRY_AFTER_S
from tmr_client.errors import TritonClientError


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to back off; `attempts` counts the first try."""

    attempts: int = 3
    base_delay_s: float = 0.05
    max_delay_s: float = 1.0
    max_retry_after_s: float = MAX_RETRY_AFTER_S  # a longer Retry-After raises, unwaited

    def backoff(self, retry_index: int, rng: random.Random) -> float:
        """Full-jitter delay before retry number `retry_index` (0-based)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**retry_index))
        return rng.uniform(0, ceiling)


NO_RETRY = RetryPolicy(attempts=1)


def next_delay(policy: RetryPolicy, attempt: int, error: TritonClientError,
               remaining_s: float | None, rng: random.Random) -> float | None:
    """The delay before another try, or None to give up and raise `error`.

    `attempt` is the number of tries made so far; `remaining_s` is the caller's
    deadline budget left (None: no deadline). The delay is at least the error's
    Retry-After.
    """
    if not error.retriable or attempt >= policy.attempts:
        return None
    delay = policy.backoff(attempt - 1, rng)
    if error.retry_after_s is not None:
        if error.retry_after_s > policy.max_retry_after_s:
            return None
        delay = max(delay, error.retry_after_s)
    if remaining_s is not None and delay >= remaining_s:
        return None
    return delay

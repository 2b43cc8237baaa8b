"""A call's client-side deadline (`timeout=`, seconds), on the monotonic clock.

`timeout=` bounds the whole call, its chunks and retries; Triton's queue timeout
(`timeout_ms=`) is a request's, and the server's (tmr_client.core's doc tells them apart).
Over gRPC the deadline ends the caller's wait but never cancels the RPC: its gRPC deadline
is the time left plus ABANDONED_GRACE_S, reached only by a server that stopped answering.
Every method takes the clock reading (`now`) so that tests need no sleep.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tmr_client.errors import DeadlineExceededError, InvalidInputError
from tmr_client.shaping import is_number

ABANDONED_GRACE_S = 10.0  # how long a gRPC request outlives the deadline of its caller


def check_timeout(timeout: object) -> float | None:
    """A `timeout=` in seconds (> 0), or None; anything else is an InvalidInputError."""
    if timeout is not None and not (is_number(timeout) and timeout > 0):
        raise InvalidInputError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    return None if timeout is None else float(timeout)


def clock(now: float | None) -> float:
    """`now`, else the monotonic clock."""
    return time.monotonic() if now is None else now


@dataclass(frozen=True)
class Deadline:
    """When a call must end: its `timeout` in seconds and the monotonic time `at` which it
    passes; both None for a call without one."""

    timeout: float | None = None
    at: float | None = None

    @classmethod
    def after(cls, timeout: float | None, now: float | None = None) -> Deadline:
        """The deadline `timeout` seconds from `now` (none when `timeout` is None)."""
        return cls() if timeout is None else cls(timeout, clock(now) + timeout)

    def left(self, now: float | None = None) -> float | None:
        """Seconds left, 0 once passed (None: no deadline)."""
        return None if self.at is None else max(0.0, self.at - clock(now))

    def expired(self, now: float | None = None) -> bool:
        return self.at is not None and clock(now) >= self.at

    def error(self, model: str) -> DeadlineExceededError:
        """What a call to `model` raises once its deadline has passed."""
        return DeadlineExceededError(f"deadline exceeded: the call to {model!r} took "
                                     f"more than its timeout of {self.timeout:g} s")

    def remaining(self, model: str, now: float | None = None) -> float | None:
        """Seconds left (None: no deadline); raises `error(model)` once it has passed."""
        left = self.left(now)
        if left is not None and left <= 0:
            raise self.error(model)
        return left

    def grpc(self, model: str, now: float | None = None) -> float | None:
        """The gRPC deadline of one request: the time left plus ABANDONED_GRACE_S, so that
        the caller stops waiting first and the RPC is not cancelled."""
        left = self.remaining(model, now)
        return None if left is None else left + ABANDONED_GRACE_S

    def queue_timeout_us(self, model: str, now: float | None = None) -> int | None:
        """The time left as Triton's queue timeout, in µs (at least 1; None: no deadline),
        so that the server drops a request still queued once nobody waits for it."""
        left = self.remaining(model, now)
        return None if left is None else max(1, int(left * 1_000_000))

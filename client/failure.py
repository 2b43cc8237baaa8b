"""What a client does after a failed request, decided as a value (no I/O, no clock read).

    decide(call, error, attempt, policy, rng, now) -> Decision
        Raise(error, why)     past the call's deadline (its DeadlineExceededError), or an
                              error the retry policy gives up on (the error itself)
        Reroute(model, why)   an interactive lane's queue is full: the same request, at
                              once, to the lane's front, where priority 1 waits ahead of
                              bulk work in Triton's queue
        Retry(delay_s, why)   a retriable error within the policy and the deadline: the
                              same request after `delay_s` (at least its Retry-After)

Both clients' send loops carry the decision out; only how they wait differs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from tmr_client.calls import Call
from tmr_client.contract import LANE_SUFFIX
from tmr_client.errors import QueueFullError, TritonClientError
from tmr_client.retry import RetryPolicy, next_delay


class Why(StrEnum):
    """The reason of a decision."""

    DEADLINE = "the call's deadline has passed"
    LANE_FULL = "the interactive lane's queue is full; its front takes the request"
    RETRIABLE = "retriable, and the policy and the deadline allow another try"
    GIVE_UP = "not retriable, out of tries, or its wait would pass the deadline or the cap"


@dataclass(frozen=True)
class Retry:
    """Send the same request again after `delay_s` seconds."""

    delay_s: float
    why: Why = Why.RETRIABLE


@dataclass(frozen=True)
class Reroute:
    """Send the same request at once to `model`."""

    model: str
    why: Why = Why.LANE_FULL


@dataclass(frozen=True)
class Raise:
    """Give up and raise `error`."""

    error: TritonClientError
    why: Why


Decision = Retry | Reroute | Raise


def overflow_model(call: Call, error: TritonClientError) -> str | None:
    """The front of a lane whose queue is full (never refused for the lane's short queue);
    None for any other failure."""
    if isinstance(error, QueueFullError) and call.model.endswith(LANE_SUFFIX):
        return call.model.removesuffix(LANE_SUFFIX)
    return None


def decide(call: Call, error: TritonClientError, attempt: int, policy: RetryPolicy,
           rng: random.Random, now: float) -> Decision:
    """What to do after try number `attempt` (1 = the first) of `call` failed with `error`
    at monotonic time `now`: the deadline first, then a full lane, then the retry policy."""
    if call.deadline.expired(now):
        return Raise(call.deadline_error(), Why.DEADLINE)
    front = overflow_model(call, error)
    if front is not None:
        return Reroute(front)
    delay = next_delay(policy, attempt, error, call.deadline.left(now), rng)
    return Raise(error, Why.GIVE_UP) if delay is None else Retry(delay)

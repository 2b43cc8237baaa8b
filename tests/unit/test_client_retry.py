"""tmr_client.retry.next_delay: full-jitter backoff, only for retriable errors, in a deadline."""

from __future__ import annotations

import random

import pytest
from tmr_client.errors import InvalidInputError, QueueFullError, ServerUnreachableError
from tmr_client.retry import NO_RETRY, RetryPolicy, next_delay

POLICY = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=0.5)
RETRIABLE = QueueFullError("Exceeds maximum queue size", "503")


def test_next_delay_gives_up_at_once_on_a_non_retriable_error():
    err = InvalidInputError("TEXT[0] is empty", "400")
    assert next_delay(POLICY, 1, err, None, random.Random(0)) is None


def test_next_delay_gives_up_when_the_attempts_are_exhausted():
    assert next_delay(POLICY, 5, RETRIABLE, None, random.Random(0)) is None
    assert next_delay(POLICY, 6, RETRIABLE, None, random.Random(0)) is None
    assert next_delay(POLICY, 4, RETRIABLE, None, random.Random(0)) is not None


def test_no_retry_policy_never_retries():
    assert next_delay(NO_RETRY, 1, RETRIABLE, None, random.Random(0)) is None


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_next_delay_stays_within_zero_and_the_capped_exponential_ceiling(attempt):
    ceiling = min(POLICY.max_delay_s, POLICY.base_delay_s * 2 ** (attempt - 1))
    rng = random.Random(attempt)
    delays = [next_delay(POLICY, attempt, RETRIABLE, None, rng) for _ in range(200)]
    assert all(d is not None and 0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling / 2  # full jitter spreads over the whole range


def test_next_delay_ceiling_is_capped_by_max_delay():
    rng = random.Random(3)
    delays = [next_delay(POLICY, 4, ServerUnreachableError("x"), None, rng) for _ in range(200)]
    assert max(delays) <= POLICY.max_delay_s


def test_next_delay_gives_up_when_the_deadline_is_smaller_than_the_delay():
    delay = next_delay(POLICY, 2, RETRIABLE, None, random.Random(7))
    assert delay is not None and delay > 0
    assert next_delay(POLICY, 2, RETRIABLE, delay / 2, random.Random(7)) is None
    assert next_delay(POLICY, 2, RETRIABLE, delay, random.Random(7)) is None
    assert next_delay(POLICY, 2, RETRIABLE, 0.0, random.Random(7)) is None


def test_next_delay_returns_the_delay_when_the_deadline_leaves_room():
    delay = next_delay(POLICY, 2, RETRIABLE, None, random.Random(7))
    assert next_delay(POLICY, 2, RETRIABLE, delay + 0.01, random.Random(7)) == delay


def test_next_delay_is_deterministic_for_a_seeded_rng():
    first = [next_delay(POLICY, a, RETRIABLE, None, random.Random(42)) for a in (1, 2, 3)]
    again = [next_delay(POLICY, a, RETRIABLE, None, random.Random(42)) for a in (1, 2, 3)]
    assert first == again


def test_backoff_draws_uniformly_below_the_ceiling_of_its_retry_index():
    rng, same = random.Random(5), random.Random(5)
    assert POLICY.backoff(0, rng) == same.uniform(0, 0.1)
    assert POLICY.backoff(10, rng) == same.uniform(0, 0.5)

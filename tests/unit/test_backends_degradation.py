"""The degradation ladder and its policy: ordered levels, hysteresis, fail-over, the cache."""

from __future__ import annotations

import numpy as np
import pytest

from core.params import ConfigError
from core.settings import TOP_LEVEL, LadderSettings
from python_backends.degradation import (
    TOP_AUTOMATIC_LEVEL,
    DegradationPolicy,
    ResponseCache,
    ladder,
    queued_share,
    throttled,
)

SETTINGS = LadderSettings(min_dwell_s=5, recover_dwell_s=1, failures_to_degrade=3,
                          memory_limit_mb=1000)
QUEUED = [1] * 64  # 64 one-text requests in one batch: 63 rows waited beside the first
CALM = [1, 1]  # two requests: 1 row of 64 waited


def test_ladder_follows_the_seeds_order() -> None:
    names = [level.name for level in ladder(8)]
    assert names == ["normal", "small_batches", "fallback_model", "cached_answers",
                     "unavailable"]
    assert ladder(8)[3].use_cache and ladder(8)[4].encoder is None
    assert ladder(8)[1].max_rows == 8 and ladder(8)[2].encoder == "fallback"
    assert len(names) == TOP_LEVEL + 1


@pytest.mark.parametrize(("rows", "share"), [
    ([1] * 64, 63 / 64), ([64], 0.0), ([8] * 8, 56 / 64), ([32, 32], 0.5), ([], 0.0),
    ([1] * 200, 1.0)])
def test_the_queue_is_the_rows_beside_the_largest_request(rows, share) -> None:
    assert queued_share(rows, 64) == pytest.approx(share)


def test_queueing_raises_one_level_once_the_rise_dwell_has_passed() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    for _ in range(10):
        policy.observe_batch(QUEUED, 64)
    assert policy.decide(now=4.9) is None  # still dwelling at level 0
    move = policy.decide(now=5.0)
    assert (move.old, move.new) == (0, 1) and "requests are queueing" in move.reason


def test_a_bulk_clients_full_chunks_are_not_a_queue() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    for _ in range(100):
        policy.observe_batch([64], 64)  # one 64-text request per batch, back to back
    assert policy.decide(now=100) is None and policy.level == 0


def test_level_falls_a_step_a_second_once_calm_and_holds_between_thresholds() -> None:
    policy = DegradationPolicy(SETTINGS, level=3, since=0.0)
    for _ in range(10):
        policy.observe_batch(QUEUED, 64)
    for _ in range(3):
        policy.observe_batch([1] * 40, 64)  # ~0.6: under the up threshold, over down (0.45)
    assert policy.decide(now=10) is None and policy.level == 3  # hysteresis holds
    for _ in range(10):
        policy.observe_batch(CALM, 64)
    assert policy.decide(now=10.5).new == 2
    assert policy.decide(now=11.0) is None  # one step per recover dwell
    assert policy.decide(now=11.5).new == 1 and policy.decide(now=12.5).new == 0


def test_a_saw_tooth_moves_the_level_at_most_once_per_rise_dwell() -> None:
    """2 s of queueing, 2 s calm, for a minute: the level never flaps faster than that."""
    policy, changes, now = DegradationPolicy(SETTINGS, since=0.0), 0, 0.0
    while now < 60:
        busy = int(now // 2) % 2 == 0
        policy.observe_batch(QUEUED if busy else CALM, 64)
        changes += policy.decide(now) is not None
        now += 0.05
    assert changes <= 2 * 60 / SETTINGS.min_dwell_s  # up at most once a dwell, then down
    assert max(t.new for t in policy.history) <= 1


def test_consecutive_failures_and_memory_pressure_raise_the_level() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    for _ in range(3):
        policy.observe_failure()
    assert "3 consecutive encoder failures" in policy.decide(now=5).reason
    policy.observe_memory(1500)
    assert "memory 1500 MB over 1000 MB" in policy.decide(now=10).reason
    assert policy.level == 2


def test_signals_never_reach_the_503_level_only_an_operator_does() -> None:
    policy = DegradationPolicy(SETTINGS, level=TOP_AUTOMATIC_LEVEL, since=0.0)
    for _ in range(10):
        policy.observe_batch(QUEUED, 64)
    assert policy.decide(now=100) is None and policy.level == TOP_AUTOMATIC_LEVEL
    assert TOP_AUTOMATIC_LEVEL == TOP_LEVEL - 1


def test_forced_level_overrides_every_signal() -> None:
    policy = DegradationPolicy(LadderSettings(forced_level=3), since=0.0)
    assert policy.level == 3
    policy.observe_batch(CALM, 64)
    assert policy.decide(now=100) is None and policy.level == 3
    assert policy.fail_over("primary gone", now=100) is None


def test_fail_over_jumps_to_the_fallback_model_at_once_without_dwell() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    move = policy.fail_over("primary minilm_onnx failed: is not found", now=0.1)
    assert (move.old, move.new) == (0, 2) and policy.since == 0.1
    assert policy.fail_over("again", now=0.2) is None


def test_settings_read_config_parameters_and_refuse_a_forced_level_above_the_top() -> None:
    config = {"parameters": {"queue_ratio": {"string_value": "0.8"},
                             "recover_dwell_s": {"string_value": "2"},
                             "forced_level": {"string_value": "2"}}}
    settings = LadderSettings.from_parameters(config)
    assert (settings.queue_ratio, settings.recover_dwell_s, settings.forced) == (0.8, 2, 2)
    assert LadderSettings.from_parameters({}).forced is None
    with pytest.raises(ConfigError, match="forced_level 9 is above the top level 4"):
        LadderSettings.from_parameters({"parameters": {"forced_level": {"string_value": "9"}}})


def test_embedding_cache_evicts_the_least_recently_used_text() -> None:
    cache = ResponseCache(capacity=2)
    vec = np.zeros(3, np.float32)
    cache.put("a", vec, "m:1:fp32:L0")
    cache.put("b", vec, "m:1:fp32:L0")
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", vec, "m:1:fp32:L0")
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2


def test_zero_capacity_cache_stores_nothing() -> None:
    cache = ResponseCache(capacity=0)
    cache.put("a", np.zeros(3), "x")
    assert cache.get("a") is None


def test_throttled_reads_once_per_period_and_returns_the_last_value_between() -> None:
    now, reads = [0.0], []

    def read() -> float:
        reads.append(now[0])
        return float(len(reads))

    sample = throttled(read, 0.5, lambda: now[0])
    assert sample() == 1.0
    now[0] = 0.4
    assert sample() == 1.0
    now[0] = 0.5
    assert sample() == 2.0
    assert reads == [0.0, 0.5]

"""The degradation ladder and its policy: ordered levels, hysteresis, fail-over, the cache."""

from __future__ import annotations

import numpy as np
import pytest

from python_backends.degradation import (
    TOP_LEVEL,
    DegradationPolicy,
    EmbeddingCache,
    PolicySettings,
    ladder,
    throttled,
)

SETTINGS = PolicySettings(latency_budget_ms=100, min_dwell_s=5, failures_to_degrade=3,
                          memory_limit_mb=1000)


def test_ladder_follows_the_seeds_order() -> None:
    names = [level.name for level in ladder(8)]
    assert names == ["normal", "small_batches", "fallback_model", "cached_answers", "shed_low",
                     "unavailable"]
    assert ladder(8)[3].use_cache and not ladder(8)[3].shed_low and ladder(8)[4].shed_low
    assert ladder(8)[1].max_rows == 8 and ladder(8)[2].encoder == "fallback"
    assert len(names) == TOP_LEVEL + 1


def test_latency_over_budget_raises_one_level_after_the_dwell_time() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    policy.observe_latency(300)
    assert policy.decide(now=4.9) is None  # still dwelling at level 0
    move = policy.decide(now=5.0)
    assert (move.old, move.new) == (0, 1) and "latency EWMA 300 ms over budget 100" in move.reason


def test_level_falls_one_step_only_when_every_signal_is_under_the_down_threshold() -> None:
    policy = DegradationPolicy(SETTINGS, level=2, since=0.0)
    policy.observe_latency(60)  # under budget, but above budget * down_ratio (50)
    assert policy.decide(now=10) is None
    policy.observe_latency(10)
    policy.observe_latency(10)
    move = policy.decide(now=10)
    assert (move.old, move.new) == (2, 1)


def test_hysteresis_holds_a_level_between_the_up_and_down_thresholds() -> None:
    policy = DegradationPolicy(SETTINGS, level=1, since=0.0)
    policy.observe_latency(75)  # between 50 (down) and 100 (up)
    assert policy.decide(now=100) is None and policy.level == 1


def test_consecutive_failures_and_memory_pressure_raise_the_level() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    for _ in range(3):
        policy.observe_failure()
    assert "3 consecutive encoder failures" in policy.decide(now=5).reason
    policy.observe_memory(1500)
    assert "memory 1500 MB over 1000 MB" in policy.decide(now=10).reason
    assert policy.level == 2


def test_signals_never_reach_the_503_level_only_an_operator_does() -> None:
    policy = DegradationPolicy(SETTINGS, level=TOP_LEVEL - 1, since=0.0)
    policy.observe_latency(10_000)
    assert policy.decide(now=100) is None and policy.level == TOP_LEVEL - 1


def test_forced_level_overrides_every_signal() -> None:
    policy = DegradationPolicy(PolicySettings(forced_level=3), since=0.0)
    assert policy.level == 3
    policy.observe_latency(1)
    assert policy.decide(now=100) is None and policy.level == 3
    assert policy.fail_over("primary gone", now=100) is None


def test_fail_over_jumps_to_the_fallback_model_at_once_without_dwell() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    move = policy.fail_over("primary minilm_onnx failed: is not found", now=0.1)
    assert (move.old, move.new) == (0, 2) and policy.since == 0.1
    assert policy.fail_over("again", now=0.2) is None


def test_settings_read_config_parameters_and_refuse_a_forced_level_above_the_top() -> None:
    config = {"parameters": {"latency_budget_ms": {"string_value": "80"},
                             "forced_level": {"string_value": "2"}}}
    settings = PolicySettings.from_config(config)
    assert settings.latency_budget_ms == 80 and settings.forced_level == 2
    assert PolicySettings.from_config({}).forced_level is None
    with pytest.raises(ValueError, match="forced_level 9 is above the top level 5"):
        PolicySettings.from_config({"parameters": {"forced_level": {"string_value": "9"}}})


def test_embedding_cache_evicts_the_least_recently_used_text() -> None:
    cache = EmbeddingCache(capacity=2)
    vec = np.zeros(3, np.float32)
    cache.put("a", vec, "m:1:fp32:L0")
    cache.put("b", vec, "m:1:fp32:L0")
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", vec, "m:1:fp32:L0")
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2


def test_zero_capacity_cache_stores_nothing() -> None:
    cache = EmbeddingCache(capacity=0)
    cache.put("a", np.zeros(3), "x")
    assert cache.get("a") is None


def test_batches_arriving_full_are_queue_pressure_and_relax_only_when_mostly_empty() -> None:
    policy = DegradationPolicy(SETTINGS, since=0.0)
    for _ in range(10):
        policy.observe_batch(64, 64)
    assert "batches arrive" in policy.decide(now=5).reason and policy.level == 1
    for _ in range(3):
        policy.observe_batch(20, 64)  # ~0.4 full: under up, not yet under down (0.45)
    assert policy.decide(now=20) is None and policy.level == 1
    for _ in range(20):
        policy.observe_batch(1, 64)
    assert policy.decide(now=30).new == 0


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

"""The router's plan for a batch (pure): refuse, answer from the cache, or encode in buckets."""

from __future__ import annotations

import numpy as np

from python_backends.degradation import ResponseCache, ladder
from python_backends.routing import (
    OUT_OF_SERVICE,
    EncoderCall,
    RoutedRequest,
    plan_batch,
    plan_calls,
)

LEVELS = ladder(small_batch_rows=2)


def request(*texts: str, length: int = 4) -> RoutedRequest:
    return RoutedRequest(list(texts), [[101] + [7] * (length - 2) + [102] for _ in texts])


def test_normal_level_encodes_every_request_with_the_primary_in_length_buckets() -> None:
    requests = {0: request("a", "b", length=4), 1: request("c", length=40),
                2: request("d", length=5)}
    plan = plan_batch(LEVELS[0], requests, ResponseCache(8), bucket_waste=0.25)
    assert (plan.encoder, plan.encoded, plan.refused, plan.cached) == ("primary", [0, 1, 2], {},
                                                                        {})
    rows = plan.rows(requests)
    assert [len(rows[i]) for i in range(len(rows))] == [4, 4, 40, 5]
    assert sorted(i for call in plan.calls for i in call) == [0, 1, 2, 3]
    assert [2] in plan.calls  # the long text pads no short one


def test_small_batches_level_caps_each_call_at_its_rows() -> None:
    requests = {0: request("a", "b", "c", "d", "e")}
    plan = plan_batch(LEVELS[1], requests, ResponseCache(8), bucket_waste=-1)
    assert plan.encoder == "primary" and [len(c) for c in plan.calls] == [2, 2, 1]


def test_cached_level_answers_fully_cached_requests_and_encodes_the_rest_on_the_fallback():
    cache = ResponseCache(8)
    cache.put("known", np.ones(3, np.float32), "m:1:int8:L2")
    requests = {0: request("known"), 1: request("known", "new"), 2: request("new")}
    plan = plan_batch(LEVELS[3], requests, cache, bucket_waste=0.25)
    assert list(plan.cached) == [0] and plan.cached[0][0][1] == "m:1:int8:L2"
    assert plan.encoded == [1, 2] and plan.encoder == "fallback"


def test_below_the_cache_level_a_cached_text_is_encoded_again() -> None:
    cache = ResponseCache(8)
    cache.put("known", np.ones(3, np.float32), "m:1:fp32:L0")
    plan = plan_batch(LEVELS[2], {0: request("known")}, cache, bucket_waste=0.25)
    assert plan.cached == {} and plan.encoded == [0]


def test_the_operators_top_level_refuses_everything_and_encodes_nothing() -> None:
    plan = plan_batch(LEVELS[4], {0: request("a"), 3: request("b")}, ResponseCache(8), 0.25)
    assert plan.refused == {0: OUT_OF_SERVICE, 3: OUT_OF_SERVICE}
    assert plan.encoded == [] and plan.calls == [] and plan.encoder is None


def test_identical_rows_of_a_batch_are_encoded_once_and_copied() -> None:
    requests = {0: request("a", "b"), 1: request("b", "c"), 2: request("a")}
    plan = plan_batch(LEVELS[0], requests, ResponseCache(8), 0.25, dedupe=True)
    assert plan.copies == {2: 1, 4: 0}  # rows: a b b c a
    assert sorted(i for call in plan.calls for i in call) == [0, 1, 3]
    assert plan_batch(LEVELS[0], requests, ResponseCache(8), 0.25).copies == {}


def test_rows_on_different_sides_of_a_rollout_split_are_not_duplicates() -> None:
    one, two = request("a"), request("a")
    two.split_keys = ["client-2"]
    plan = plan_batch(LEVELS[0], {0: one, 1: two}, ResponseCache(8), 0.25, dedupe=True)
    assert plan.copies == {} and sorted(i for c in plan.calls for i in c) == [0, 1]


def test_calls_hold_at_most_the_encoders_rows_and_the_padded_token_bound() -> None:
    requests = {0: request(*"abcdefghij", length=10)}
    by_rows = plan_batch(LEVELS[0], requests, ResponseCache(8), 0.25, max_rows=4)
    assert [len(c) for c in by_rows.calls] == [4, 4, 2]
    by_tokens = plan_batch(LEVELS[0], requests, ResponseCache(8), 0.25, max_tokens=30)
    assert [len(c) for c in by_tokens.calls] == [3, 3, 3, 1]
    smaller = plan_batch(LEVELS[1], requests, ResponseCache(8), 0.25, max_rows=4)
    assert [len(c) for c in smaller.calls] == [2] * 5  # the level's 2 rows win


# -- the encoder calls of a batch, as values -------------------------------------------------
def test_without_a_rollout_each_group_is_one_unshadowed_call() -> None:
    calls = plan_calls([[0, 1], [2]], ["a", "b", "c"], None, may_shadow=True)
    assert calls == [EncoderCall((0, 1)), EncoderCall((2,))]


def test_a_rollout_splits_each_group_candidate_first_and_shadows_the_stable_at_level_0() -> None:
    def split(keys: list[str]) -> list[bool]:
        return [k.startswith("c") for k in keys]

    keys = ["c1", "s1", "s2", "c2"]
    assert plan_calls([[0, 1], [2, 3]], keys, split, may_shadow=True) == [
        EncoderCall((0,), canary=True), EncoderCall((1,), shadow=True),
        EncoderCall((3,), canary=True), EncoderCall((2,), shadow=True)]
    assert plan_calls([[0, 1]], keys, split, may_shadow=False) == [
        EncoderCall((0,), canary=True), EncoderCall((1,))]


def test_a_group_all_on_one_side_is_one_call() -> None:
    everyone = plan_calls([[0, 1]], ["x", "y"], lambda ks: [True] * len(ks), may_shadow=True)
    assert everyone == [EncoderCall((0, 1), canary=True)]
    nobody = plan_calls([[0, 1]], ["x", "y"], lambda ks: [False] * len(ks), may_shadow=False)
    assert nobody == [EncoderCall((0, 1))]

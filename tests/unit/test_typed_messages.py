"""Producers and parsers of the values that cross modules agree, whatever the wording:
SERVED_BY (the router writes it, the SDK and `tmr degrade` read it) and the router's
degraded refusal (it writes it; `tmr degrade`, the watchdog and the SDK's error classes
read it)."""

from __future__ import annotations

import numpy as np
import pytest
from tmr_client.core import EmbedResult
from tmr_client.errors import UnavailableError, classify

from core.messages import degraded_level, degraded_refusal, kind_of
from core.served_by import ServedBy
from python_backends.degradation import ResponseCache, ladder
from server.admin import Observation

SERVED = [ServedBy("minilm_onnx", "1", "fp32", 0), ServedBy("minilm_int8", "?", "int8", 2),
          ServedBy("digits_int8", "12", "int8", 3, cached=True)]


@pytest.mark.parametrize("value", SERVED, ids=str)
def test_served_by_reads_back_to_the_value_the_router_wrote(value: ServedBy) -> None:
    assert ServedBy.parse(str(value)) == value
    assert Observation.of_answer(str(value)).level == value.level


def test_a_cached_answer_says_what_computed_it_and_that_it_came_from_the_cache() -> None:
    cache = ResponseCache(4)
    cache.put("text", np.ones(3), SERVED[1])
    hit = cache.get("text")
    assert hit is not None
    assert ServedBy.parse(str(hit[1].from_cache())) == ServedBy("minilm_int8", "?", "int8", 2,
                                                                cached=True)


def test_the_sdk_exposes_each_rows_served_by_as_a_value() -> None:
    result = EmbedResult(np.zeros((3, 2)), served_by=[str(s) for s in SERVED])
    assert result.served == SERVED


@pytest.mark.parametrize("not_served_by", ["", "minilm_onnx:1:fp32", "a:1:fp32:Lx", "a:1:b:L1:x"])
def test_anything_else_is_not_a_served_by(not_served_by: str) -> None:
    with pytest.raises(ValueError, match="not a SERVED_BY value"):
        ServedBy.parse(not_served_by)


@pytest.mark.parametrize("level", ladder(8), ids=lambda level: level.name)
@pytest.mark.parametrize("reason", ["out of service", "queue 95% full (over 90%): 7 of 8"])
def test_the_refusal_names_its_level_to_every_reader(level, reason: str) -> None:
    refusal = degraded_refusal("embed", level.number, level.name, reason)
    assert degraded_level(refusal) == level.number
    assert degraded_level(f"[503] {refusal}") == level.number  # as the SDK's str() shows it
    assert Observation.of_refusal(refusal).level == level.number
    assert kind_of(refusal) is None  # no Triton marker: the SDK maps it by its status


def test_the_router_refusal_is_an_unavailable_error_over_http_and_grpc() -> None:
    refusal = degraded_refusal("embed", 4, "unavailable", "out of service")
    assert classify("503", refusal) is UnavailableError
    assert classify("StatusCode.UNAVAILABLE", refusal) is UnavailableError


@pytest.mark.parametrize("other", ["[503] Exceeds maximum queue size", "embed is not ready",
                                   "degraded to level three"])
def test_other_failures_name_no_level(other: str) -> None:
    assert degraded_level(other) is None
    assert Observation.of_refusal(other).level is None

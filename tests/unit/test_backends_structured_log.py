"""Structured batch log lines and queue capacities: pure helpers of the Python backends."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from core.paths import DEFAULT_REPOSITORY
from python_backends.pb import Log
from python_backends.queues import queue_capacities
from python_backends.structured_log import (
    FIELDS,
    BatchFacts,
    BatchLog,
    Sampler,
    batch_record,
    format_line,
    parse_line,
)

# A real line of Triton 2.51's log (--log-format=ISO8601): the message is escaped once.
TRITON_LINE = ('2026-11-30T02:54:21Z I 14788 pb.py:42] "{\\"event\\":\\"batch\\",\\"model\\":'
               '\\"embed\\",\\"version\\":\\"1\\",\\"request_ids\\":[\\"req-0\\"],\\"requests\\":1,'
               '\\"batch_size\\":2,\\"input_bytes\\":8,\\"latency_ms\\":315.758,'
               '\\"degradation_level\\":0,\\"failed\\":0}"')


def test_batch_record_has_the_documented_fields_in_order() -> None:
    record = batch_record("embed", "1", ["a", "", "b"], 5, 120, 12.34567, 2, failed=1)
    assert tuple(record) == FIELDS
    assert record["request_ids"] == ["a", "b"] and record["requests"] == 3
    assert record["latency_ms"] == 12.346 and record["degradation_level"] == 2


def test_format_line_is_one_compact_json_line_even_with_newlines_in_ids() -> None:
    line = format_line(batch_record("embed", "1", ["x\ny"], 1, 3, 1.0))
    assert "\n" not in line and " " not in line
    assert json.loads(line)["request_ids"] == ["x\ny"]


def test_parse_line_reads_tritons_escaped_message_and_a_bare_object() -> None:
    record = parse_line(TRITON_LINE)
    assert record is not None and record["model"] == "embed" and record["request_ids"] == ["req-0"]
    assert parse_line(format_line({"event": "batch"})) == {"event": "batch"}


@pytest.mark.parametrize("line", [
    '2026-11-30T02:54:10Z I 14788 pb.py:26] "embed/1: encoders {\'primary\': 1}"',
    "I1130 model_lifecycle.cc:472] loading: embed:1",
    "",
])
def test_parse_line_returns_none_for_other_log_lines(line: str) -> None:
    assert parse_line(line) is None


def test_sampler_with_interval_zero_lets_every_event_through() -> None:
    sampler = Sampler(0.0)
    assert all(sampler.due(t) for t in (0.0, 0.0, 1.0))


def test_sampler_lets_one_event_through_per_interval() -> None:
    sampler = Sampler(10.0)
    assert [sampler.due(t) for t in (0.0, 1.0, 9.9, 10.0, 15.0, 20.5)] == \
        [True, False, False, True, False, True]


@dataclass
class Request:
    """What BatchLog reads of a pb_utils.InferenceRequest."""

    id: str

    def request_id(self) -> str:
        return self.id


@dataclass
class Response:
    """What BatchLog reads of a pb_utils.InferenceResponse."""

    error: bool

    def has_error(self) -> bool:
        return self.error


def test_batch_log_writes_one_info_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    log = BatchLog(Log("tests.batch"), "embed", "1", interval_s=3600)
    requests, responses = [Request("r1"), Request("r2")], [Response(True), Response(False)]
    with caplog.at_level(logging.DEBUG, logger="tests.batch"):
        for _ in range(3):
            log.emit(requests, responses, BatchFacts(4, 40), 0.0, 3)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    record = parse_line(caplog.records[0].getMessage())
    assert record is not None
    assert (record["requests"], record["failed"], record["batch_size"]) == (2, 1, 4)
    assert record["degradation_level"] == 3 and record["latency_ms"] > 0


def embed_config_json() -> dict:
    """embed's config.pbtxt as the JSON Triton hands to the stub (via protobuf)."""
    text = (Path(DEFAULT_REPOSITORY) / "embed" / "config.pbtxt").read_text()
    return json_format.MessageToDict(text_format.Parse(text, model_config_pb2.ModelConfig()),
                                     preserving_proto_field_name=True)


def test_queue_capacities_of_embed_are_its_workers_queues() -> None:
    # its workers hold the queue: the lane's 512 waiting, the bulk workers' 512
    assert queue_capacities(embed_config_json()) == {"1": 512, "2": 512}


@pytest.mark.parametrize(("batching", "expected"), [
    ({}, {}),
    ({"default_queue_policy": {"max_queue_size": 64}}, {"0": 64}),
    ({"default_queue_policy": {"max_queue_size": 0}}, {}),
    ({"priority_levels": 3, "default_queue_policy": {"max_queue_size": "32"},
      "priority_queue_policy": {"1": {"max_queue_size": "100"}, "2": {"max_queue_size": 0}}},
     {"1": 100, "3": 32}),
])
def test_queue_capacities_fall_back_to_the_default_policy_and_skip_unbounded(
        batching: dict, expected: dict[str, int]) -> None:
    config = {"dynamic_batching": batching} if batching else {}
    assert queue_capacities(config) == expected

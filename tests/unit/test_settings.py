"""core/settings.py: typed settings rendered into a config and parsed back, defaults once."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.params import ConfigError
from core.settings import (
    FRONT_BATCHING,
    ONE_THREAD,
    DynamicBatching,
    LadderSettings,
    ModelSettings,
    QueuePolicy,
    TextFrontSettings,
    render,
    request_rows,
)


def config(**values: str) -> dict:
    return {"parameters": {k: {"string_value": v} for k, v in values.items()}}


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"), (5.0, "5"), (0.25, "0.25"), (4096, "4096"), (-1, "-1"), ("reject", "reject"),
    ((0.485, 0.456), "0.485,0.456"),
])
def test_a_value_renders_as_the_string_a_config_holds(value, text) -> None:
    assert render(value) == text


def test_the_ladder_renders_under_the_existing_keys_with_the_shipped_values() -> None:
    assert LadderSettings().to_parameters() == {
        "queue_ratio": "0.9", "degrade_down_ratio": "0.5", "min_dwell_s": "5",
        "recover_dwell_s": "1", "failures_to_degrade": "3", "memory_limit_mb": "4096",
        "small_batch_rows": "8", "cache_entries": "4096", "forced_level": "-1",
        "dedupe_rows": "true", "primary_in_process": "false", "in_process_threads": "instance"}


def test_a_knob_not_written_into_configs_still_has_a_default_and_is_read() -> None:
    assert "queue_ewma_alpha" not in LadderSettings().to_parameters()
    assert LadderSettings.from_parameters({}).queue_ewma_alpha == 0.3
    assert LadderSettings.from_parameters(config(queue_ewma_alpha="0.7")).queue_ewma_alpha == 0.7
    assert ModelSettings.from_parameters(config(batch_log_interval_s="0")) \
        .batch_log_interval_s == 0


def test_an_absent_or_empty_parameter_keeps_the_default() -> None:
    assert TextFrontSettings.from_parameters(config(max_text_bytes="")) == TextFrontSettings()


@pytest.mark.parametrize(("cls", "key", "raw", "why"), [
    (LadderSettings, "failures_to_degrade", "0", "must be a positive integer"),
    (LadderSettings, "forced_level", "5", "above the top level 4"),
    (LadderSettings, "queue_ratio", "high", "could not convert"),
    (TextFrontSettings, "overlength_policy", "cut", "must be one of reject, truncate"),
    (ModelSettings, "gc_policy", "never", "must be one of default, freeze"),
])
def test_a_bad_value_is_a_config_error_naming_key_value_and_why(cls, key, raw, why) -> None:
    with pytest.raises(ConfigError, match=f"parameter '{key}'='{raw}' is invalid: .*{why}"):
        cls.from_parameters(config(**{key: raw}))


def test_a_forced_level_pins_the_ladder_and_minus_one_leaves_it_to_the_signals() -> None:
    assert LadderSettings.from_parameters(config(forced_level="3")).forced == 3
    assert LadderSettings().forced is None


def differences(settings: object) -> dict[str, object]:
    default = type(settings)()
    return {f.name: getattr(settings, f.name) for f in fields(settings)  # type: ignore
            if getattr(settings, f.name) != getattr(default, f.name)}


def test_each_family_holds_only_its_differences_from_the_defaults() -> None:
    # one process each (docs/serving.md, "One model, one process"): workers per core and a lane
    # worker over the primary in process, one thread a call
    one_process = [{"worker_threads": "cores", "interactive_workers": 1},
                   {"primary_in_process": True, "in_process_threads": ONE_THREAD}]
    assert [differences(s) for s in TEXT_EMBEDDING.serving.front_settings] == \
        [one_process[0], one_process[1], {}]
    assert [differences(s) for s in IMAGE_CLASSIFICATION.serving.front_settings] == \
        [one_process[0], {**one_process[1], "small_batch_rows": 4, "cache_entries": 1024}, {}]
    for fam in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION):  # the stub holds the queue
        batching = fam.serving.front_batching
        assert batching.priority_levels == 0 and not batching.priority_queue_policy
        assert fam.serving.front_instances == 1
    preferred = {fam.name: fam.serving.front_batching.preferred_batch_size
                 for fam in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION)}
    assert preferred == {"text_embedding": (8,), "image_classification": (4,)}
    for fam in (TEXT_EMBEDDING, IMAGE_CLASSIFICATION):
        assert replace(fam.serving.front_batching, preferred_batch_size=()) == DynamicBatching()


def test_request_rows_are_the_largest_preferred_batch_within_max_batch_size() -> None:
    assert DynamicBatching().request_rows(64) == 64
    assert DynamicBatching(preferred_batch_size=(4, 8)).request_rows(64) == 8
    assert DynamicBatching(preferred_batch_size=(128,)).request_rows(64) == 64
    serving = TEXT_EMBEDDING.serving
    assert serving.front_batching.request_rows(serving.max_batch_size) == 8
    # from a config in Triton's JSON form, as the stub and the SDK read it
    assert request_rows({"max_batch_size": 64,
                         "dynamic_batching": {"preferred_batch_size": [8]}}) == 8
    assert request_rows({"max_batch_size": 16}) == 16
    assert request_rows({}) == 1  # no batching at all: one row a request


def test_dynamic_batching_goes_through_tritons_message_and_back_unchanged() -> None:
    batching = FRONT_BATCHING.with_queue_sizes(512, 128)
    message = json_format.ParseDict(batching.to_config(), mc.ModelDynamicBatching())
    assert message.priority_queue_policy[2].max_queue_size == 128
    assert message.priority_queue_policy[1].default_timeout_microseconds == 10_000_000
    back = json_format.MessageToDict(message, preserving_proto_field_name=True)
    assert DynamicBatching.from_config(back) == batching


def test_an_absent_field_of_tritons_json_is_tritons_default_not_ours() -> None:
    assert DynamicBatching.from_config({}) == DynamicBatching()
    assert QueuePolicy.from_config({"timeout_action": "DELAY"}) == \
        QueuePolicy(timeout_action="DELAY", allow_timeout_override=False)

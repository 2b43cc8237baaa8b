"""core.params, bls.child_failure and stub_env.environment_info (no Triton)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from core.params import ConfigError, one_of, parameter, positive_int, tensor_names
from python_backends.bls import child_failure
from python_backends.pb import pb_utils
from python_backends.stub_env import environment_info

CONFIG = {
    "parameters": {"target_model": {"string_value": "minilm_onnx"},
                   "target_version": {"string_value": "abc"},
                   "blank": {"string_value": ""}},
    "input": [{"name": "input_ids"}, {"name": "attention_mask"}],
    "output": [{"name": "embedding"}],
}


def test_parameter_casts_the_string_value_of_a_present_key():
    assert parameter(CONFIG, "target_model", "x", str.upper) == "MINILM_ONNX"


@pytest.mark.parametrize("key", ["absent", "blank"])
def test_parameter_returns_the_default_for_an_absent_or_empty_key(key):
    assert parameter(CONFIG, key, 7, int) == 7


def test_parameter_returns_the_default_for_a_config_without_parameters():
    assert parameter({}, "max_tokens", 256, positive_int) == 256


def test_parameter_wraps_a_cast_failure_in_config_error_naming_key_and_value():
    with pytest.raises(ConfigError, match=r"^parameter 'target_version'='abc' is invalid: "):
        parameter(CONFIG, "target_version", -1, int)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_positive_int_accepts_positive_integers():
    assert positive_int("1") == 1
    assert positive_int("256") == 256


@pytest.mark.parametrize("raw", ["0", "-1"])
def test_positive_int_rejects_zero_and_negatives(raw):
    with pytest.raises(ValueError, match="must be a positive integer"):
        positive_int(raw)


def test_positive_int_rejects_non_integers():
    with pytest.raises(ValueError, match="invalid literal for int"):
        positive_int("2.5")


def test_one_of_accepts_a_listed_choice_and_rejects_others_listing_the_choices():
    cast = one_of("reject", "truncate")
    assert cast("truncate") == "truncate"
    with pytest.raises(ValueError, match=r"^must be one of reject, truncate$"):
        cast("Truncate")


def test_tensor_names_lists_inputs_and_outputs_in_config_order():
    assert tensor_names(CONFIG, "input") == ["input_ids", "attention_mask"]
    assert tensor_names(CONFIG, "output") == ["embedding"]
    assert tensor_names({}, "input") == []


def test_pb_utils_is_none_outside_triton_so_bls_imports():
    assert pb_utils is None


@pytest.mark.parametrize(("message", "kind"), [
    ("Exceeds maximum queue size", "queue_full"),
    ("Request timeout expired", "timeout"),
    ("Request for unknown model: 'minilm_onnx' is not found", "not_found"),
    ("Request for unknown model: 'minilm_onnx' version 3 is not found", "not_found"),
    ("Request for unknown model: 'minilm_onnx' version 2 is not at ready state", "not_ready"),
    ("Model 'minilm_onnx' is not ready", "not_ready"),
    ("Stub process 'minilm_onnx_0_0' is not healthy.", "stub_unhealthy"),
    ("Model 'minilm_onnx' has been unloaded", "not_ready"),
    ("Server not ready", "server_stopping"),
])
def test_a_child_that_cannot_serve_now_is_unavailable_of_its_kind(message, kind):
    failure = child_failure("minilm_onnx", message)
    assert (failure.kind, failure.code, failure.unavailable) == (kind, "UNAVAILABLE", True)
    assert str(failure) == f"model 'minilm_onnx' failed: {message}"


@pytest.mark.parametrize("message", [
    "onnxruntime execute failure 2: Non-zero status code returned while running Gather node",
    "unexpected shape for input 'input_ids' for model 'minilm_onnx'",
    "CUDA out of memory",
    "",
])
def test_any_other_child_failure_is_internal(message):
    failure = child_failure("minilm_onnx", message)
    assert failure.code == "INTERNAL" and not failure.unavailable


def test_environment_info_reports_interpreter_numpy_and_search_path():
    info = environment_info()
    assert set(info) == {"python", "executable", "prefix", "numpy_version", "numpy_path",
                         "sys_path"}
    assert info["python"] == sys.version.split()[0]
    assert info["executable"] == sys.executable
    assert info["prefix"] == sys.prefix
    assert info["numpy_version"] == np.__version__
    assert info["numpy_path"] == np.__file__
    assert info["sys_path"] == sys.path[:8]


def test_environment_info_is_json_serialisable_and_shows_numpy_below_2():
    info = json.loads(json.dumps(environment_info()))
    assert int(info["numpy_version"].split(".")[0]) < 2


def test_one_response_per_request_fills_the_missing_and_cuts_the_extra() -> None:
    from python_backends.base import one_per_request

    def missing() -> str:
        return "filled"

    assert one_per_request(["a", None, "c"], 3, missing) == ["a", "filled", "c"]
    assert one_per_request(["a"], 3, missing) == ["a", "filled", "filled"]
    assert one_per_request(["a", "b", "c"], 2, missing) == ["a", "b"]
    assert one_per_request(None, 2, missing) == ["filled", "filled"]

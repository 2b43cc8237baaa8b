"""core.startup: which models a server loads at start, and what health makes of the others."""

from __future__ import annotations

import json

import pytest

from core.paths import DEFAULT_REPOSITORY
from core.startup import (
    SelectionError,
    repository_parameters,
    required_models,
    routed_models,
    select,
    startup_models,
    startup_rule,
)
from core.variant import REVIEWED
from python_backends.health import NEEDED, not_loaded
from server.healthcheck import verdict

FRONT = {"family": "text_embedding", "primary_model": "m_onnx", "fallback_model": "m_int8"}
ENCODER = {"family": "text_embedding", "format": "onnx"}
MODELS = {
    "embed": FRONT,
    "m_onnx": ENCODER,
    "m_int8": {**ENCODER, "format": "int8"},
    "m_torchscript": {**ENCODER, "format": "torchscript"},
    "m_openvino": {**ENCODER, "format": "openvino"},
    "health": {},
    "stub_env": {"some_setting": "1"},
    "diagnostic": {"load_at_start": "false"},
}


def test_the_rule_loads_fronts_their_bls_encoders_and_models_outside_the_families() -> None:
    """The fallback runs in the front's own process, on demand: its model waits."""
    assert startup_rule(MODELS) == ["embed", "health", "m_onnx", "stub_env"]


def test_a_front_that_runs_its_primary_in_process_loads_no_encoder() -> None:
    inside = {**MODELS, "embed": {**FRONT, "primary_in_process": "true"}}
    assert startup_rule(inside) == ["embed", "health", "stub_env"]


def test_a_model_outside_the_families_may_ask_to_load_on_demand() -> None:
    assert "diagnostic" not in startup_rule(MODELS)
    assert "diagnostic" not in routed_models(MODELS)


def test_an_encoder_no_front_routes_to_is_left_to_load_on_demand() -> None:
    routed_to_torchscript = {**MODELS, "embed": {**FRONT, "primary_model": "m_torchscript"}}
    assert "m_onnx" not in startup_rule(routed_to_torchscript)
    assert "m_torchscript" in startup_rule(routed_to_torchscript)
    assert "m_openvino" not in startup_rule(routed_to_torchscript)


def test_a_front_without_a_fallback_loads_its_primary_only() -> None:
    front = {k: v for k, v in FRONT.items() if k != "fallback_model"}
    assert startup_rule({**MODELS, "embed": front}) == ["embed", "health", "m_onnx", "stub_env"]


def test_a_route_to_a_model_the_repository_lacks_is_not_loaded_by_name() -> None:
    """Triton would refuse the whole start for an unknown --load-model; the front's own
    load and the health check report the broken route instead."""
    assert "m_gone" not in startup_rule({**MODELS, "embed": {**FRONT, "primary_model": "m_gone"}})


def test_routed_models_are_the_fronts_and_their_bls_encoders_only() -> None:
    assert routed_models(MODELS) == ["embed", "m_onnx"]
    assert routed_models({"health": {}}) == []


def test_the_shipped_repository_loads_one_process_per_model_and_no_encoder_at_start() -> None:
    """Each front runs its primary in its own process and its lane is an ensemble into it
    (docs/serving.md, "One model, one process"): no encoder model is loaded at start."""
    assert startup_models(DEFAULT_REPOSITORY, REVIEWED) == [
        "digits", "digits_interactive", "efficientnet_lite0",
        "efficientnet_lite0_interactive", "embed", "embed_interactive", "health"]
    # stub_env, every encoder (ONNX, INT8, TorchScript, OpenVINO): on demand


TWO = {**MODELS, "embed_interactive": {**FRONT, "lane_of": "embed"},
       "digits": {"family": "image_classification", "primary_model": "d_onnx",
                  "fallback_model": "d_int8"},
       "d_onnx": {"family": "image_classification", "format": "onnx"}}


@pytest.mark.parametrize("wanted", [["embed"], ["embed_interactive"], ["text_embedding"]])
def test_a_selection_serves_its_fronts_lanes_bls_encoders_and_health(wanted: list[str]) -> None:
    assert startup_rule(select(TWO, wanted)) == [
        "embed", "embed_interactive", "health", "m_onnx", "stub_env"]


def test_a_selection_of_the_shipped_repository_by_family() -> None:
    assert startup_models(DEFAULT_REPOSITORY, REVIEWED, wanted=["image_classification"]) == [
        "digits", "digits_interactive", "efficientnet_lite0",
        "efficientnet_lite0_interactive", "health"]


def test_a_selection_of_something_unknown_names_what_there_is() -> None:
    with pytest.raises(SelectionError, match=r"'embedd' is neither a front nor a family.*"
                       r"fronts: digits, embed, embed_interactive.*families: "
                       r"image_classification, text_embedding"):
        select(TWO, ["embedd"])


def test_health_requires_what_the_loaded_fronts_call_and_their_lanes() -> None:
    assert required_models(TWO, {"embed"}) == {"embed", "embed_interactive", "m_onnx"}
    assert required_models(TWO, {"digits", "d_onnx"}) == {"digits", "d_onnx"}
    assert required_models(TWO, {"m_onnx", "health"}) == set()


def test_repository_parameters_read_every_config() -> None:
    params = repository_parameters(DEFAULT_REPOSITORY, REVIEWED)
    assert params["embed"]["primary_model"] == "minilm_onnx"
    assert params["minilm_torchscript"]["format"] == "torchscript"
    assert "family" not in params["health"]


@pytest.mark.parametrize(("name", "ok", "error"), [("m_torchscript", True, ""),
                                                    ("m_onnx", False, NEEDED),
                                                    ("embed", False, NEEDED)])
def test_health_reports_an_unloaded_model_failed_only_when_a_front_needs_it(
        name: str, ok: bool, error: str) -> None:
    assert not_loaded(name, set(routed_models(MODELS))) == {
        "ok": ok, "loaded": False, "ms": 0.0, "error": error}


def answer(models: dict[str, dict]) -> bytes:
    report = {"healthy": all(m["ok"] for m in models.values()), "models": models}
    return json.dumps({"outputs": [{"name": "REPORT", "data": [json.dumps(report)]}]}).encode()


def test_the_container_healthcheck_passes_listing_the_models_not_loaded() -> None:
    served = {"ok": True, "loaded": True, "ms": 3.0, "error": ""}
    body = answer({"embed": served, "m_onnx": served, "m_torchscript": not_loaded(
        "m_torchscript", {"embed", "m_onnx"})})
    assert verdict(body) == (True, "healthy: embed, m_onnx; not loaded (on demand): "
                                   "m_torchscript")


def test_the_container_healthcheck_fails_on_an_unloaded_routed_encoder() -> None:
    served = {"ok": True, "loaded": True, "ms": 3.0, "error": ""}
    body = answer({"embed": served, "m_onnx": not_loaded("m_onnx", {"embed", "m_onnx"})})
    assert verdict(body) == (False, f"unhealthy: m_onnx: {NEEDED}")

"""The `openvino` format on the real server: it matches the onnxruntime encoders, runs a
dynamic batch as one runtime call, refuses what onnxruntime refuses, and a front routed
to it keeps its ladder, its deep health check and the OpenAI route."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tmr_client import Client

from core.families.configs import encoder_spec, parameters_of
from core.families.spec import PRECISION_PARAMETER
from core.paths import DEFAULT_REPOSITORY
from core.repository import copy_repository
from core.served_by import ServedBy
from core.versions import read_config
from server.admin import AUTO, deep_health, force_level_explicit, wait_for_level
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import (
    add_version,
    assert_serving,
    concurrent_encoder_calls,
    fresh,
    http_post,
    metric_value,
    noisy_copy,
    quiet_counts,
    reloaded_with,
    settled_counts,
    tmr,
)
from tests.integration.test_embed_serving import encoder_output, padded_batch  # noqa: F401
from tests.integration.test_front_door import open_front_door

pytestmark = pytest.mark.timeout(180)

TEXT_PRECISION = encoder_spec(read_config(DEFAULT_REPOSITORY / "minilm_openvino")).precision


def image_logits(grpc_url: str, model: str, pixels: np.ndarray) -> np.ndarray:
    config = read_config(DEFAULT_REPOSITORY / model)
    tensor = grpcclient.InferInput(config.input[0].name, list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels)
    with grpcclient.InferenceServerClient(grpc_url) as client:
        return client.infer(model, [tensor]).as_numpy(config.output[0].name)


def test_the_text_encoder_matches_onnxruntime_at_its_recorded_precision(
        triton, padded_batch) -> None:  # noqa: F811
    ids, mask = padded_batch
    onnx = encoder_output(triton.http_url, "minilm_onnx", "embedding", ids, mask)
    openvino = encoder_output(triton.http_url, "minilm_openvino", "embedding", ids, mask)
    cosines = (onnx * openvino).sum(1) / np.linalg.norm(onnx, axis=1) / np.linalg.norm(
        openvino, axis=1)
    if TEXT_PRECISION == "fp32":
        assert np.abs(onnx - openvino).max() <= 1e-5
    assert cosines.min() >= 0.999 and cosines.mean() >= 0.9999


@pytest.mark.parametrize("base", ["digits", "efficientnet_lite0"])
def test_the_image_encoders_match_onnxruntime(triton, base) -> None:
    config = read_config(DEFAULT_REPOSITORY / f"{base}_onnx")
    shape = [4, *(int(d) for d in config.input[0].dims)]
    pixels = np.random.default_rng(7).normal(0, 1, shape).astype(np.float32)
    onnx = image_logits(triton.grpc_url, f"{base}_onnx", pixels)
    openvino = image_logits(triton.grpc_url, f"{base}_openvino", pixels)
    assert (onnx.argmax(1) == openvino.argmax(1)).all()
    assert np.abs(onnx - openvino).max() <= 1e-3 * max(1.0, float(np.abs(onnx).max()))


def test_a_dynamic_batch_is_one_openvino_call(triton) -> None:
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    before = quiet_counts(triton.http_url, "minilm_openvino")
    calls = metric_value(triton.metrics_url, "tmr_backend_runtime_calls_total",
                         model="minilm_openvino")
    rows = metric_value(triton.metrics_url, "tmr_backend_runtime_rows_total",
                        model="minilm_openvino")
    concurrent_encoder_calls(triton.grpc_url, "minilm_openvino", ids, 32)
    after = settled_counts(triton.http_url, "minilm_openvino", before.inference_count + 32)
    executions = after.execution_count - before.execution_count
    assert after.inference_count - before.inference_count == 32
    assert executions < 32, "the dynamic batcher never batched"
    assert metric_value(triton.metrics_url, "tmr_backend_runtime_calls_total",
                        model="minilm_openvino") - calls == executions
    assert metric_value(triton.metrics_url, "tmr_backend_runtime_rows_total",
                        model="minilm_openvino") - rows == 32


def encoder_body(ids: np.ndarray, mask: np.ndarray, datatype: str = "INT64") -> bytes:
    return json.dumps({"inputs": [
        {"name": "input_ids", "datatype": datatype, "shape": list(ids.shape),
         "data": ids.ravel().tolist()},
        {"name": "attention_mask", "datatype": "INT64", "shape": list(mask.shape),
         "data": mask.ravel().tolist()}]}).encode()


ROW = np.array([[101, 7592, 102]], dtype=np.int64)
BAD_INPUTS = {  # what onnxruntime refuses; OpenVINO alone would answer with numbers
    "token id past the vocabulary": (np.array([[101, 999_999, 102]]), np.ones((1, 3), int)),
    "mask shorter than the ids": (ROW, np.ones((1, 2), int)),
    "more positions than the model has": (np.full((1, 600), 1000), np.ones((1, 600), int)),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_inputs_get_the_errors_of_the_onnxruntime_backend(triton, case) -> None:
    ids, mask = BAD_INPUTS[case]
    answers = {}
    for model in ("minilm_onnx", "minilm_openvino"):
        status, answer = http_post(triton.http_url, f"/v2/models/{model}/infer",
                                   encoder_body(ids.astype(np.int64), mask.astype(np.int64)))
        answers[model] = (status, json.loads(answer)["error"])
    (onnx_status, onnx_error), (ov_status, ov_error) = answers.values()
    assert onnx_status == ov_status and onnx_status >= 400, answers
    assert onnx_error.startswith("RunnerError: ") and ov_error.startswith("RunnerError: ")
    assert ("999999" in ov_error or "positions" in ov_error or "differ" in ov_error), ov_error
    assert_serving(triton.http_url)


def test_a_wrong_dtype_is_refused_by_triton_alike(triton) -> None:
    for model in ("minilm_onnx", "minilm_openvino"):
        status, answer = http_post(triton.http_url, f"/v2/models/{model}/infer",
                                   encoder_body(ROW.astype(np.int32), ROW, "INT32"))
        assert status == 400 and "data-type is 'INT32'" in json.loads(answer)["error"]


@pytest.fixture
def routed_to_openvino(triton) -> Iterator[None]:
    """`embed` reloaded (in the server only) with minilm_openvino as its primary."""
    with reloaded_with(triton, "embed", {"primary_model": "minilm_openvino"}):
        yield


def test_a_front_routed_to_openvino_keeps_ladder_health_and_the_openai_route(
        triton, routed_to_openvino) -> None:
    texts = fresh("a front routed to OpenVINO", "数学は美しい。", "emoji 🚀 too")
    with Client(triton.grpc_url, protocol="grpc") as client:
        answer = client.embed_with_info(texts)
    served = {ServedBy.parse(s).model for s in answer.served_by}
    assert served == {"minilm_openvino"}
    assert all(ServedBy.parse(s).precision == TEXT_PRECISION for s in answer.served_by)
    assert np.allclose(np.linalg.norm(answer.embeddings, axis=1), 1.0, atol=1e-3)

    force_level_explicit(triton.http_url, 2)  # level 2: the INT8 fallback
    try:
        assert wait_for_level(triton.http_url, 2).startswith("minilm_int8:")
    finally:
        force_level_explicit(triton.http_url, AUTO)
    assert wait_for_level(triton.http_url, AUTO).startswith("minilm_openvino:")

    checks = deep_health(triton.http_url, ["embed", "minilm_openvino", "minilm_int8"])
    assert all(c.ok for c in checks), checks

    door = open_front_door(triton)
    try:
        body = json.dumps({"model": "minilm", "input": texts}).encode()
        status, raw = http_post(door.http_url, "/v1/embeddings", body,
                                {"Authorization": f"Bearer {door.api_keys['alice']}"})
        assert status == 200, raw
        vectors = np.array([d["embedding"] for d in json.loads(raw)["data"]])
        assert (vectors * answer.embeddings).sum(1).min() >= 0.999
    finally:
        assert door.close() == 0


def test_the_precision_is_recorded_in_the_config_and_the_provenance() -> None:
    for base in ("minilm", "digits", "efficientnet_lite0"):
        folder = DEFAULT_REPOSITORY / f"{base}_openvino"
        params = parameters_of(read_config(folder))
        provenance = json.loads((folder / "1" / "provenance.json").read_text())
        checks = provenance["checks"]
        assert checks["precision"] == params[PRECISION_PARAMETER]
        assert ("HINT_BF16" in params) == (params[PRECISION_PARAMETER] == "bf16")
        assert checks["cpu"]["model"] and "precision" in checks["cpu"]


@pytest.mark.timeout(600)  # the gate twice (about 40 s each) and one light server
def test_the_release_commands_handle_the_format(tmp_path) -> None:
    """gate (a good and a degraded candidate), promote, rollback and versions on a copy
    holding only minilm_openvino."""
    model = "minilm_openvino"
    repo = copy_repository([DEFAULT_REPOSITORY], tmp_path / "repository")
    for folder in repo.iterdir():
        if folder.name != model:
            shutil.rmtree(folder)
    artifact = (repo / model / "1" / "model.onnx").resolve()
    add_version(repo / model, 2, artifact)
    add_version(repo / model, 3, noisy_copy(artifact, 0.5))
    gated = tmr("gate", model, "2", "--repository", str(repo))
    assert gated.returncode == 0, gated.stdout + gated.stderr
    report = json.loads((repo / model / "2" / "gate.json").read_text())
    assert report["passed"] and report["quality"]["reference"]["min_cosine"] >= 0.999
    server = start_server(repo, tmp_path / "tritonserver.log")
    try:
        args = ("--url", server.http_url, "--repository", str(repo))
        assert tmr("promote", model, "2", "--no-gate", *args).returncode == 0
        assert served_version_of(server.http_url, model) == "2"
        refused = tmr("promote", model, "3", *args)  # gated first: a degraded copy
        assert refused.returncode != 0 and "quality vs reference" in refused.stdout
        assert served_version_of(server.http_url, model) == "2"
        assert tmr("rollback", model, *args).returncode == 0
        assert served_version_of(server.http_url, model) == "1"
        versions = tmr("versions", model, *args)
        assert versions.returncode == 0 and f"{model}: selected [1]" in versions.stdout
    finally:
        stop_cleanly(server)


def served_version_of(http_url: str, model: str) -> str:
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    status, answer = http_post(http_url, f"/v2/models/{model}/infer",
                               encoder_body(ids, np.ones_like(ids)))
    assert status == 200, answer
    return json.loads(answer)["model_version"]

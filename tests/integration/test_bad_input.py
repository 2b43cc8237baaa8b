"""Careless or hostile input gets a precise error and the right status; the server stays healthy."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tmr_client import NO_RETRY, Client, InvalidInputError, ModelNotFoundError

from tests.integration.helpers import assert_serving, http_post


def text_body(data: list, shape: list[int] | None = None, datatype: str = "BYTES",
              **parameters: object) -> bytes:
    shape = shape or [len(data), 1]
    body: dict = {"inputs": [{"name": "TEXT", "datatype": datatype, "shape": shape,
                              "data": data}]}
    if parameters:
        body["parameters"] = parameters
    return json.dumps(body).encode()


HTTP_CASES = [
    ("empty text", "/v2/models/embed/infer", text_body(["   "]), 400, r"TEXT\[0\] is empty"),
    ("text over the token limit", "/v2/models/embed/infer", text_body(["word " * 300]), 400,
     r"TEXT\[0\] is 302 tokens, over the limit of 256 tokens \(overlength_policy=reject; "),
    ("text over the byte limit", "/v2/models/embed/infer", text_body(["x" * 140000]), 400,
     r"TEXT\[0\] is 140000 bytes, over the limit of 131072 bytes"),
    ("wrong datatype", "/v2/models/embed/infer", text_body([1], datatype="INT32"), 400,
     r"data-type is 'INT32', but model 'embed' expects 'BYTES'"),
    ("wrong shape", "/v2/models/embed/infer", text_body(["a", "b"], shape=[1, 2]), 400,
     r"unexpected shape for input 'TEXT' for model 'embed'\. Expected \[-1,1\], got \[1,2\]"),
    ("batch over max_batch_size", "/v2/models/embed/infer", text_body(["a"] * 65), 400,
     r"batch-size must be <= 64 for 'embed'"),
    ("unknown model", "/v2/models/no_such_model/infer", text_body(["a"]), 404,
     r"unknown model: 'no_such_model' is not found"),
    ("unknown version", "/v2/models/embed/versions/9/infer", text_body(["a"]), 404,
     r"unknown model: 'embed' version 9 is not found"),
    ("unknown prompt", "/v2/models/embed/infer", text_body(["a"], prompt_name="query"), 400,
     r"parameter 'prompt_name' names no prompt of model 'embed': got \"query\"; it has no "
     r"prompts"),
    ("prompt not a string", "/v2/models/embed/infer", text_body(["a"], prompt_name=3), 400,
     r"names no prompt of model 'embed': got 3"),
    ("undeclared dimensions", "/v2/models/embed/infer", text_body(["a"], dimensions=128), 400,
     r"parameter 'dimensions' must be one of model 'embed''s sizes: 384 \(it declares no "
     r"Matryoshka sizes"),
    ("dimensions not a number", "/v2/models/embed/infer", text_body(["a"], dimensions="384"),
     400, r"got \"384\""),
    ("count_only not a bool", "/v2/models/embed/infer", text_body(["a"], count_only="yes"), 400,
     r"parameter 'count_only' must be true or false"),
    ("empty text counted", "/v2/models/embed/infer", text_body([" "], count_only=True), 400,
     r"TEXT\[0\] is empty"),
    ("huge text counted", "/v2/models/embed/infer",
     text_body(["x" * 140000], count_only=True), 400, r"over the limit of 131072 bytes"),
    # Triton 2.51 answers a body it cannot parse with 500, not 400 (DESIGN.md).
    ("malformed JSON", "/v2/models/embed/infer", b'{"inputs": [', 500,
     r"failed to parse the request JSON buffer"),
]


@pytest.mark.parametrize(("case", "path", "body", "status", "message"), HTTP_CASES,
                         ids=[c[0] for c in HTTP_CASES])
def test_http_bad_input_gets_precise_error_and_server_stays_healthy(
        triton, case, path, body, status, message) -> None:
    got_status, answer = http_post(triton.http_url, path, body)
    assert got_status == status, answer

    assert re.search(message, json.loads(answer)["error"]), answer
    assert_serving(triton.http_url)


def binary_request(declared_size: int, payload: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                     "parameters": {"binary_data_size": declared_size}}]}).encode()
    return header + payload, {"Inference-Header-Content-Length": str(len(header))}


def test_binary_payload_shorter_than_declared_size_is_rejected(triton) -> None:
    body, headers = binary_request(100, b"\x05\x00\x00\x00hello")
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer", body, headers)
    assert status == 400
    assert "unexpected size for input 'TEXT'" in json.loads(answer)["error"]
    assert_serving(triton.http_url)


def test_binary_string_length_prefix_past_the_payload_is_rejected(triton) -> None:
    body, headers = binary_request(9, b"\x50\x00\x00\x00hello")
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer", body, headers)
    assert status == 400
    assert "incomplete string data for inference input 'TEXT'" in json.loads(answer)["error"]
    assert_serving(triton.http_url)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_invalid_utf8_is_invalid_input_naming_the_text(triton, protocol) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    with Client(url, protocol=protocol, retry=NO_RETRY) as client, \
            pytest.raises(InvalidInputError, match=r"TEXT\[1\] is not valid UTF-8: invalid start"):
        client.embed(["fine", b"\xff\xfebad"])  # type: ignore[list-item]
    assert_serving(triton.http_url)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unknown_model_and_version_are_model_not_found(triton, protocol) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    with Client(url, protocol=protocol, model="no_such_model", retry=NO_RETRY) as client, \
            pytest.raises(ModelNotFoundError, match="'no_such_model' is not found"):
        client.model_config()
    with Client(url, protocol=protocol, retry=NO_RETRY) as client, \
            pytest.raises(ModelNotFoundError, match="'embed' version 9 is not found"):
        client.embed(["x"], model_version=9)


def test_grpc_wrong_dtype_and_shape_are_invalid_argument(triton) -> None:
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    for array, datatype, message in [
        (np.array([[1]], dtype=np.int32), "INT32", "data-type is 'INT32'"),
        (np.array([[b"a", b"b"]], dtype=np.object_), "BYTES", "unexpected shape for input"),
    ]:
        tensor = grpcclient.InferInput("TEXT", list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        with pytest.raises(Exception, match=message) as info:
            client.infer("embed", [tensor])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    client.close()
    assert_serving(triton.http_url)


def test_one_bad_request_in_a_batch_does_not_fail_its_neighbours(triton) -> None:
    import asyncio

    from tmr_client import AsyncClient

    async def run() -> list:
        async with AsyncClient(triton.grpc_url, protocol="grpc", retry=NO_RETRY) as client:
            calls = [client.embed([f"good text number {i}"]) for i in range(12)]
            calls.insert(6, client.embed([""]))
            return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(run())
    assert isinstance(results[6], InvalidInputError)
    good = [r for i, r in enumerate(results) if i != 6]
    assert all(isinstance(r, np.ndarray) and r.shape == (1, 384) for r in good)


def test_client_refuses_empty_list_and_bare_string_before_sending(triton) -> None:
    with Client(triton.http_url) as client:
        with pytest.raises(InvalidInputError, match="texts is empty"):
            client.embed([])
        with pytest.raises(InvalidInputError, match="not a single string"):
            client.embed("a string")  # type: ignore[arg-type]


SDK_BAD_TEXTS = [(["ok", 5], r"texts\[1\] is int"), (["ok", None], r"texts\[1\] is None"),
                 ([["nested"]], r"texts\[0\] is list"), (None, "not None"),
                 (np.array([1.0, 2.0]), r"texts\[0\] is numpy.float64")]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sdk_refuses_non_text_items_before_anything_is_sent(triton, protocol) -> None:
    import asyncio

    from tmr_client import AsyncClient

    from tests.integration.helpers import model_counts, quiet_counts

    url = triton.http_url if protocol == "http" else triton.grpc_url
    before = quiet_counts(triton.http_url, "embed").inference_count
    with Client(url, protocol=protocol, retry=NO_RETRY) as client:
        for texts, message in SDK_BAD_TEXTS:
            with pytest.raises(InvalidInputError, match=message):
                client.embed(texts)  # type: ignore[arg-type]

    async def run_async() -> None:
        async with AsyncClient(url, protocol=protocol, retry=NO_RETRY) as client:
            for texts, message in SDK_BAD_TEXTS:
                with pytest.raises(InvalidInputError, match=message):
                    await client.embed(texts)  # type: ignore[arg-type]

    asyncio.run(run_async())
    assert model_counts(triton.http_url, "embed").inference_count == before
    with Client(url, protocol=protocol) as client:
        assert client.embed(t for t in ("a generator", "of texts")).shape == (2, 384)


def test_a_count_only_request_runs_no_encoder_and_counts_each_text(triton) -> None:
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer", text_body(
        ["short", "word " * 300], count_only=True))
    assert status == 200, answer
    outputs = {o["name"]: o for o in json.loads(answer)["outputs"]}
    assert outputs["EMBEDDING"]["shape"] == [2, 0]
    assert outputs["TOKENS"]["data"] == [3, 302]
    assert outputs["TRUNCATED_TOKENS"]["data"] == [0, 46]
    assert outputs["SERVED_BY"]["data"] == ["tokenizer", "tokenizer"]

"""Hostile input at scale: random KServe v2 requests over HTTP and gRPC never crash the server.

Every generated request gets a 2xx or a 4xx (INVALID_ARGUMENT / NOT_FOUND over gRPC), never
a 5xx or a hang, and the server still serves real traffic afterwards.
"""

from __future__ import annotations

import json

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.integration.helpers import assert_serving, http_post

DATATYPES = ["BYTES", "INT32", "INT64", "FP32", "FP16", "BOOL", "UINT8", "NOPE"]
NAMES = ["TEXT", "text", "EMBEDDING", "", "input_ids", "X" * 300]
MODELS = ["embed", "minilm_onnx", "missing"]
# Triton 2.51 answers some malformed JSON with 500 instead of 400 (DESIGN.md), e.g.
# a BYTES tensor whose data holds a number: "Unable to parse JSON bytes array: attempt to
# access JSON non-string as string". Those are client garbage, documented in docs/operations.md;
# any other 500 fails the test. The front door (issue 6) maps them to 400.
JSON_PARSE_500 = ("Unable to parse", "failed to parse the request JSON buffer")


def client_garbage_500(status: int, answer: bytes) -> bool:
    return status == 500 and json.loads(answer)["error"].startswith(JSON_PARSE_500)


FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

shapes = st.lists(st.integers(min_value=-2, max_value=70), min_size=0, max_size=4)
scalars = st.one_of(st.text(max_size=40), st.integers(-2**40, 2**40),
                    st.floats(allow_nan=False), st.booleans(), st.none())
json_inputs = st.fixed_dictionaries({
    "name": st.sampled_from(NAMES),
    "datatype": st.sampled_from(DATATYPES),
    "shape": shapes,
    "data": st.lists(scalars, max_size=8),
})


@FUZZ
@given(model=st.sampled_from(MODELS), inputs=st.lists(json_inputs, max_size=3))
def test_random_json_requests_get_a_client_error_or_an_answer(triton, model, inputs) -> None:
    status, answer = http_post(triton.http_url, f"/v2/models/{model}/infer",
                               json.dumps({"inputs": inputs}).encode())
    assert status in (200, 400, 404) or client_garbage_500(status, answer), (status, answer[:300])


text_parameters = st.dictionaries(
    st.sampled_from(["prompt_name", "dimensions", "count_only", "truncate", "chunk_overlap",
                     "top_k", "rollout_key"]), scalars, max_size=4)


@FUZZ
@given(parameters=text_parameters, texts=st.lists(st.text(max_size=30), min_size=1,
                                                  max_size=4))
def test_random_request_parameters_get_a_400_or_an_answer(triton, parameters, texts) -> None:
    """Whatever a client puts in the text front's parameters (prompt_name, dimensions,
    count_only...), the answer is a 400 naming it or a served request."""
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1],
                        "data": texts}], "parameters": parameters}
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer",
                               json.dumps(body).encode())
    assert status in (200, 400) or client_garbage_500(status, answer), (status, answer[:300])


@FUZZ
@given(declared=st.integers(min_value=0, max_value=2**40), payload=st.binary(max_size=64),
       shape=shapes)
def test_binary_payloads_with_lying_sizes_are_refused(triton, declared, payload, shape) -> None:
    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": shape,
                                     "parameters": {"binary_data_size": declared}}]}).encode()
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer", header + payload,
                               {"Inference-Header-Content-Length": str(len(header))})
    assert status in (200, 400) or client_garbage_500(status, answer), (status, answer[:300])


grpc_tensors = st.builds(
    lambda name, datatype, shape: service_pb2.ModelInferRequest.InferInputTensor(
        name=name, datatype=datatype, shape=[abs(d) for d in shape]),
    st.sampled_from(NAMES), st.sampled_from(DATATYPES), shapes)


@FUZZ
@given(model=st.sampled_from(MODELS), tensors=st.lists(grpc_tensors, max_size=3),
       raw=st.lists(st.binary(max_size=64), max_size=3))
def test_random_grpc_requests_get_invalid_argument_or_an_answer(triton, model, tensors,
                                                                raw) -> None:
    request = service_pb2.ModelInferRequest(model_name=model, inputs=tensors,
                                            raw_input_contents=raw)
    with grpc.insecure_channel(triton.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ModelInfer(request, timeout=30)
        except grpc.RpcError as err:
            assert err.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.NOT_FOUND), (err.code(), err.details())


def test_server_still_serves_after_the_fuzzing(triton) -> None:
    assert_serving(triton.http_url)

"""The SDK's pure parts: the request tensor (tmr_client.shaping), chunking, per-call
options, the deadline, and the model info read from a config in either wire form."""

from __future__ import annotations

import numpy as np
import pytest
from tmr_client.calls import Call
from tmr_client.chunking import ENVELOPE_BYTES, byte_chunks, chunks
from tmr_client.deadlines import Deadline
from tmr_client.endpoint import default_url
from tmr_client.errors import InvalidInputError, RequestTooLargeError
from tmr_client.limits import HTTP_MAX_BODY_BYTES
from tmr_client.model_info import max_batch_size
from tmr_client.options import CallOptions
from tmr_client.shaping import text_tensor
from tritonclient.grpc import model_config_pb2, service_pb2


def test_text_tensor_is_an_n_by_1_object_array_of_utf8_bytes():
    tensor = text_tensor(["héllo", "world", "日本語"])
    assert tensor.shape == (3, 1)
    assert tensor.dtype == np.object_
    assert tensor[:, 0].tolist() == ["héllo".encode(), b"world", "日本語".encode()]


def test_text_tensor_passes_bytes_through():
    assert text_tensor([b"raw", "text"])[:, 0].tolist() == [b"raw", b"text"]


def test_text_tensor_of_a_tuple_has_one_row_per_text():
    assert text_tensor(("a",)).shape == (1, 1)


def test_text_tensor_rejects_an_empty_list():
    with pytest.raises(InvalidInputError, match="texts is empty; send at least one text"):
        text_tensor([])


@pytest.mark.parametrize("bare", ["hello", b"hello"])
def test_text_tensor_rejects_a_bare_string(bare):
    with pytest.raises(InvalidInputError, match="not a single string"):
        text_tensor(bare)


def test_chunks_cover_every_row_in_slices_of_at_most_size():
    assert list(chunks(10, 4)) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert list(chunks(8, 4)) == [slice(0, 4), slice(4, 8)]
    assert list(chunks(3, 64)) == [slice(0, 3)]
    assert list(chunks(0, 4)) == []


def test_call_options_send_only_tritons_standard_priority():
    assert CallOptions(priority=2).infer_kwargs("r") == {"request_id": "r", "priority": 2}


def test_call_options_infer_kwargs_converts_timeout_to_microseconds_and_version_to_str():
    kwargs = CallOptions(priority=1, timeout_ms=250, model_version=2).infer_kwargs("r1")
    assert kwargs == {"request_id": "r1", "priority": 1, "timeout": 250_000,
                      "model_version": "2"}
    assert isinstance(kwargs["timeout"], int)


def test_call_options_infer_kwargs_omits_unset_options():
    assert CallOptions().infer_kwargs("r2") == {"request_id": "r2"}
    assert CallOptions(timeout_ms=1.5).infer_kwargs("r3") == {"request_id": "r3",
                                                              "timeout": 1500}


def test_call_options_deadline_comes_from_timeout_not_from_the_queue_timeout():
    assert Deadline.after(CallOptions().timeout) == Deadline()
    assert Deadline.after(CallOptions(timeout_ms=1000).timeout) == Deadline()  # Triton's
    assert Deadline.after(CallOptions(timeout=2.5).timeout, now=10.0) == Deadline(2.5, 12.5)


@pytest.mark.parametrize("bad", [0, -1, "1", True, float("nan")])
def test_call_options_refuse_a_timeout_that_is_not_positive_seconds(bad):
    with pytest.raises(InvalidInputError, match="timeout must be a number of seconds > 0"):
        CallOptions(timeout=bad)


def test_default_url_uses_the_protocols_port():
    assert default_url("http") == "localhost:8000"
    assert default_url("grpc", "triton") == "triton:8001"


def test_max_batch_size_reads_an_http_json_config():
    assert max_batch_size({"name": "embed", "max_batch_size": 64}) == 64


def test_max_batch_size_reads_a_grpc_json_config_wrapped_in_config():
    assert max_batch_size({"config": {"name": "embed", "max_batch_size": 32}}) == 32


def test_max_batch_size_reads_a_grpc_model_config_response():
    response = service_pb2.ModelConfigResponse(
        config=model_config_pb2.ModelConfig(name="embed", max_batch_size=64))
    assert max_batch_size(response) == 64
    assert max_batch_size(response.config) == 64


def test_max_batch_size_of_a_non_batching_model_is_one():
    assert max_batch_size({"name": "stub_env", "max_batch_size": 0}) == 1
    assert max_batch_size({"name": "stub_env"}) == 1
    response = service_pb2.ModelConfigResponse(config=model_config_pb2.ModelConfig())
    assert max_batch_size(response) == 1


@pytest.mark.parametrize(("texts", "message"), [
    (["ok", 5], r"texts\[1\] is int, not str or bytes"),
    (["ok", None], r"texts\[1\] is None, not str or bytes"),
    ([["nested"]], r"texts\[0\] is list, not str or bytes"),
    (np.array([1.5, 2.5]), r"texts\[0\] is numpy.float64, not str or bytes"),
    (np.array([["a"], ["b"]]), r"texts\[0\] is numpy.ndarray, not str or bytes"),
    (None, "texts must be a sequence of strings, not None"),
    (5, "texts must be a sequence of strings, not int"),
    ({"text": "a"}, "texts must be a sequence of strings, not dict"),
])
def test_text_tensor_refuses_a_non_text_item_naming_its_index_and_type(texts, message):
    with pytest.raises(InvalidInputError, match=message):
        text_tensor(texts)


def test_text_tensor_takes_a_generator_and_numpy_arrays_of_strings():
    assert text_tensor(t for t in ("a", "b")).shape == (2, 1)
    assert text_tensor(np.array(["a", "bé"]))[:, 0].tolist() == [b"a", "bé".encode()]
    assert text_tensor(np.array([b"raw"]))[:, 0].tolist() == [b"raw"]


@pytest.mark.parametrize(("options", "message"), [
    ({"priority": -1}, "priority must be an integer >= 0"),
    ({"priority": "1"}, "priority must be an integer >= 0"),
    ({"priority": True}, "priority must be an integer >= 0"),
    ({"timeout_ms": 0}, "timeout_ms must be a number > 0"),
    ({"timeout_ms": "5"}, "timeout_ms must be a number > 0"),
    ({"model_version": 0}, "model_version must be an integer >= 1"),
    ({"model_version": 1.0}, "model_version must be an integer >= 1"),
])
def test_call_options_refuse_what_triton_would_misread(options, message):
    with pytest.raises(InvalidInputError, match=message):
        CallOptions(**options)


def test_a_bulk_call_keeps_one_chunk_in_flight_per_instance_of_the_model():
    from tmr_client.model_info import DEFAULT_IN_FLIGHT, in_flight_limit, instance_count

    http = {"instance_group": [{"count": 3, "kind": "KIND_CPU"}, {"count": 1}]}
    grpc = model_config_pb2.ModelConfig()
    grpc.instance_group.add(count=2)
    assert instance_count(http) == 4 and instance_count(grpc) == 2
    assert instance_count({}) is None
    assert in_flight_limit(4) == 4 and in_flight_limit(None) == DEFAULT_IN_FLIGHT


def test_a_bulk_call_sends_requests_of_the_models_preferred_batch_over_both_protocols():
    from tmr_client.model_info import Access, request_rows

    http = {"max_batch_size": 64, "dynamic_batching": {"preferred_batch_size": [8],
                                                       "priority_levels": 2}}
    grpc = model_config_pb2.ModelConfig(max_batch_size=64)
    grpc.dynamic_batching.preferred_batch_size.append(8)
    assert request_rows(http) == request_rows(grpc) == 8
    assert request_rows({"max_batch_size": 16}) == 16  # no preferred batch: max_batch_size
    info = Access().info(http)
    assert (info.max_batch, info.request_rows) == (64, 8)
    assert Access(max_batch_size=4).info(http).request_rows == 4  # the caller's own limit


def test_byte_chunks_cut_by_rows_when_rows_are_small():
    assert byte_chunks([10] * 10, 4, HTTP_MAX_BODY_BYTES) == [
        slice(0, 4), slice(4, 8), slice(8, 10)]


def test_byte_chunks_cut_by_bytes_before_the_row_limit():
    mb = 1_000_000
    assert byte_chunks([mb, mb, mb, mb, mb], 16, HTTP_MAX_BODY_BYTES) == [
        slice(0, 3), slice(3, 5)]  # 3 x (1 MB + 4) fits 4 MB less the envelope; 4 do not


def test_byte_chunks_refuse_a_row_that_cannot_fit_alone_naming_it_and_grpc():
    budget = HTTP_MAX_BODY_BYTES - ENVELOPE_BYTES
    with pytest.raises(RequestTooLargeError, match=(
            rf"IMAGE\[1\] is {budget} bytes; one http request holds at most {budget} bytes "
            r"of data \(gRPC takes larger requests\)")):
        byte_chunks([10, budget, 10], 16, HTTP_MAX_BODY_BYTES, "http", "IMAGE")


def test_byte_chunks_keep_every_row_once_in_order():
    sizes = [5, 3_000_000, 7, 2_000_000, 2_000_000, 1, 3_900_000]
    slices = byte_chunks(sizes, 3, 4_000_000 + ENVELOPE_BYTES)
    assert [i for s in slices for i in range(len(sizes))[s]] == list(range(len(sizes)))
    assert all(sum(sizes[s]) + 4 * len(sizes[s]) <= 4_000_000 for s in slices)


def test_a_rollout_key_travels_as_a_request_parameter_beside_the_call_s_own():
    """`rollout_key` keeps a caller's rows on one version during a rollout; a classify
    call's top_k parameter travels with it."""
    options = CallOptions(rollout_key="user-42")
    assert options.infer_kwargs("r")["parameters"] == {"rollout_key": "user-42"}
    call = Call("m", np.array([[b"x"]], dtype=np.object_), "IMAGE", ("LABELS",),
                CallOptions(rollout_key="user-42", top_k=3))
    assert call.infer_kwargs("r")["parameters"] == {"rollout_key": "user-42", "top_k": 3}

"""tmr_client.errors: Triton's HTTP and gRPC answers mapped to typed, retriable-or-not errors.

The status/message pairs below are what Triton 2.51 and tritonclient 2.51 really send.
"""

from __future__ import annotations

import pytest
from tmr_client.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    QueueFullError,
    ServerError,
    ServerUnreachableError,
    TritonClientError,
    UnavailableError,
    classify,
    from_exception,
)
from tritonclient.utils import InferenceServerException

OBSERVED = [
    ("400", "TEXT[0] is empty; send at least one non-space character", InvalidInputError),
    ("404", "Request for unknown model: 'nope' is not found", ModelNotFoundError),
    ("StatusCode.NOT_FOUND", "Request for unknown model: 'embed' version 9 is not found",
     ModelNotFoundError),
    ("StatusCode.UNAVAILABLE", "Exceeds maximum queue size", QueueFullError),
    ("503", "Exceeds maximum queue size", QueueFullError),
    ("StatusCode.UNAVAILABLE", "Request timeout expired", DeadlineExceededError),
    ("503", "Request timeout expired", DeadlineExceededError),
    ("500", "failed to parse the request JSON buffer: The document is empty. at 0", ServerError),
    ("StatusCode.UNAVAILABLE", "failed to connect to all addresses; last error: UNKNOWN: "
     "ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused",
     ServerUnreachableError),
]


@pytest.mark.parametrize(("status", "message", "expected"), OBSERVED)
def test_classify_maps_each_observed_triton_answer_to_its_error_class(status, message, expected):
    assert classify(status, message) is expected


def test_classify_lets_the_message_win_over_the_status():
    assert classify("400", "Request for unknown model: 'x' is not found") is ModelNotFoundError


def test_classify_falls_back_to_the_status_then_to_server_error():
    assert classify("StatusCode.INVALID_ARGUMENT", "bad dims") is InvalidInputError
    assert classify("503", "Server is shutting down") is UnavailableError
    assert classify("StatusCode.DEADLINE_EXCEEDED", "") is DeadlineExceededError
    assert classify(None, "something odd") is ServerError
    assert classify("418", "teapot") is ServerError


def test_classify_recognises_a_model_that_is_not_ready():
    assert classify("400", "Request for model 'embed' is not ready") is ModelNotReadyError


@pytest.mark.parametrize(("cls", "retriable"), [
    (InvalidInputError, False),
    (ModelNotFoundError, False),
    (ModelNotReadyError, True),
    (UnavailableError, True),
    (QueueFullError, True),
    (DeadlineExceededError, False),
    (ServerUnreachableError, True),
    (ServerError, False),
])
def test_each_error_class_declares_whether_a_retry_may_help(cls, retriable):
    assert issubclass(cls, TritonClientError)
    assert cls.retriable is retriable


def test_queue_full_is_a_kind_of_unavailable():
    assert issubclass(QueueFullError, UnavailableError)


def test_client_error_keeps_status_and_message_and_shows_both():
    err = InvalidInputError("TEXT[0] is empty", "400")
    assert (err.status, err.message, str(err)) == ("400", "TEXT[0] is empty",
                                                   "[400] TEXT[0] is empty")
    assert str(ServerError("boom")) == "boom"


def test_from_exception_wraps_an_inference_server_exception_by_status_and_message():
    exc = InferenceServerException(msg="Exceeds maximum queue size", status="503")
    err = from_exception(exc)
    assert isinstance(err, QueueFullError)
    assert (err.status, err.message) == ("503", "Exceeds maximum queue size")
    assert err.retriable


def test_from_exception_classifies_an_inference_server_exception_without_status():
    err = from_exception(InferenceServerException(msg="TEXT[0] is empty; send at least one"))
    assert type(err) is ServerError
    assert err.status is None


def test_from_exception_turns_a_refused_connection_into_server_unreachable():
    err = from_exception(ConnectionRefusedError(111, "Connection refused"))
    assert isinstance(err, ServerUnreachableError)
    assert err.message.startswith("ConnectionRefusedError: ")
    assert "Connection refused" in err.message


def test_from_exception_turns_any_other_exception_into_server_error_naming_its_type():
    err = from_exception(KeyError("model_name"))
    assert type(err) is ServerError
    assert err.message == "KeyError: 'model_name'"
    assert not err.retriable


def test_from_exception_returns_a_typed_error_unchanged():
    err = ModelNotFoundError("gone", "404")
    assert from_exception(err) is err


def test_a_grpc_call_cancelled_by_a_stopping_server_is_unreachable_and_retriable() -> None:
    from tmr_client.errors import ServerUnreachableError, classify

    cls = classify("StatusCode.CANCELLED", "CANCELLED")
    assert cls is ServerUnreachableError and cls.retriable

"""tmr_client: where a client connects, the keys it sends, Retry-After, and input errors."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest
from tmr_client import Client, InvalidInputError, RequestTooLargeError, TritonClientError
from tmr_client.auth import ADMIN_KEY_ENV
from tmr_client.endpoint import URL_ENV, Endpoint, endpoint
from tmr_client.errors import QueueFullError, RateLimitedError, ServerUnreachableError
from tmr_client.retry import RetryPolicy, next_delay
from tmr_client.transport import parse_retry_after

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(("url", "protocol", "expected"), [
    ("localhost:8000", None, Endpoint("localhost:8000", "http")),
    ("localhost:8001", None, Endpoint("localhost:8001", "grpc")),  # gRPC's port
    ("triton:9000", None, Endpoint("triton:9000", "http")),  # any other port: HTTP
    ("localhost:8001", "http", Endpoint("localhost:8001", "http")),  # explicit wins
    ("localhost:8000", "grpc", Endpoint("localhost:8000", "grpc")),
    ("http://localhost:8000", None, Endpoint("localhost:8000", "http")),
    ("http://localhost:8000/", None, Endpoint("localhost:8000", "http")),
    ("HTTP://localhost:8001", None, Endpoint("localhost:8001", "http")),  # scheme over port
    ("https://triton.example.com", None, Endpoint("triton.example.com:443", "http", True)),
    ("https://triton.example.com/v/", None, Endpoint("triton.example.com:443/v", "http", True)),
    ("http://triton", None, Endpoint("triton:80", "http")),
    ("grpc://triton", None, Endpoint("triton:8001", "grpc")),
    ("grpcs://triton:9443", None, Endpoint("triton:9443", "grpc", True)),
    ("triton", None, Endpoint("triton:8000", "http")),
    ("triton", "grpc", Endpoint("triton:8001", "grpc")),
    ("[::1]:8001", None, Endpoint("[::1]:8001", "grpc")),
])
def test_a_url_names_its_address_protocol_and_tls(url, protocol, expected):
    assert endpoint(url, protocol, NO_ENV) == expected


def test_without_a_url_the_client_reads_tmr_url_else_the_default():
    assert endpoint(None, None, {URL_ENV: "http://elsewhere:9000"}) == \
        Endpoint("elsewhere:9000", "http")
    assert endpoint(None, None, {URL_ENV: "elsewhere:8001"}).protocol == "grpc"
    assert endpoint(None, None, NO_ENV) == Endpoint("localhost:8000", "http")
    assert endpoint(None, "grpc", NO_ENV) == Endpoint("localhost:8001", "grpc")


@pytest.mark.parametrize(("url", "protocol", "message"), [
    ("ftp://host:21", None, "has the scheme 'ftp'; expected one of http, https, grpc"),
    ("localhost:port", None, "has a bad port"),
    ("http://", None, "is not a server address"),
    ("grpc://host:8001/prefix", None, "a gRPC server address has none"),
    ("localhost:8000", "tcp", "unknown protocol 'tcp'"),
])
def test_a_bad_url_or_protocol_is_an_input_error_naming_it(url, protocol, message):
    with pytest.raises(InvalidInputError, match=message):
        endpoint(url, protocol, NO_ENV)


def test_the_client_takes_a_url_with_a_scheme_without_connecting(monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    with Client("http://localhost:8000") as c:
        assert (c.url, c.protocol) == ("localhost:8000", "http")
    with Client("localhost:8001") as c:
        assert c.protocol == "grpc"
    monkeypatch.setenv(URL_ENV, "https://triton.example.com")
    with Client() as c:
        assert (c.url, c.endpoint.ssl) == ("triton.example.com:443", True)


def test_a_bad_url_raises_one_typed_error_and_no_noise_from_del(recwarn):
    with pytest.raises(InvalidInputError, match="ftp"):
        Client("ftp://localhost:8000")
    assert not recwarn.list


def test_the_client_sends_no_admin_key_it_was_not_given(monkeypatch):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    with Client("localhost:8000") as c:
        assert c._headers(admin=True) == {}
    with Client("localhost:8000", admin_key="given") as c:
        assert c._headers(admin=True) == {"admin-key": "given"}
    monkeypatch.setenv(ADMIN_KEY_ENV, "from-env")
    with Client("localhost:8001") as c:
        assert c._headers(admin=True) == {"triton-grpc-protocol-admin-key": "from-env"}


def test_a_client_timeout_must_be_positive_seconds():
    with pytest.raises(InvalidInputError, match="timeout must be a number of seconds > 0"):
        Client("localhost:8000", timeout=0)


def test_input_errors_are_value_errors_too():
    assert issubclass(InvalidInputError, ValueError)
    assert issubclass(RequestTooLargeError, ValueError)
    assert issubclass(InvalidInputError, TritonClientError)
    with Client("localhost:8000") as c, pytest.raises(ValueError, match="not a single string"):
        c.embed("one string")


@pytest.mark.parametrize(("value", "seconds"), [
    ("2", 2.0), (" 0.5 ", 0.5), ("0", 0.0), (None, None), ("", None), ("soon", None),
    ("-1", None), ("nan", None),
])
def test_retry_after_reads_delay_seconds(value, seconds):
    assert parse_retry_after(value) == seconds


def test_retry_after_reads_an_http_date_against_now():
    now = 1_800_000_000.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0


def rate_limited(after: float | None) -> RateLimitedError:
    err = RateLimitedError("rate limit exceeded", "429")
    err.retry_after_s = after
    return err


def test_a_retry_waits_at_least_the_servers_retry_after():
    policy = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=1.0)
    assert next_delay(policy, 1, rate_limited(2.0), None, random.Random(0)) == 2.0
    assert next_delay(policy, 1, rate_limited(2.0), 10.0, random.Random(0)) == 2.0


def test_a_retry_after_past_the_deadline_or_the_cap_raises_at_once():
    policy = RetryPolicy(attempts=3, max_retry_after_s=30.0)
    assert next_delay(policy, 1, rate_limited(2.0), 1.0, random.Random(0)) is None
    assert next_delay(policy, 1, rate_limited(60.0), None, random.Random(0)) is None


def test_without_retry_after_the_policy_backs_off_as_before():
    policy = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=1.0)
    assert next_delay(policy, 1, QueueFullError("full", "503"), None,
                      random.Random(0)) <= 0.05
    assert next_delay(policy, 1, ServerUnreachableError("refused"), None,
                      random.Random(0)) <= 0.05


def test_an_http_429_or_503_carries_the_answers_retry_after_and_nothing_else_does():
    from tritonclient.utils import InferenceServerException

    with Client("localhost:8000") as c:
        c._client.last_retry_after = 2.0  # what the last POST's answer said
        limited = c._typed(InferenceServerException("rate limit exceeded", status="429"))
        refused = c._typed(ConnectionRefusedError("connection refused"))
    assert (type(limited), limited.retry_after_s) == (RateLimitedError, 2.0)
    assert (type(refused), refused.retry_after_s) == (ServerUnreachableError, None)
    with Client("localhost:8001") as c:  # gRPC: no Retry-After
        full = c._typed(InferenceServerException("Exceeds maximum queue size",
                                                 status="StatusCode.UNAVAILABLE"))
    assert (type(full), full.retry_after_s) == (QueueFullError, None)

"""Traces: Triton's flags, the front door's sampling, the relay's id conversion, the BLS
parent of a batch and the SDK's trace context (docs/observability.md, "Traces")."""

from __future__ import annotations

import base64

import pytest
from opentelemetry.sdk.trace import TracerProvider
from tmr_client.tracing import trace_headers

from python_backends import bls
from server.otlp_relay import base64_ids
from server.settings import FrontDoorSettings, ServerOptions, server_flags, trace_flags

TRACE, SPAN, PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "00f067aa0ba902b7"


def test_triton_traces_only_when_given_an_endpoint() -> None:
    assert not any("--trace-config" in f for f in server_flags(ServerOptions()))
    flags = server_flags(ServerOptions(trace_url="http://127.0.0.1:9/v1/traces", trace_rate=0))
    assert "--trace-config=mode=opentelemetry" in flags
    assert "--trace-config=rate=0" in flags
    assert "--trace-config=opentelemetry,url=http://127.0.0.1:9/v1/traces" in flags
    with pytest.raises(ValueError, match="N >= 0"):
        trace_flags("http://x", -1)


def test_the_front_door_samples_1_in_the_trace_rate() -> None:
    assert FrontDoorSettings().trace_sampling == "* 0;"  # tracing off: never
    assert FrontDoorSettings(trace_rate=100).trace_sampling == "1% 1; * 0;"
    assert FrontDoorSettings(trace_rate=1).trace_sampling == "100% 1; * 0;"
    assert FrontDoorSettings(trace_rate=3).trace_sampling == "33.33% 1; * 0;"


def test_the_relay_turns_otlp_json_hex_ids_into_protobuf_base64() -> None:
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": TRACE, "spanId": SPAN, "parentSpanId": PARENT,
         "links": [{"traceId": TRACE, "spanId": PARENT}]},
        {"traceId": TRACE, "spanId": PARENT, "parentSpanId": ""}]}]}]}
    spans = base64_ids(request)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert base64.b64decode(spans[0]["traceId"]).hex() == TRACE
    assert base64.b64decode(spans[0]["parentSpanId"]).hex() == PARENT
    assert base64.b64decode(spans[0]["links"][0]["spanId"]).hex() == PARENT
    assert spans[1]["parentSpanId"] == ""  # a root span keeps its empty parent
    assert base64_ids({}) == {}


class Trace:
    def __init__(self, context: str | None) -> None:
        self.context = context

    def get_context(self) -> str | None:
        return self.context


class Request:
    def __init__(self, context: str | None) -> None:
        self._trace = Trace(context)

    def trace(self) -> Trace:
        return self._trace


def test_a_batchs_bls_calls_join_its_first_traced_request() -> None:
    untraced, traced, other = Request(None), Request("{...a}"), Request("{...b}")
    bls.follow([untraced, traced, other])
    assert bls._TRACE.get() is traced.trace()
    bls.follow([untraced])  # nothing traced: Triton's own (inactive) trace, harmless
    assert bls._TRACE.get() is untraced.trace()
    bls.follow([])
    assert bls._TRACE.get() is None


def test_the_sdk_passes_on_the_callers_span_and_nothing_outside_one() -> None:
    tracer = TracerProvider().get_tracer("test")
    assert "traceparent" not in trace_headers()
    with tracer.start_as_current_span("caller") as span:
        header = trace_headers()["traceparent"]
    context = span.get_span_context()
    assert header.split("-")[1:3] == [f"{context.trace_id:032x}", f"{context.span_id:016x}"]

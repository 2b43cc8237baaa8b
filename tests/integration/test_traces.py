"""Traces from the client to the encoder (docs/observability.md, "Traces"): a real Phoenix
(server/traces.py) behind the OTLP relay, a real Triton in OpenTelemetry mode, the real
nginx front door, and the SDK inside a client span of the OpenTelemetry SDK. The spans are
read back from Phoenix's REST API."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tmr_client import Client

from core.repository import edit_config
from server.front_door import FrontDoor
from server.launcher import TritonServer
from server.traces import TraceBackend
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import fresh, http_post, repository_of
from tests.integration.test_front_door import open_front_door, text_body

pytestmark = pytest.mark.timeout(300)

FRONT, ENCODER = "embed", "minilm_onnx"
MODELS = (FRONT, "embed_interactive", ENCODER, "minilm_int8")
SPANS_TIMEOUT_S = 30.0  # Triton exports every second (TRACE_EXPORT_DELAY_MS)


class Stack:
    """Phoenix, a traced Triton and the front door, started once for the module."""

    def __init__(self, backend: TraceBackend, server: TritonServer, door: FrontDoor) -> None:
        self.backend, self.server, self.door = backend, server, door
        self.key = next(iter(door.api_keys.values()))
        self.provider = TracerProvider(resource=Resource.create({"service.name": "app"}))
        self.provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=backend.otlp_url)))
        self.tracer = self.provider.get_tracer("tests.integration.test_traces")

    def trace(self, trace_id: str, names: set[str]) -> dict[str, dict[str, Any]]:
        """The spans of `trace_id` by name, once every one of `names` is stored."""
        deadline = time.monotonic() + SPANS_TIMEOUT_S
        while True:
            spans = self.backend.spans(trace_id)
            by_name = {s["name"]: s for s in spans}
            if names <= by_name.keys():
                return by_name
            assert time.monotonic() < deadline, (
                f"trace {trace_id}: {sorted(by_name)} stored, {sorted(names)} expected")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("traces")
    with TraceBackend(root / "phoenix", port=0) as backend:
        # rate 0: Triton traces exactly the requests that carry a traceparent
        repo = repository_of(root, *MODELS)
        # The front calls its encoder over BLS, as on a GPU host or a host profile's BLS
        # layout: the path whose spans must join the trace (in process, the front's own
        # compute span holds the encoder's work)
        edit_config(repo, FRONT, lambda c: c.parameters["primary_in_process"].__setattr__(
            "string_value", "false"))
        server = start_server(repo, root / "tritonserver.log",
                              trace_url=backend.otlp_url, trace_rate=0)
        door = open_front_door(server, trace_rate=1)  # the door starts one for each
        try:
            yield Stack(backend, server, door)
        finally:
            door.close()
            stop_cleanly(server)


# Triton ends a request's span when it releases the request, after the response has left:
# the client, with the answer in hand, may close its own span a moment before that.
RELEASE_SLACK = timedelta(milliseconds=50)


def started(span: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(span["start_time"])


def ended(span: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(span["end_time"])


def parent_of(span: dict[str, Any], spans: dict[str, dict[str, Any]]) -> str:
    ids = {s["context"]["span_id"]: name for name, s in spans.items()}
    return ids.get(span["parent_id"], span["parent_id"] or "")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_span_reaches_the_encoder_through_the_front_door(
        stack: Stack, protocol: str) -> None:
    """The SDK passes the caller's trace context; nginx passes it on; Triton's request,
    model and compute spans of the front, and the encoder's spans from the front's BLS
    call, all join the client's trace, each inside its parent's time."""
    url = stack.door.http_url if protocol == "http" else stack.door.grpc_url
    with Client(url, protocol=protocol, api_key=stack.key) as client, \
            stack.tracer.start_as_current_span("client embed") as span:
        assert client.embed(fresh("a traced request")).shape == (1, 384)
    trace_id = f"{span.get_span_context().trace_id:032x}"
    spans = stack.trace(trace_id, {"client embed", "InferRequest", FRONT, ENCODER})
    client_span, request, front, encoder = (spans[n] for n in (
        "client embed", "InferRequest", FRONT, ENCODER))
    assert parent_of(request, spans) == "client embed"
    assert parent_of(front, spans) == "InferRequest"
    # the encoder's model span hangs under the front's model span (Triton makes a BLS
    # child's request span a child of its parent's), with its own compute span
    assert parent_of(encoder, spans) == FRONT
    assert front["attributes"]["triton.model_name"] == FRONT
    assert encoder["attributes"]["triton.model_name"] == ENCODER
    computes = [s for s in stack.backend.spans(trace_id) if s["name"] == "compute"]
    assert len(computes) >= 2  # the front's execution and the encoder's
    for outer, inner in ((client_span, request), (request, front), (front, encoder)):
        assert started(outer) <= started(inner) and ended(inner) <= ended(outer) + (
            RELEASE_SLACK if outer is client_span else timedelta()), \
            (outer["name"], inner["name"])


def test_the_front_door_starts_a_trace_named_by_its_request_id(stack: Stack) -> None:
    """A raw client without a traceparent: the front door (trace_rate 1 here) starts a trace
    whose id is the request id it answers with and logs, so a request id found in the
    access log is the trace to open in Phoenix."""
    request = urllib.request.Request(
        f"http://{stack.door.http_url}/v2/models/{FRONT}/infer",
        data=text_body(*fresh("an untraced client")), headers={"x-api-key": stack.key})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
        request_id = answer.headers["X-Request-Id"]
    assert len(request_id) == 32
    spans = stack.trace(request_id, {"InferRequest", FRONT, ENCODER})
    assert parent_of(spans[FRONT], spans) == "InferRequest"
    log = Path(stack.door.access_log).read_text()
    assert f"request_id={request_id} trace_id={request_id}" in log


def test_a_traceparent_sent_straight_to_triton_is_traced_and_a_bad_one_ignored(
        stack: Stack) -> None:
    """Triton itself honours a W3C traceparent (rate 0 traces only those); a malformed one
    is no error: the request is answered, untraced."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    for header in (f"00-{trace_id}-00f067aa0ba902b7-01", "not-a-traceparent"):
        status, answer = http_post(stack.server.http_url, f"/v2/models/{FRONT}/infer",
                                   text_body(*fresh("straight to Triton")),
                                   {"traceparent": header})
        assert status == 200, answer
    spans = stack.trace(trace_id, {"InferRequest", FRONT, ENCODER})
    assert spans["InferRequest"]["parent_id"] == "00f067aa0ba902b7"

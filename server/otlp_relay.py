"""An OTLP/HTTP relay from Triton to the trace backend (docs/observability.md, "Traces").

Triton 2.51 exports its spans as OTLP/HTTP with JSON bodies: its exporter
(opentelemetry-cpp 1.13) is built with JSON as the default content type, and
`--trace-config` sets only the URL. Phoenix, the trace backend, takes OTLP/HTTP protobuf
only (415 for JSON). This relay takes either on `/v1/traces` and forwards protobuf.

OTLP/JSON differs from protobuf's own JSON mapping in one way that matters here: trace and
span ids are hex, not base64 (the OTLP specification, "JSON Protobuf Encoding").

It runs in the trace backend's venv (`.venv-traces`, which has `opentelemetry-proto`; the
project's venv keeps protobuf < 5 for tritonclient), as a script:
`.venv-traces/bin/python server/otlp_relay.py --port P --to URL`. Only the standard library
and `opentelemetry-proto` are imported.
"""

from __future__ import annotations

import argparse
import base64
import json
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = "/v1/traces"
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
PROTOBUF = "application/x-protobuf"
MAX_BODY_BYTES = 16 * 1024 * 1024


def base64_ids(request: dict[str, Any]) -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest with its hex ids (spans and their links) in
    base64, as protobuf's JSON parser reads bytes fields. Changes `request` in place."""
    for resource_spans in request.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for item in (span, *span.get("links", [])):
                    for key in ID_FIELDS:
                        if item.get(key):
                            item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    return request


def to_protobuf(body: bytes) -> bytes:
    """An OTLP/JSON body as OTLP protobuf bytes; ValueError when it is not one."""
    from google.protobuf.json_format import ParseDict, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        request = base64_ids(json.loads(body))
        return ParseDict(request, ExportTraceServiceRequest()).SerializeToString()
    except (ValueError, ParseError, AttributeError, TypeError) as err:
        raise ValueError(f"not an OTLP/JSON trace export: {err}") from err


class Relay(BaseHTTPRequestHandler):
    """POST /v1/traces: JSON converted, protobuf passed on; the backend's status back."""

    target = ""  # the backend's /v1/traces URL (set by main)

    def do_POST(self) -> None:
        if self.path.split("?")[0] != PATH:
            return self.answer(404, f"only POST {PATH}")
        length = int(self.headers.get("content-length") or 0)
        if not 0 < length <= MAX_BODY_BYTES:
            return self.answer(413 if length else 400, f"body of {length} bytes")
        body = self.rfile.read(length)
        kind = (self.headers.get("content-type") or "").split(";")[0].strip()
        if kind != PROTOBUF:
            try:
                body = to_protobuf(body)
            except ValueError as err:
                return self.answer(400, str(err))
        forward = urllib.request.Request(self.target, data=body, method="POST",
                                         headers={"content-type": PROTOBUF})
        try:
            with urllib.request.urlopen(forward, timeout=10) as answer:
                self.answer(answer.status, "")
        except urllib.error.HTTPError as err:
            self.answer(err.code, err.read().decode(errors="replace")[:500])
        except OSError as err:
            self.answer(503, f"trace backend unreachable: {err}")

    def answer(self, status: int, message: str) -> None:
        data = message.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per export would drown the server's log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--to", required=True, help="the backend's OTLP/HTTP traces URL")
    args = parser.parse_args()
    Relay.target = args.to
    ThreadingHTTPServer((args.host, args.port), Relay).serve_forever()


if __name__ == "__main__":
    main()

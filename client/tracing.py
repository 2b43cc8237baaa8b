"""W3C trace context on the SDK's calls (docs/observability.md, "Traces").

When OpenTelemetry's API is installed and the caller is inside a span, every call carries
that span's `traceparent` (and `tracestate`, baggage) as headers, HTTP or gRPC metadata:
Triton, started with `tmr serve --trace`, then makes its spans children of the caller's,
and always traces such a request, whatever its sampling rate. Without OpenTelemetry, or
outside a span, nothing is added.
"""

from __future__ import annotations

try:
    from opentelemetry import propagate
except ImportError:  # OpenTelemetry is optional: no context to pass on
    propagate = None


def trace_headers() -> dict[str, str]:
    """The current trace context as headers (lower-case names, as gRPC requires)."""
    if propagate is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {name.lower(): value for name, value in carrier.items()}

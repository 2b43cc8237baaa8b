"""tritonclient's clients, built from an Endpoint, with the server's Retry-After kept.

Triton's HTTP clients turn an error answer into an exception that drops its headers; the
front door answers 429 (rate limit) and 503 (queue full, level 4, Triton down) with
`Retry-After`. The HTTP subclasses here note that header from each POST's answer
(`retry_after()`), and the SDK hands it on as `TritonClientError.retry_after_s`, which the
retry policy waits at least. gRPC has no Retry-After: Triton's gRPC answers carry no such
metadata, so a gRPC error's `retry_after_s` is always None.
"""

from __future__ import annotations

import email.utils
import functools
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from tmr_client.contract import NETWORK_TIMEOUT_S
from tmr_client.endpoint import Endpoint

RETRY_AFTER = "retry-after"
# The asyncio client's last answer, per task: concurrent chunks share one client.
_AIO_RETRY_AFTER: ContextVar[float | None] = ContextVar("tmr_client_retry_after",
                                                         default=None)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: delay-seconds ("2", "0.5") or an HTTP
    date (RFC 9110); a date in the past is 0; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        now_dt = datetime.fromtimestamp(time.time() if now is None else now, UTC)
        return max(0.0, (when - now_dt).total_seconds())
    return seconds if seconds >= 0 and seconds == seconds else None  # refuses NaN


@functools.cache
def _sync_http() -> type:
    import tritonclient.http as http

    class HttpClient(http.InferenceServerClient):
        """tritonclient's HTTP client, noting the Retry-After of each POST's answer."""

        last_retry_after: float | None = None

        def _post(self, *args: Any, **kwargs: Any) -> Any:
            response = super()._post(*args, **kwargs)
            self.last_retry_after = parse_retry_after(response.get(RETRY_AFTER))
            return response

        def retry_after(self) -> float | None:
            return self.last_retry_after

    return HttpClient


@functools.cache
def _aio_http() -> type:
    import tritonclient.http.aio as aio

    class AioHttpClient(aio.InferenceServerClient):
        """tritonclient's asyncio HTTP client, noting each POST's Retry-After per task."""

        async def _post(self, *args: Any, **kwargs: Any) -> Any:
            response = await super()._post(*args, **kwargs)
            _AIO_RETRY_AFTER.set(parse_retry_after(response.headers.get(RETRY_AFTER)))
            return response

        def retry_after(self) -> float | None:
            return _AIO_RETRY_AFTER.get()

    return AioHttpClient


def triton_client(where: Endpoint, aio: bool, timeout: float | None) -> Any:
    """A tritonclient client for `where`. Over HTTP, `timeout` (else NETWORK_TIMEOUT_S)
    bounds connecting and each socket read; gRPC deadlines are set per call."""
    network = NETWORK_TIMEOUT_S if timeout is None else timeout
    if where.protocol == "http":
        if aio:
            return _aio_http()(where.address, conn_timeout=network, ssl=where.ssl)
        return _sync_http()(where.address, network_timeout=network, connection_timeout=network,
                            ssl=where.ssl)
    if aio:
        import tritonclient.grpc.aio as grpc_aio
        return grpc_aio.InferenceServerClient(where.address, ssl=where.ssl)
    import tritonclient.grpc as grpc
    return grpc.InferenceServerClient(where.address, ssl=where.ssl)


def retry_after(client: Any) -> float | None:
    """The Retry-After of the client's last answer (None over gRPC)."""
    method = getattr(client, "retry_after", None)
    return method() if callable(method) else None

"""Everything the sync and asyncio clients share: all of a call but the I/O (`ClientBase`).

A verb (`embed`, `classify`, `infer`, ...) takes one `CallOptions` or builds it from its
keywords (tmr_client.options.verb_options: the verb's keyword set is the TypedDict its
`**keywords` unpack) and starts a `Call`: the rows validated (tmr_client.shaping), the
deadline started (tmr_client.deadlines). The client then routes it (a priority-1 call to
its model's interactive lane), reads the model's info once (tmr_client.model_info), cuts
the rows into requests (tmr_client.chunking) and sends each; after a failure,
`on_failure` decides (tmr_client.failure): retry after a delay, reroute to a lane's
front, or raise. The answers are put back together by the family's result builder
(tmr_client.results). Only the sending differs: one request after another (sync), or at
most `max_in_flight` at a time (asyncio). Nothing here imports the server side: the SDK
ships alone.

Two timeouts, not to be confused:

    timeout=     seconds, per client or per call: the client-side deadline of the whole
                 call, across its chunks and retries, on HTTP and gRPC, sync and asyncio.
                 When it passes the call raises DeadlineExceededError.
    timeout_ms=  milliseconds, per call: Triton's queue timeout, sent with each chunk's
                 request. The server drops a request still queued after it (if the model's
                 queue policy allows overriding), answering "Request timeout expired",
                 also a DeadlineExceededError. It bounds queueing, not the whole call.

A request sent under a deadline and no `timeout_ms=` carries the time left as its queue
timeout, so the server drops it, rather than runs it, once nobody waits for it. Over gRPC
the deadline ends the caller's wait but never cancels the RPC: Triton 2.51 can lose a model
reference when a gRPC call is cancelled as it is answered, and that model then never
unloads (docs/reliability.md §11). The abandoned RPC finishes on its own (its gRPC deadline
is the time left plus ABANDONED_GRACE_S, reached only by a server that stopped answering),
and `close()` waits for it, at most ABANDONED_GRACE_S, before closing the channel.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

import numpy as np
from tmr_client.auth import key_headers, resolve_admin_key, resolve_api_key
from tmr_client.calls import Call, Request
from tmr_client.contract import INTERACTIVE_PRIORITY, LANE_SUFFIX, lane_name
from tmr_client.deadlines import ABANDONED_GRACE_S, Deadline, check_timeout
from tmr_client.endpoint import DEFAULT_PORTS, Protocol, default_url, endpoint
from tmr_client.errors import (
    InvalidInputError,
    ServerUnreachableError,
    TritonClientError,
    from_exception,
)
from tmr_client.failure import Decision, Reroute, Retry, decide
from tmr_client.model_info import DEFAULT_IN_FLIGHT, Access, ModelInfo, output_names, request_rows
from tmr_client.options import CallOptions, Progress, Truncate
from tmr_client.ranking import check_top_n, rerank_result
from tmr_client.results import (
    ClassifyResult,
    EmbedResult,
    InferResult,
    Prediction,
    SimilarityResult,
    TokenCounts,
    classify_result,
    embed_result,
    infer_result,
    similarity_result,
    token_counts,
)
from tmr_client.retry import RetryPolicy
from tmr_client.shaping import (
    CLASSIFY_OUTPUTS,
    DOCUMENTS,
    EMBED_OUTPUTS,
    IMAGE_INPUT,
    RERANK_INPUTS,
    RERANK_OUTPUTS,
    TEXT_INPUT,
    encode_text,
    image_tensor,
    listed,
    pair_tensor,
    protocol_module,
    text_tensor,
    type_name,
)
from tmr_client.tracing import trace_headers
from tmr_client.transport import retry_after, triton_client

__all__ = [  # what other packages and the clients import from here
    "ABANDONED_GRACE_S", "DEFAULT_MODEL", "DEFAULT_PORTS", "Access", "Call", "CallOptions",
    "ClassifyResult", "ClientBase", "EmbedResult", "InferResult", "ModelInfo", "Prediction",
    "Progress", "Protocol", "SimilarityResult", "TokenCounts", "Truncate", "classify_result",
    "default_url", "embed_result", "image_tensor", "infer_result", "output_names",
    "request_rows", "text_tensor",
]

DEFAULT_MODEL = "embed"  # the repository's first text-embedding front model
NO_RERANKER = ("rerank needs model=, a text_ranking front: the SDK has no default reranker "
               "(add one with `tmr add NAME --family text_ranking --from FOLDER`)")
RETRY_AFTER_STATUSES = ("429", "503")  # HTTP answers whose Retry-After the client honours
READY_POLL_S = 0.2  # how often wait_ready asks


class ClientBase:
    """State and decisions shared by the sync and asyncio clients (no I/O here); the
    arguments are the clients' (see tmr_client.sync.Client)."""

    _aio: ClassVar[bool]  # which of tritonclient's clients a subclass drives
    _http_infer: Callable[[Call, Request], Any]  # one try over each protocol (a subclass's)
    _grpc_infer: Callable[[Call, Request], Any]

    def __init__(self, url: str | None = None, protocol: Protocol | None = None,
                 model: str = DEFAULT_MODEL, retry: RetryPolicy | None = None, *,
                 timeout: float | None = None, seed: int | None = None,
                 api_key: str | None = None, admin_key: str | None = None,
                 max_batch_size: int | None = None, max_in_flight: int | None = None,
                 lanes: bool = True) -> None:
        self.access = Access(api_key, admin_key, max_batch_size, max_in_flight, lanes)
        self.endpoint = endpoint(url, protocol)
        self.protocol: Protocol = self.endpoint.protocol
        self.url = self.endpoint.address
        self.timeout = check_timeout(timeout)
        self.model = model
        self.retry = retry or RetryPolicy()
        self._module = protocol_module(self.protocol, aio=self._aio)
        self._rng = random.Random(seed)
        self._api_key, self._admin_key = resolve_api_key(api_key), resolve_admin_key(admin_key)
        self._infos: dict[str, ModelInfo] = {}
        self._lanes: dict[str, bool] = {}  # lane -> loaded on the server (asked once)
        self._abandoned: set[Any] = set()  # gRPC requests nobody waits for (see close())
        try:
            self._client = triton_client(self.endpoint, self._aio, self.timeout)
        except Exception as exc:  # tritonclient refuses an address with many types
            raise from_exception(exc) from exc

    def on_failure(self, call: Call, error: TritonClientError, attempt: int,
                   now: float | None = None) -> Decision:
        """What to do after try number `attempt` of `call` failed (tmr_client.failure)."""
        return decide(call, error, attempt, self.retry, self._rng,
                      time.monotonic() if now is None else now)

    def _next_try(self, call: Call, error: TritonClientError,
                  attempt: int) -> tuple[Call, float]:
        """The call to send again and the seconds to wait first; raises when it is over.

        This frame lets go of what it raises: a reference cycle through the traceback
        would keep an abandoned sync HTTP request alive, and with it the connection that
        the client's next call waits for."""
        decision = self.on_failure(call, error, attempt)
        try:
            if isinstance(decision, Retry):
                return call, decision.delay_s
            if isinstance(decision, Reroute):
                return replace(call, model=decision.model), 0.0
            if decision.error is error:
                raise error
            raise decision.error from error
        finally:
            decision = error = None  # type: ignore[assignment]

    def _infer_once(self, call: Call, request: Request) -> Any:
        """One try over the client's protocol (a coroutine on the asyncio client); chosen
        here, not kept as a bound method, which would tie the client in a cycle."""
        return (self._grpc_infer if self.protocol == "grpc" else self._http_infer)(call, request)

    def _typed(self, exc: Exception) -> TritonClientError:
        """A tritonclient or transport failure as a typed error, with the answer's
        Retry-After (HTTP) when it is one to retry."""
        err = from_exception(exc)
        if err.status in RETRY_AFTER_STATUSES and err.retry_after_s is None:
            err.retry_after_s = retry_after(self._client)
        return err

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """Any failure inside raised as a typed error (httpx maps them at the transport)."""
        try:
            yield
        except Exception as exc:  # tritonclient and its transports raise many types
            raise self._typed(exc) from exc

    def _headers(self, admin: bool = False) -> dict[str, str]:
        """A fresh header dict for one call (tritonclient's HTTP client adds to it): the
        keys, and the caller's trace context when OpenTelemetry is installed."""
        return {**trace_headers(),
                **key_headers(self.protocol, api_key=self._api_key, admin=admin,
                              admin_key=self._admin_key)}

    def _control(self, admin: bool = False) -> dict[str, Any]:
        """A control call's keywords: its headers, and the client's `timeout=` over gRPC
        (HTTP's is the socket's)."""
        if self.protocol == "grpc" and self.timeout is not None:
            return {"headers": self._headers(admin), "client_timeout": self.timeout}
        return {"headers": self._headers(admin)}

    def _readiness(self, model: str | None) -> tuple[Callable[..., Any], tuple[str, ...]]:
        """The readiness call of the server (no `model`) or of `model`, and its arguments."""
        if model is None:
            return self._client.is_server_ready, ()
        return self._client.is_model_ready, (model,)

    def _not_ready(self, timeout_s: float, model: str | None) -> ServerUnreachableError:
        """What wait_ready raises: it names the model when one was asked for."""
        target = "server" if model is None else f"model {model!r}"
        return ServerUnreachableError(f"{target} at {self.url} not ready after {timeout_s:.0f} s")

    @property
    def max_in_flight(self) -> int:
        """Chunks one bulk call to the default model sends at once (once its config is read)."""
        info = self._infos.get(self.model)
        return info.in_flight if info else (self.access.max_in_flight or DEFAULT_IN_FLIGHT)

    def _start(self, rows: np.ndarray, inputs: str | tuple[str, ...], wanted: Sequence[str],
               options: CallOptions, build: Callable[[list[Any], list[str]], Any]) -> Call:
        """A call of `rows` under `inputs` (one input, or one per column), its result put
        together by `build`; its deadline starts now."""
        options = options.or_timeout(self.timeout)
        return Call(options.model or self.model, rows, inputs, tuple(wanted), options,
                    Deadline.after(options.timeout), self.protocol, build)

    def _embed_call(self, texts: Iterable[str | bytes], options: CallOptions) -> Call:
        return self._start(text_tensor(texts), TEXT_INPUT, EMBED_OUTPUTS, options, embed_result)

    def _classify_call(self, images: Iterable[bytes | str], options: CallOptions) -> Call:
        return self._start(image_tensor(images), IMAGE_INPUT, CLASSIFY_OUTPUTS, options,
                           classify_result)

    def _count_call(self, texts: Iterable[str | bytes], options: CallOptions) -> Call:
        return self._start(text_tensor(texts), TEXT_INPUT, EMBED_OUTPUTS,
                           replace(options, count_only=True), token_counts)

    def _similarity_call(self, source: str | bytes, texts: Iterable[str | bytes],
                         options: CallOptions) -> Call:
        first = encode_text(source)
        if first is None:
            raise InvalidInputError(f"source is {type_name(source)}, not a str or bytes")
        rows = np.concatenate([np.array([[first]], dtype=np.object_), text_tensor(texts)])
        return replace(self._start(rows, TEXT_INPUT, EMBED_OUTPUTS, options,
                                   similarity_result), one_request=True)

    def _rerank_call(self, query: str | bytes, documents: Iterable[str | bytes],
                     top_n: int | None, options: CallOptions) -> Call:
        """A rerank call: one (query, document) row per document, to the call's own model
        (TypeError without one: the client's default is no reranker)."""
        if not options.model:
            raise TypeError(NO_RERANKER)
        check_top_n(top_n)
        documents = listed(documents, DOCUMENTS)
        return self._start(pair_tensor(query, documents), RERANK_INPUTS, RERANK_OUTPUTS,
                           options, partial(rerank_result, documents=documents, top_n=top_n))

    def _infer_call(self, rows: np.ndarray, input_name: str | tuple[str, ...],
                    outputs: Sequence[str], options: CallOptions) -> Call:
        return self._start(rows, input_name, outputs, options,
                           partial(infer_result, wanted=tuple(outputs)))

    def _lane_to_ask(self, call: Call) -> str | None:
        """The interactive lane a priority-1 call goes to when loaded, if nobody asked the
        server yet whether it is (once per lane); None otherwise."""
        lane = self._lane_of(call)
        return lane if lane is not None and lane not in self._lanes else None

    def _lane_of(self, call: Call) -> str | None:
        """The interactive lane a priority-1 call goes to, if its model has one: None for
        any other call (the shared front orders it by priority)."""
        if (not self.access.lanes or call.options.priority != INTERACTIVE_PRIORITY
                or call.model.endswith(LANE_SUFFIX)):
            return None
        return lane_name(call.model)

    def _routed(self, call: Call) -> Call:
        """The call to its lane when the lane is loaded, else as it is."""
        lane = self._lane_of(call)
        return replace(call, model=lane) if lane and self._lanes.get(lane) else call

    def _request(self, call: Call, rows: slice, request_id: str, info: ModelInfo) -> Request:
        return call.request(self._module, rows, request_id, info)

    def _infer_kwargs(self, call: Call, request: Request) -> dict[str, Any]:
        """One try's keywords: outputs, fresh headers, the call's options and queue timeout."""
        return {"outputs": request.outputs, "headers": self._headers(),
                **call.infer_kwargs(request.request_id)}

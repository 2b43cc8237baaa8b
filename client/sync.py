"""Blocking client over HTTP or gRPC: chunks are sent one after another."""

from __future__ import annotations

import queue
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tmr_client.core import (
    ABANDONED_GRACE_S,
    DEFAULT_MODEL,
    Access,
    Call,
    CallOptions,
    ClassifyResult,
    ClientBase,
    EmbedResult,
    InferResult,
    ModelInfo,
    Progress,
    Protocol,
    Truncate,
    classify_result,
    embed_result,
    infer_result,
)
from tmr_client.errors import (
    AccessDeniedError,
    ServerUnreachableError,
    TritonClientError,
)
from tmr_client.retry import RetryPolicy


class Client(ClientBase):
    """The client of every front model: `embed(texts) -> (n, dim)` for a text-embedding
    one, `classify(images)` for an image-classification one, plus readiness and metadata
    calls.

    `url`: `"localhost:8000"`, `"http://host:8000"`, `"https://host"`, `"grpc://host:8001"`
    or None for TMR_URL (else localhost:8000). Without `protocol=`, the scheme decides
    (http/https: HTTP, grpc/grpcs: gRPC), else the port (8001: gRPC, any other: HTTP); an
    explicit `protocol=` always wins (tmr_client.endpoint has the rules).

    `timeout`: seconds, the client-side deadline of each call (its chunks and retries
    together; a call's own `timeout=` overrides it), on HTTP and gRPC; past it a call
    raises DeadlineExceededError. Over HTTP it is also the socket timeout (60 s without
    it), so a call's own `timeout=` can shorten the client's there, not lengthen it. A
    call's `timeout_ms` is something else: Triton's queue timeout per request. Over sync
    HTTP, a request cut off by its deadline still finishes on the server, and the
    client's next call waits for its connection.

    `api_key` goes to the front door (else TMR_API_KEY); `admin_key` to the model config
    (else TMR_ADMIN_KEY, else none: see tmr_client.auth); `max_batch_size` spares the
    config call, which a client without the admin key cannot make (see
    tmr_client.core.Access). `model` is the default front model of every call.
    """

    def __init__(self, url: str | None = None, protocol: Protocol | None = None,
                 model: str = DEFAULT_MODEL, retry: RetryPolicy | None = None, *,
                 timeout: float | None = None, seed: int | None = None,
                 api_key: str | None = None, admin_key: str | None = None,
                 max_batch_size: int | None = None, max_in_flight: int | None = None,
                 lanes: bool = True) -> None:
        super().__init__(url, protocol, model, retry, seed, aio=False,
                         access=Access(api_key, admin_key, max_batch_size, max_in_flight,
                                       lanes), timeout=timeout)
        self._abandoned: list[queue.SimpleQueue] = []  # gRPC answers nobody waits for

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # tritonclient and its transports raise many types
            raise self._typed(exc) from exc

    def is_ready(self, model: str | None = None) -> bool:
        try:
            if model is None:
                return bool(self._call(self._client.is_server_ready, headers=self._headers(),
                                       **self._control_kwargs()))
            return bool(self._call(self._client.is_model_ready, model, headers=self._headers(),
                                   **self._control_kwargs()))
        except TritonClientError:
            return False

    def wait_ready(self, timeout_s: float = 60.0, model: str | None = None) -> None:
        """Block until the server (and `model`, if given) is ready, or raise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_ready() and (model is None or self.is_ready(model)):
                return
            time.sleep(0.2)
        target = f"model '{model}'" if model else "server"
        raise ServerUnreachableError(f"{target} at {self.url} not ready after {timeout_s:.0f} s")

    def metadata(self, model: str | None = None) -> Any:
        return self._call(self._client.get_model_metadata, model or self.model,
                          headers=self._headers(), **self._control_kwargs())

    def model_config(self, model: str | None = None) -> Any:
        """The model config: a restricted API, sent with the admin key."""
        return self._call(self._client.get_model_config, model or self.model,
                          headers=self._headers(admin=True), **self._control_kwargs())

    def info(self, model: str | None = None) -> ModelInfo:
        """Rows per request, outputs and chunks in flight: from the config, or the metadata
        without the admin key (see tmr_client.core.Access); read once per model."""
        model = model or self.model
        if model not in self._infos:
            self._infos[model] = self._read_info(model)
        return self._infos[model]

    def _read_info(self, model: str) -> ModelInfo:
        if self.access.max_batch_size is None:
            try:
                return self.access.info(self.model_config(model))
            except AccessDeniedError:
                pass  # no admin key: the open metadata, chunks of 1 row
        return self.access.info_without_config(self.metadata(model))

    def max_batch_size(self, model: str | None = None) -> int:
        return self.info(model).max_batch

    def embed(self, texts: list[str], *, model: str | None = None, priority: int | None = None,
              timeout_ms: float | None = None, model_version: int | None = None,
              rollout_key: str | None = None, truncate: Truncate = None,
              chunk_overlap: int | None = None, on_progress: Progress | None = None,
              timeout: float | None = None) -> np.ndarray:
        """Embeddings of `texts`, (n, dim) float32, in input order. A text over the
        model's length is cut with `truncate=True`, refused with `False`, embedded in
        windows pooled into one vector with `"chunk"` (overlapping by `chunk_overlap`
        tokens, else the model's), and left to the model's policy with None.

        `timeout`: seconds for the whole call, retries and chunks included (else the
        client's); `timeout_ms`: Triton's queue timeout for each request (server side)."""
        return self.embed_with_info(texts, model=model, priority=priority, timeout_ms=timeout_ms,
                                    model_version=model_version, rollout_key=rollout_key,
                                    truncate=truncate, chunk_overlap=chunk_overlap,
                                    on_progress=on_progress, timeout=timeout).embeddings

    def embed_with_info(self, texts: list[str], *, model: str | None = None,
                        priority: int | None = None, timeout_ms: float | None = None,
                        model_version: int | None = None, rollout_key: str | None = None,
                        truncate: Truncate = None, chunk_overlap: int | None = None,
                        on_progress: Progress | None = None,
                        timeout: float | None = None) -> EmbedResult:
        """Like embed(), plus what served each row, its tokens, the tokens truncation
        dropped, its windows, and each chunk's model version and request id;
        `on_progress(done, total)` after each chunk."""
        call = self._start_embed(texts, model, truncate, chunk_overlap,
                                 CallOptions(priority, timeout_ms, model_version, rollout_key,
                                             timeout), on_progress)
        answers, ids = self._send(call)
        return embed_result(answers, ids)

    def classify(self, images: list[bytes | str], *, model: str | None = None,
                 top_k: int | None = None, priority: int | None = None,
                 timeout_ms: float | None = None, model_version: int | None = None,
                 rollout_key: str | None = None, on_progress: Progress | None = None,
                 timeout: float | None = None) -> ClassifyResult:
        """The `top_k` best classes (the model's default number when None) of each encoded
        image (JPEG, PNG or WebP bytes, or a base64 data URL string), best first, with what
        served each. `timeout` and `timeout_ms` as in embed()."""
        call = self._start_classify(images, model, top_k,
                                    CallOptions(priority, timeout_ms, model_version, rollout_key,
                                                timeout), on_progress)
        answers, ids = self._send(call)
        return classify_result(answers, ids)

    def infer(self, rows: np.ndarray, input_name: str, outputs: Sequence[str], *,
              model: str | None = None, priority: int | None = None,
              timeout_ms: float | None = None, model_version: int | None = None,
              parameters: Mapping[str, Any] | None = None,
              on_progress: Progress | None = None,
              timeout: float | None = None) -> InferResult:
        """The generic call under embed() and classify(): `rows` ([n, 1] BYTES) under
        `input_name`, chunked, retried and mapped to typed errors as they are; the
        `outputs` the model has, by name."""
        call = self._start(model, rows, input_name, outputs,
                           CallOptions(priority, timeout_ms, model_version, timeout=timeout),
                           on_progress, parameters)
        answers, ids = self._send(call)
        return infer_result(answers, ids, call.wanted)

    def _send(self, call: Call) -> tuple[list[Any], list[str]]:
        """Every chunk of the call, one after another; (answers, request ids). A
        priority-1 call goes to its model's interactive lane where one is loaded."""
        lane = self._lane_of(call)
        if lane is not None and lane not in self._lanes:
            self._lanes[lane] = self.is_ready(lane)
        call = self._routed(call, bool(lane and self._lanes[lane]))
        try:
            info = self.info(call.model)
        except TritonClientError as err:
            if call.expired():
                raise call.deadline_error() from err
            raise
        answers, ids = [], []
        for rows, request_id in call.chunks(info):
            ids.append(request_id)
            answers.append(self._infer(call, rows, request_id, info))
            call.progress(rows.stop)
        return answers, ids

    def _infer(self, call: Call, rows: slice, request_id: str, info: ModelInfo) -> Any:
        inputs, outputs = self._request(call, rows, info)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._infer_once(call, inputs, outputs, request_id)
            except TritonClientError as err:
                if call.expired():
                    raise call.deadline_error() from err
                overflow = self._overflow(call, err)
                if overflow is not None:  # the same request to the lane's front, at once
                    call = overflow
                    continue
                delay = self._retry_delay(attempt, err, call.deadline)
                if delay is None:
                    raise
                time.sleep(delay)

    def _infer_once(self, call: Call, inputs: list[Any], outputs: list[Any],
                    request_id: str) -> Any:
        """One request, within the call's deadline: over gRPC awaited at most the time left
        and never cancelled (tmr_client.core's doc says why), over HTTP sent in the
        background and awaited at most the time left."""
        kwargs = {"outputs": outputs, "headers": self._headers(),
                  **call.infer_kwargs(request_id)}
        if self.protocol == "grpc":
            return self._grpc_infer(call, inputs, kwargs)
        remaining = call.remaining()
        if remaining is None:
            return self._call(self._client.infer, call.model, inputs, **kwargs)
        pending = self._call(self._client.async_infer, call.model, inputs, **kwargs)
        return self._call(pending.get_result, timeout=remaining)

    def _grpc_infer(self, call: Call, inputs: list[Any], kwargs: dict[str, Any]) -> Any:
        answer: queue.SimpleQueue = queue.SimpleQueue()
        self._call(self._client.async_infer, call.model, inputs,
                   lambda result, error: answer.put((result, error)),
                   client_timeout=call.grpc_deadline(), **kwargs)
        try:
            result, error = answer.get(timeout=call.time_left())
        except queue.Empty as err:
            # Kept until answered: a long-lived client holds only the ones still running.
            self._abandoned = [q for q in self._abandoned if q.empty()] + [answer]
            raise call.deadline_error() from err
        if error is not None:
            raise self._typed(error) from error
        return result

    def close(self) -> None:
        """Close the connection, once the gRPC requests that callers stopped waiting for
        have answered (at most ABANDONED_GRACE_S): closing a channel cancels its RPCs."""
        until = time.monotonic() + ABANDONED_GRACE_S
        for answer in self._abandoned:
            try:
                answer.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                break
        self._abandoned.clear()
        self._client.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


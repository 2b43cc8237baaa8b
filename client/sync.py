"""Blocking client over HTTP or gRPC: chunks are sent one after another."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from client.core import (
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
from client.errors import (
    AccessDeniedError,
    ServerUnreachableError,
    TritonClientError,
    from_exception,
)
from client.retry import RetryPolicy


class Client(ClientBase):
    """The client of every front model: `embed(texts) -> (n, dim)` for a text-embedding
    one, `classify(images)` for an image-classification one, plus readiness and metadata
    calls. (`EmbedClient` is the same class under its old name, kept for one release.)

    `api_key` goes to the front door, `admin_key` to the model config (see client.auth);
    `max_batch_size` spares the config call, which a client without the admin key cannot
    make (see client.core.Access). `model` is the default front model of every call.
    """

    def __init__(self, url: str | None = None, protocol: Protocol = "http",
                 model: str = DEFAULT_MODEL, retry: RetryPolicy | None = None,
                 network_timeout_s: float = 60.0, seed: int | None = None, *,
                 api_key: str | None = None, admin_key: str | None = None,
                 max_batch_size: int | None = None, max_in_flight: int | None = None,
                 lanes: bool = True) -> None:
        super().__init__(url, protocol, model, retry, seed, aio=False,
                         access=Access(api_key, admin_key, max_batch_size, max_in_flight,
                                       lanes))
        if protocol == "http":
            self._client = self._module.InferenceServerClient(
                self.url, network_timeout=network_timeout_s, connection_timeout=network_timeout_s)
        else:
            self._client = self._module.InferenceServerClient(self.url)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # tritonclient and its transports raise many types
            raise from_exception(exc) from exc

    def is_ready(self, model: str | None = None) -> bool:
        try:
            if model is None:
                return bool(self._call(self._client.is_server_ready, headers=self._headers()))
            return bool(self._call(self._client.is_model_ready, model, headers=self._headers()))
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
                          headers=self._headers())

    def model_config(self, model: str | None = None) -> Any:
        """The model config: a restricted API, sent with the admin key."""
        return self._call(self._client.get_model_config, model or self.model,
                          headers=self._headers(admin=True))

    def info(self, model: str | None = None) -> ModelInfo:
        """Rows per request, outputs and chunks in flight: from the config, or the metadata
        without the admin key (see client.core.Access); read once per model."""
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
              chunk_overlap: int | None = None,
              on_progress: Progress | None = None) -> np.ndarray:
        """Embeddings of `texts`, (n, dim) float32, in input order. A text over the
        model's length is cut with `truncate=True`, refused with `False`, embedded in
        windows pooled into one vector with `"chunk"` (overlapping by `chunk_overlap`
        tokens, else the model's), and left to the model's policy with None."""
        return self.embed_with_info(texts, model=model, priority=priority, timeout_ms=timeout_ms,
                                    model_version=model_version, rollout_key=rollout_key,
                                    truncate=truncate, chunk_overlap=chunk_overlap,
                                    on_progress=on_progress).embeddings

    def embed_with_info(self, texts: list[str], *, model: str | None = None,
                        priority: int | None = None, timeout_ms: float | None = None,
                        model_version: int | None = None, rollout_key: str | None = None,
                        truncate: Truncate = None, chunk_overlap: int | None = None,
                        on_progress: Progress | None = None) -> EmbedResult:
        """Like embed(), plus what served each row, its tokens, the tokens truncation
        dropped, its windows, and each chunk's model version and request id;
        `on_progress(done, total)` after each chunk."""
        call = self._start_embed(texts, model, truncate, chunk_overlap,
                                 CallOptions(priority, timeout_ms, model_version, rollout_key),
                                 on_progress)
        answers, ids = self._send(call)
        return embed_result(answers, ids)

    def classify(self, images: list[bytes | str], *, model: str | None = None,
                 top_k: int | None = None, priority: int | None = None,
                 timeout_ms: float | None = None, model_version: int | None = None,
                 rollout_key: str | None = None,
                 on_progress: Progress | None = None) -> ClassifyResult:
        """The `top_k` best classes (the model's default number when None) of each encoded
        image (JPEG, PNG or WebP bytes, or a base64 data URL string), best first, with what
        served each."""
        call = self._start_classify(images, model, top_k,
                                    CallOptions(priority, timeout_ms, model_version, rollout_key),
                                    on_progress)
        answers, ids = self._send(call)
        return classify_result(answers, ids)

    def infer(self, rows: np.ndarray, input_name: str, outputs: Sequence[str], *,
              model: str | None = None, priority: int | None = None,
              timeout_ms: float | None = None, model_version: int | None = None,
              parameters: Mapping[str, Any] | None = None,
              on_progress: Progress | None = None) -> InferResult:
        """The generic call under embed() and classify(): `rows` ([n, 1] BYTES) under
        `input_name`, chunked, retried and mapped to typed errors as they are; the
        `outputs` the model has, by name."""
        call = self._start(model, rows, input_name, outputs,
                           CallOptions(priority, timeout_ms, model_version), on_progress,
                           parameters)
        answers, ids = self._send(call)
        return infer_result(answers, ids, call.wanted)

    def _send(self, call: Call) -> tuple[list[Any], list[str]]:
        """Every chunk of the call, one after another; (answers, request ids). A
        priority-1 call goes to its model's interactive lane where one is loaded."""
        lane = self._lane_of(call)
        if lane is not None and lane not in self._lanes:
            self._lanes[lane] = self.is_ready(lane)
        call = self._routed(call, bool(lane and self._lanes[lane]))
        info = self.info(call.model)
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
                return self._call(self._client.infer, call.model, inputs, outputs=outputs,
                                  headers=self._headers(), **call.infer_kwargs(request_id))
            except TritonClientError as err:
                overflow = self._overflow(call, err)
                if overflow is not None:  # the same request to the lane's front, at once
                    call = overflow
                    continue
                delay = self._retry_delay(attempt, err, call.deadline)
                if delay is None:
                    raise
                time.sleep(delay)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


EmbedClient = Client  # the old name (it also classifies); deprecated, kept for one release

"""Blocking client for `embed` over HTTP or gRPC."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from client.core import (
    Access,
    CallOptions,
    ClientBase,
    EmbedResult,
    Progress,
    Protocol,
    assemble,
    build_request,
    chunks,
    new_request_id,
    text_tensor,
)
from client.errors import (
    AccessDeniedError,
    ServerUnreachableError,
    TritonClientError,
    from_exception,
)
from client.retry import RetryPolicy
from python_backends import contracts


class EmbedClient(ClientBase):
    """`embed(texts) -> (n, 384)` plus health, readiness and metadata calls.

    `api_key` goes to the front door, `admin_key` to the model config (see client.auth);
    `max_batch_size` spares the config call, which a client without the admin key cannot
    make (see client.core.Access).
    """

    def __init__(self, url: str | None = None, protocol: Protocol = "http",
                 model: str = contracts.EMBED_MODEL, retry: RetryPolicy | None = None,
                 network_timeout_s: float = 60.0, seed: int | None = None, *,
                 api_key: str | None = None, admin_key: str | None = None,
                 max_batch_size: int | None = None) -> None:
        super().__init__(url, protocol, model, retry, seed, aio=False,
                         access=Access(api_key, admin_key, max_batch_size))
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

    def is_live(self) -> bool:
        try:
            return bool(self._call(self._client.is_server_live, headers=self._headers()))
        except TritonClientError:
            return False

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

    def max_batch_size(self) -> int:
        """Rows per request: the config's max_batch_size, or the metadata fallback."""
        if self._max_batch is None:
            if self._fixed_max_batch is None:
                try:
                    self._remember(self.model_config())
                    return self._max_batch
                except AccessDeniedError:
                    pass  # no admin key: fall back to the open metadata
            self._remember_metadata(self.metadata())
        return self._max_batch

    def embed(self, texts: list[str], *, priority: int | None = None,
              timeout_ms: int | None = None, model_version: int | None = None,
              on_progress: Progress | None = None) -> np.ndarray:
        """Embeddings of `texts`, (n, 384) float32, in input order."""
        return self.embed_with_info(texts, priority=priority, timeout_ms=timeout_ms,
                                    model_version=model_version,
                                    on_progress=on_progress).embeddings

    def embed_with_info(self, texts: list[str], *, priority: int | None = None,
                        timeout_ms: int | None = None, model_version: int | None = None,
                        on_progress: Progress | None = None) -> EmbedResult:
        """Like embed(), plus the serving model version and request id of every chunk;
        chunks go one after another, `on_progress(done, total)` after each."""
        batch = text_tensor(texts)
        opts = CallOptions(priority, timeout_ms, model_version)
        deadline = opts.deadline()
        answers, ids = [], []
        for rows in chunks(len(batch), self.max_batch_size()):
            ids.append(new_request_id())
            answers.append(self._infer(batch[rows], opts, ids[-1], deadline))
            if on_progress is not None:
                on_progress(rows.stop, len(batch))
        return assemble(answers, ids)

    def _infer(self, batch: np.ndarray, opts: CallOptions, request_id: str,
               deadline: float | None) -> Any:
        inputs, outputs = build_request(self._module, batch, self._outputs)
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._call(self._client.infer, self.model, inputs, outputs=outputs,
                                  headers=self._headers(), **opts.infer_kwargs(request_id))
            except TritonClientError as err:
                delay = self._retry_delay(attempt, err, deadline)
                if delay is None:
                    raise
                time.sleep(delay)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EmbedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""asyncio client for `embed` over HTTP (aiohttp) or gRPC (grpc.aio); chunks run concurrently."""

from __future__ import annotations

import asyncio
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


async def first_error_cancels_all(calls: list[Any]) -> list[Any]:
    """The results of `calls` in order; the first failure cancels the others and is raised
    as itself (not wrapped in an ExceptionGroup)."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception()),
                      None)
        if failed is not None:
            raise failed.exception()
        return [t.result() for t in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class AsyncEmbedClient(ClientBase):
    """The asyncio twin of `EmbedClient` (same keys and fallback); use `async with`."""

    def __init__(self, url: str | None = None, protocol: Protocol = "http",
                 model: str = contracts.EMBED_MODEL, retry: RetryPolicy | None = None,
                 seed: int | None = None, *, api_key: str | None = None,
                 admin_key: str | None = None, max_batch_size: int | None = None,
                 max_in_flight: int | None = None) -> None:
        super().__init__(url, protocol, model, retry, seed, aio=True,
                         access=Access(api_key, admin_key, max_batch_size, max_in_flight))
        self._client = self._module.InferenceServerClient(self.url)

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:  # tritonclient and its transports raise many types
            raise from_exception(exc) from exc

    async def is_ready(self, model: str | None = None) -> bool:
        try:
            if model is None:
                return bool(await self._call(self._client.is_server_ready,
                                             headers=self._headers()))
            return bool(await self._call(self._client.is_model_ready, model,
                                         headers=self._headers()))
        except TritonClientError:
            return False

    async def wait_ready(self, timeout_s: float = 60.0, model: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await self.is_ready() and (model is None or await self.is_ready(model)):
                return
            await asyncio.sleep(0.2)
        raise ServerUnreachableError(f"server at {self.url} not ready after {timeout_s:.0f} s")

    async def metadata(self, model: str | None = None) -> Any:
        return await self._call(self._client.get_model_metadata, model or self.model,
                                headers=self._headers())

    async def model_config(self, model: str | None = None) -> Any:
        """The model config: a restricted API, sent with the admin key."""
        return await self._call(self._client.get_model_config, model or self.model,
                                headers=self._headers(admin=True))

    async def max_batch_size(self) -> int:
        """Rows per request: the config's max_batch_size, or the metadata fallback."""
        if self._max_batch is None:
            if self._fixed_max_batch is None:
                try:
                    self._remember(await self.model_config())
                    return self._max_batch
                except AccessDeniedError:
                    pass  # no admin key: fall back to the open metadata
            self._remember_metadata(await self.metadata())
        return self._max_batch

    async def embed(self, texts: list[str], *, priority: int | None = None,
                    timeout_ms: int | None = None, model_version: int | None = None,
                    on_progress: Progress | None = None) -> np.ndarray:
        result = await self.embed_with_info(texts, priority=priority, timeout_ms=timeout_ms,
                                            model_version=model_version, on_progress=on_progress)
        return result.embeddings

    async def embed_with_info(self, texts: list[str], *, priority: int | None = None,
                              timeout_ms: int | None = None, model_version: int | None = None,
                              on_progress: Progress | None = None) -> EmbedResult:
        """Chunks of `max_batch_size` texts, at most `max_in_flight` at once (one per
        instance of the model by default); `on_progress(done, total)` after each chunk.
        The first failed chunk cancels the rest and is raised."""
        batch = text_tensor(texts)
        opts = CallOptions(priority, timeout_ms, model_version)
        deadline = opts.deadline()
        slices = list(chunks(len(batch), await self.max_batch_size()))
        ids = [new_request_id() for _ in slices]
        gate, done = asyncio.Semaphore(self._in_flight), [0]

        async def send(rows: slice, request_id: str) -> Any:
            async with gate:
                answer = await self._infer(batch[rows], opts, request_id, deadline)
            done[0] += rows.stop - rows.start
            if on_progress is not None:
                on_progress(done[0], len(batch))
            return answer

        return assemble(await first_error_cancels_all(
            [send(rows, rid) for rows, rid in zip(slices, ids)]), ids)

    async def _infer(self, batch: np.ndarray, opts: CallOptions, request_id: str,
                     deadline: float | None) -> Any:
        inputs, outputs = build_request(self._module, batch, self._outputs)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._call(self._client.infer, self.model, inputs, outputs=outputs,
                                        headers=self._headers(),
                                        **opts.infer_kwargs(request_id))
            except TritonClientError as err:
                delay = self._retry_delay(attempt, err, deadline)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncEmbedClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

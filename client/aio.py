"""asyncio client over HTTP (aiohttp) or gRPC (grpc.aio): at most `max_in_flight` chunks
of a call at a time (one per instance of the model by default)."""

from __future__ import annotations

import asyncio
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


class AsyncClient(ClientBase):
    """The asyncio twin of `Client` (same URL rules, keys, `timeout=`, fallback and
    results); `async with`. Over HTTP a call past its deadline is cancelled."""

    def __init__(self, url: str | None = None, protocol: Protocol | None = None,
                 model: str = DEFAULT_MODEL, retry: RetryPolicy | None = None, *,
                 timeout: float | None = None, seed: int | None = None,
                 api_key: str | None = None, admin_key: str | None = None,
                 max_batch_size: int | None = None, max_in_flight: int | None = None,
                 lanes: bool = True) -> None:
        super().__init__(url, protocol, model, retry, seed, aio=True,
                         access=Access(api_key, admin_key, max_batch_size, max_in_flight,
                                       lanes), timeout=timeout)
        self._abandoned: set[asyncio.Task] = set()  # gRPC requests nobody waits for

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:  # tritonclient and its transports raise many types
            raise self._typed(exc) from exc

    async def is_ready(self, model: str | None = None) -> bool:
        try:
            if model is None:
                return bool(await self._call(self._client.is_server_ready,
                                             headers=self._headers(), **self._control_kwargs()))
            return bool(await self._call(self._client.is_model_ready, model,
                                         headers=self._headers(), **self._control_kwargs()))
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
                                headers=self._headers(), **self._control_kwargs())

    async def model_config(self, model: str | None = None) -> Any:
        """The model config: a restricted API, sent with the admin key."""
        return await self._call(self._client.get_model_config, model or self.model,
                                headers=self._headers(admin=True), **self._control_kwargs())

    async def info(self, model: str | None = None) -> ModelInfo:
        """As Client.info: from the config, else the metadata; once per model."""
        model = model or self.model
        if model not in self._infos:
            self._infos[model] = await self._read_info(model)
        return self._infos[model]

    async def _read_info(self, model: str) -> ModelInfo:
        if self.access.max_batch_size is None:
            try:
                return self.access.info(await self.model_config(model))
            except AccessDeniedError:
                pass  # no admin key: the open metadata, chunks of 1 row
        return self.access.info_without_config(await self.metadata(model))

    async def max_batch_size(self, model: str | None = None) -> int:
        return (await self.info(model)).max_batch

    async def embed(self, texts: list[str], *, model: str | None = None,
                    priority: int | None = None, timeout_ms: float | None = None,
                    model_version: int | None = None, rollout_key: str | None = None,
                    truncate: Truncate = None, chunk_overlap: int | None = None,
                    on_progress: Progress | None = None,
                    timeout: float | None = None) -> np.ndarray:
        """As Client.embed (`truncate`: True, False, "chunk" or None; `timeout`: the
        call's deadline in seconds, `timeout_ms`: Triton's queue timeout per request)."""
        result = await self.embed_with_info(texts, model=model, priority=priority,
                                            timeout_ms=timeout_ms, model_version=model_version,
                                            rollout_key=rollout_key, truncate=truncate,
                                            chunk_overlap=chunk_overlap,
                                            on_progress=on_progress, timeout=timeout)
        return result.embeddings

    async def embed_with_info(self, texts: list[str], *, model: str | None = None,
                              priority: int | None = None, timeout_ms: float | None = None,
                              model_version: int | None = None, rollout_key: str | None = None,
                              truncate: Truncate = None, chunk_overlap: int | None = None,
                              on_progress: Progress | None = None,
                              timeout: float | None = None) -> EmbedResult:
        """As Client.embed_with_info, the chunks concurrently (bounded); the first
        failed chunk cancels the rest and is raised."""
        call = self._start_embed(texts, model, truncate, chunk_overlap,
                                 CallOptions(priority, timeout_ms, model_version, rollout_key,
                                             timeout), on_progress)
        answers, ids = await self._send(call)
        return embed_result(answers, ids)

    async def classify(self, images: list[bytes | str], *, model: str | None = None,
                       top_k: int | None = None, priority: int | None = None,
                       timeout_ms: float | None = None, model_version: int | None = None,
                       rollout_key: str | None = None, on_progress: Progress | None = None,
                       timeout: float | None = None) -> ClassifyResult:
        """As Client.classify, the chunks concurrently (bounded)."""
        call = self._start_classify(images, model, top_k,
                                    CallOptions(priority, timeout_ms, model_version, rollout_key,
                                                timeout), on_progress)
        answers, ids = await self._send(call)
        return classify_result(answers, ids)

    async def infer(self, rows: np.ndarray, input_name: str, outputs: Sequence[str], *,
                    model: str | None = None, priority: int | None = None,
                    timeout_ms: float | None = None, model_version: int | None = None,
                    parameters: Mapping[str, Any] | None = None,
                    on_progress: Progress | None = None,
                    timeout: float | None = None) -> InferResult:
        """The generic call under embed() and classify() (see Client.infer)."""
        call = self._start(model, rows, input_name, outputs,
                           CallOptions(priority, timeout_ms, model_version, timeout=timeout),
                           on_progress, parameters)
        answers, ids = await self._send(call)
        return infer_result(answers, ids, call.wanted)

    async def _send(self, call: Call) -> tuple[list[Any], list[str]]:
        """Every chunk of the call, at most `in_flight` at once; (answers, request ids).
        A priority-1 call goes to its model's interactive lane where one is loaded."""
        lane = self._lane_of(call)
        if lane is not None and lane not in self._lanes:
            self._lanes[lane] = await self.is_ready(lane)
        call = self._routed(call, bool(lane and self._lanes[lane]))
        try:
            info = await self.info(call.model)
        except TritonClientError as err:
            if call.expired():
                raise call.deadline_error() from err
            raise
        gate, done = asyncio.Semaphore(info.in_flight), [0]
        pieces = call.chunks(info)

        async def send(rows: slice, request_id: str) -> Any:
            async with gate:
                answer = await self._infer(call, rows, request_id, info)
            done[0] += rows.stop - rows.start
            call.progress(done[0])
            return answer

        answers = await first_error_cancels_all([send(r, rid) for r, rid in pieces])
        return answers, [rid for _, rid in pieces]

    async def _infer(self, call: Call, rows: slice, request_id: str, info: ModelInfo) -> Any:
        inputs, outputs = self._request(call, rows, info)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._infer_once(call, inputs, outputs, request_id)
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
                await asyncio.sleep(delay)

    async def _infer_once(self, call: Call, inputs: list[Any], outputs: list[Any],
                          request_id: str) -> Any:
        """One request, within the call's deadline: over gRPC awaited at most the time left
        and never cancelled (tmr_client.core's doc says why), over HTTP cancelled when the
        time left runs out."""
        kwargs = {"outputs": outputs, "headers": self._headers(),
                  **call.infer_kwargs(request_id)}
        if self.protocol == "grpc":
            return await self._grpc_infer(call, inputs, kwargs)
        remaining = call.remaining()
        if remaining is None:
            return await self._call(self._client.infer, call.model, inputs, **kwargs)
        try:
            async with asyncio.timeout(remaining):  # in this task: Retry-After stays visible
                return await self._call(self._client.infer, call.model, inputs, **kwargs)
        except TimeoutError as err:
            raise call.deadline_error() from err

    async def _grpc_infer(self, call: Call, inputs: list[Any], kwargs: dict[str, Any]) -> Any:
        request = asyncio.ensure_future(self._call(
            self._client.infer, call.model, inputs, client_timeout=call.grpc_deadline(),
            **kwargs))
        try:
            done, _ = await asyncio.wait({request}, timeout=call.time_left())
        finally:  # past the deadline, or the caller cancelled: the RPC runs to its end
            if not request.done():
                self._abandon(request)
        if not done:
            raise call.deadline_error() from TimeoutError(f"no answer in {call.options.timeout} s")
        return request.result()

    def _abandon(self, request: asyncio.Task) -> None:
        self._abandoned.add(request)
        request.add_done_callback(self._forget)

    def _forget(self, request: asyncio.Task) -> None:
        self._abandoned.discard(request)
        if not request.cancelled():
            request.exception()  # retrieved: nobody waits for it

    async def close(self) -> None:
        """Close the connection, once the gRPC requests that callers stopped waiting for
        have answered (at most ABANDONED_GRACE_S): closing a channel cancels its RPCs."""
        if self._abandoned:
            await asyncio.wait(set(self._abandoned), timeout=ABANDONED_GRACE_S)
        await self._client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


"""asyncio client over HTTP (aiohttp) or gRPC (grpc.aio): at most `max_in_flight` chunks
of a call at a time (one per instance of the model by default).

Everything but the I/O is `ClientBase`'s (tmr_client.core), as for the sync `Client`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Unpack

import numpy as np
from tmr_client.calls import Call, Request
from tmr_client.contract import READY_WAIT_S
from tmr_client.core import READY_POLL_S, ClientBase
from tmr_client.deadlines import ABANDONED_GRACE_S
from tmr_client.errors import AccessDeniedError, TritonClientError
from tmr_client.model_info import ModelInfo
from tmr_client.options import (
    CallOptions,
    ClassifyKeywords,
    CountKeywords,
    EmbedKeywords,
    InferKeywords,
    RerankKeywords,
    SimilarityKeywords,
    verb_options,
)
from tmr_client.ranking import Ranked, RerankResult
from tmr_client.results import (
    ClassifyResult,
    EmbedResult,
    InferResult,
    SimilarityResult,
    TokenCounts,
)


async def first_error_cancels_all(calls: list[Awaitable[Any]]) -> list[Any]:
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
    """The asyncio twin of `Client` (same arguments, URL rules, keys, `timeout=`, fallback
    and results); `async with`. Over HTTP a call past its deadline is cancelled."""

    _aio = True

    async def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        with self._mapped():
            return await fn(*args, **kwargs)

    async def is_ready(self, model: str | None = None) -> bool:
        """As Client.is_ready."""
        check, args = self._readiness(model)
        try:
            return bool(await self._call(check, *args, **self._control()))
        except TritonClientError:
            return False

    async def wait_ready(self, timeout_s: float = READY_WAIT_S,
                         model: str | None = None) -> None:
        """As Client.wait_ready: the same error, naming the model when one was asked for."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if await self.is_ready() and (model is None or await self.is_ready(model)):
                return
            await asyncio.sleep(READY_POLL_S)
        raise self._not_ready(timeout_s, model)

    async def metadata(self, model: str | None = None) -> Any:
        return await self._call(self._client.get_model_metadata, model or self.model,
                                **self._control())

    async def model_config(self, model: str | None = None) -> Any:
        """As Client.model_config (the admin key's)."""
        return await self._call(self._client.get_model_config, model or self.model,
                                **self._control(admin=True))

    async def info(self, model: str | None = None) -> ModelInfo:
        """As Client.info: from the config, else the metadata; once per model."""
        model = model or self.model
        if model not in self._infos:
            self._infos[model] = await self._read_info(model)
        return self._infos[model]

    async def _read_info(self, model: str) -> ModelInfo:
        if self.access.needs_config:
            try:
                return self.access.info(await self.model_config(model))
            except AccessDeniedError:
                pass  # no admin key: the open metadata, chunks of 1 row
        return self.access.info_without_config(await self.metadata(model))

    async def max_batch_size(self, model: str | None = None) -> int:
        return (await self.info(model)).max_batch

    async def embed(self, texts: Iterable[str | bytes], *, options: CallOptions | None = None,
                    **keywords: Unpack[EmbedKeywords]) -> np.ndarray:
        """As Client.embed."""
        options = verb_options(AsyncClient.embed, options, keywords)
        return (await self._send(self._embed_call(texts, options))).embeddings

    async def embed_with_info(self, texts: Iterable[str | bytes], *,
                              options: CallOptions | None = None,
                              **keywords: Unpack[EmbedKeywords]) -> EmbedResult:
        """As Client.embed_with_info, the chunks concurrently (bounded); the first
        failed chunk cancels the rest and is raised."""
        options = verb_options(AsyncClient.embed_with_info, options, keywords)
        return await self._send(self._embed_call(texts, options))

    async def count_tokens(self, texts: Iterable[str | bytes], *,
                           options: CallOptions | None = None,
                           **keywords: Unpack[CountKeywords]) -> TokenCounts:
        """As Client.count_tokens."""
        options = verb_options(AsyncClient.count_tokens, options, keywords)
        return await self._send(self._count_call(texts, options))

    async def similarity(self, source: str | bytes, texts: Iterable[str | bytes], *,
                         options: CallOptions | None = None,
                         **keywords: Unpack[SimilarityKeywords]) -> SimilarityResult:
        """As Client.similarity: one request."""
        options = verb_options(AsyncClient.similarity, options, keywords)
        return await self._send(self._similarity_call(source, texts, options))

    async def classify(self, images: Iterable[bytes | str], *,
                       options: CallOptions | None = None,
                       **keywords: Unpack[ClassifyKeywords]) -> ClassifyResult:
        """As Client.classify, the chunks concurrently (bounded)."""
        options = verb_options(AsyncClient.classify, options, keywords)
        return await self._send(self._classify_call(images, options))

    async def rerank(self, query: str | bytes, documents: Iterable[str | bytes], *,
                     top_n: int | None = None, options: CallOptions | None = None,
                     **keywords: Unpack[RerankKeywords]) -> list[Ranked]:
        """As Client.rerank, the chunks concurrently (bounded)."""
        options = verb_options(AsyncClient.rerank, options, keywords)
        return (await self._send(self._rerank_call(query, documents, top_n, options))).ranked

    async def rerank_with_info(self, query: str | bytes, documents: Iterable[str | bytes], *,
                               top_n: int | None = None, options: CallOptions | None = None,
                               **keywords: Unpack[RerankKeywords]) -> RerankResult:
        """As Client.rerank_with_info, the chunks concurrently (bounded)."""
        options = verb_options(AsyncClient.rerank_with_info, options, keywords)
        return await self._send(self._rerank_call(query, documents, top_n, options))

    async def infer(self, rows: np.ndarray, input_name: str | tuple[str, ...],
                    outputs: Sequence[str], *,
                    options: CallOptions | None = None,
                    **keywords: Unpack[InferKeywords]) -> InferResult:
        """As Client.infer, the chunks concurrently (bounded)."""
        options = verb_options(AsyncClient.infer, options, keywords)
        return await self._send(self._infer_call(rows, input_name, outputs, options))

    async def _send(self, call: Call) -> Any:
        """Every chunk of the call, at most `in_flight` at once, answers put together."""
        call, info = await self._prepare(call)
        pieces, report = call.chunks(info), call.reporter()
        gate = asyncio.Semaphore(info.in_flight)

        async def send(rows: slice, request_id: str) -> Any:
            async with gate:
                answer = await self._infer(call, self._request(call, rows, request_id, info))
            report(rows)
            return answer

        answers = await first_error_cancels_all([send(r, rid) for r, rid in pieces])
        return call.build(answers, [request_id for _, request_id in pieces])

    async def _prepare(self, call: Call) -> tuple[Call, ModelInfo]:
        """As Client._prepare: the call routed, and its model's info."""
        if (lane := self._lane_to_ask(call)) is not None:
            self._lanes[lane] = await self.is_ready(lane)
        call = self._routed(call)
        with call.deadline_scope():
            return call, await self.info(call.model)

    async def _infer(self, call: Call, request: Request) -> Any:
        """One request, tried again as `on_failure` decides."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._infer_once(call, request)
            except TritonClientError as err:
                call, delay = self._next_try(call, err, attempt)
            await asyncio.sleep(delay)

    async def _http_infer(self, call: Call, request: Request) -> Any:
        """One try over HTTP, cancelled when the time left runs out."""
        kwargs = self._infer_kwargs(call, request)
        remaining = call.remaining()
        if remaining is None:
            return await self._call(self._client.infer, call.model, request.inputs, **kwargs)
        try:
            async with asyncio.timeout(remaining):  # in this task: Retry-After stays visible
                return await self._call(self._client.infer, call.model, request.inputs,
                                        **kwargs)
        except TimeoutError as err:
            raise call.deadline_error() from err

    async def _grpc_infer(self, call: Call, request: Request) -> Any:
        """One try over gRPC, awaited at most the time left and never cancelled
        (tmr_client.core's doc says why)."""
        sent = asyncio.ensure_future(self._call(
            self._client.infer, call.model, request.inputs,
            client_timeout=call.deadline.grpc(call.model), **self._infer_kwargs(call, request)))
        try:
            done, _ = await asyncio.wait({sent}, timeout=call.deadline.left())
        finally:  # past the deadline, or the caller cancelled: the RPC runs to its end
            if not sent.done():
                self._abandon(sent)
            elif not sent.cancelled():
                sent.exception()  # retrieved, though a cancelled caller never reads it
        if not done:
            raise call.deadline_error() from TimeoutError(f"no answer in {call.options.timeout} s")
        return sent.result()

    def _abandon(self, request: asyncio.Task) -> None:
        self._abandoned.add(request)
        request.add_done_callback(self._forget)

    def _forget(self, request: asyncio.Task) -> None:
        self._abandoned.discard(request)
        if not request.cancelled():
            request.exception()  # retrieved: nobody waits for it

    async def close(self) -> None:
        """As Client.close: once the abandoned gRPC requests have answered."""
        if self._abandoned:
            await asyncio.wait(set(self._abandoned), timeout=ABANDONED_GRACE_S)
        await self._client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

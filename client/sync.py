"""Blocking client over HTTP or gRPC: chunks are sent one after another.

Everything but the I/O is `ClientBase`'s (tmr_client.core): each verb builds its
`CallOptions` and delegates; `_send` and `_infer` only drive the transport.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterable, Sequence
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


class Client(ClientBase):
    """The client of every front model: `embed(texts) -> (n, dim)` for a text-embedding
    one, `classify(images)` for an image-classification one, `rerank(query, documents)`
    for a text-ranking one, plus readiness and metadata calls.

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
    tmr_client.model_info.Access). `model` is the default front model of every call.

    Each verb takes its keywords, those of the TypedDict its `**keywords` unpack
    (tmr_client.options: `EmbedKeywords`, ...), or one `options=CallOptions(...)`, not
    both; a keyword it does not take is a TypeError, as for any Python function.
    """

    _aio = False

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._mapped():
            return fn(*args, **kwargs)

    def is_ready(self, model: str | None = None) -> bool:
        """Whether the server (or `model`) says it is ready; False when it cannot answer."""
        check, args = self._readiness(model)
        try:
            return bool(self._call(check, *args, **self._control()))
        except TritonClientError:
            return False

    def wait_ready(self, timeout_s: float = READY_WAIT_S, model: str | None = None) -> None:
        """Block until the server (and `model`, if given) is ready, or raise
        ServerUnreachableError naming what was not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_ready() and (model is None or self.is_ready(model)):
                return
            time.sleep(READY_POLL_S)
        raise self._not_ready(timeout_s, model)

    def metadata(self, model: str | None = None) -> Any:
        return self._call(self._client.get_model_metadata, model or self.model,
                          **self._control())

    def model_config(self, model: str | None = None) -> Any:
        """The model config: a restricted API, sent with the admin key."""
        return self._call(self._client.get_model_config, model or self.model,
                          **self._control(admin=True))

    def info(self, model: str | None = None) -> ModelInfo:
        """Rows per request, outputs and chunks in flight: from the config, or the metadata
        without the admin key (see tmr_client.model_info.Access); read once per model."""
        model = model or self.model
        if model not in self._infos:
            self._infos[model] = self._read_info(model)
        return self._infos[model]

    def _read_info(self, model: str) -> ModelInfo:
        if self.access.needs_config:
            try:
                return self.access.info(self.model_config(model))
            except AccessDeniedError:
                pass  # no admin key: the open metadata, chunks of 1 row
        return self.access.info_without_config(self.metadata(model))

    def max_batch_size(self, model: str | None = None) -> int:
        return self.info(model).max_batch

    def embed(self, texts: Iterable[str | bytes], *, options: CallOptions | None = None,
              **keywords: Unpack[EmbedKeywords]) -> np.ndarray:
        """Embeddings of `texts`, (n, dim) float32, in input order. A text over the
        model's length is cut with `truncate=True`, refused with `False`, embedded in
        windows pooled into one vector with `"chunk"` (overlapping by `chunk_overlap`
        tokens, else the model's), and left to the model's policy with None.
        `prompt_name`: one of the model's prompts before each text (else its default);
        `dimensions`: one of its Matryoshka sizes to cut the vectors to (re-normalised).

        `timeout`: seconds for the whole call, retries and chunks included (else the
        client's); `timeout_ms`: Triton's queue timeout for each request (server side)."""
        options = verb_options(Client.embed, options, keywords)
        return self._send(self._embed_call(texts, options)).embeddings

    def embed_with_info(self, texts: Iterable[str | bytes], *,
                        options: CallOptions | None = None,
                        **keywords: Unpack[EmbedKeywords]) -> EmbedResult:
        """Like embed(), plus what served each row, its tokens, the tokens truncation
        dropped, its windows, and each chunk's model version and request id;
        `on_progress(done, total)` after each chunk."""
        options = verb_options(Client.embed_with_info, options, keywords)
        return self._send(self._embed_call(texts, options))

    def count_tokens(self, texts: Iterable[str | bytes], *, options: CallOptions | None = None,
                     **keywords: Unpack[CountKeywords]) -> TokenCounts:
        """Each text's tokens as the model counts them (special tokens and the prompt
        included) and what each overlength policy would do with it (TokenCount.outcome),
        without running the encoder; bad texts get embed()'s errors."""
        options = verb_options(Client.count_tokens, options, keywords)
        return self._send(self._count_call(texts, options))

    def similarity(self, source: str | bytes, texts: Iterable[str | bytes], *,
                   options: CallOptions | None = None,
                   **keywords: Unpack[SimilarityKeywords]) -> SimilarityResult:
        """The cosine of each text with `source`, embedded together in one request: at
        most the model's max_batch_size - 1 texts, refused before sending when the
        client knows the model's config (else by the server)."""
        options = verb_options(Client.similarity, options, keywords)
        return self._send(self._similarity_call(source, texts, options))

    def classify(self, images: Iterable[bytes | str], *, options: CallOptions | None = None,
                 **keywords: Unpack[ClassifyKeywords]) -> ClassifyResult:
        """The `top_k` best classes (the model's default number when None) of each encoded
        image (JPEG, PNG or WebP bytes, or a base64 data URL string), best first, with what
        served each. `timeout` and `timeout_ms` as in embed()."""
        options = verb_options(Client.classify, options, keywords)
        return self._send(self._classify_call(images, options))

    def rerank(self, query: str | bytes, documents: Iterable[str | bytes], *,
               top_n: int | None = None, options: CallOptions | None = None,
               **keywords: Unpack[RerankKeywords]) -> list[Ranked]:
        """`documents` by their relevance to `query` as a text_ranking front scores each
        (query, document) pair: `Ranked(index, score, document)`, best first (equal
        scores in input order), the first `top_n` (None: all). `model=` is required (the
        SDK has no default reranker); `raw_scores=True` gives the model's logits instead
        of its activation (sigmoid by default); `truncate` as in embed() (a reranker's
        policy is "truncate" by default). Many documents are cut into requests as
        embed()'s texts are. Refused before sending: a blank or non-text query, no
        documents, a document that is not str or bytes (`documents[i]`), a `top_n` that
        is not an integer >= 1."""
        options = verb_options(Client.rerank, options, keywords)
        return self._send(self._rerank_call(query, documents, top_n, options)).ranked

    def rerank_with_info(self, query: str | bytes, documents: Iterable[str | bytes], *,
                         top_n: int | None = None, options: CallOptions | None = None,
                         **keywords: Unpack[RerankKeywords]) -> RerankResult:
        """Like rerank() (`.ranked`), plus every score in input order and, per document,
        what served it, its tokens, the tokens truncation dropped and its windows;
        `on_progress(done, total)` after each chunk."""
        options = verb_options(Client.rerank_with_info, options, keywords)
        return self._send(self._rerank_call(query, documents, top_n, options))

    def infer(self, rows: np.ndarray, input_name: str | tuple[str, ...],
              outputs: Sequence[str], *,
              options: CallOptions | None = None,
              **keywords: Unpack[InferKeywords]) -> InferResult:
        """The generic call under embed() and classify(): `rows` ([n, 1] BYTES) under
        `input_name` (or [n, k] under k names, a column each: a reranker's QUERY and
        DOCUMENT), chunked, retried and mapped to typed errors as they are; the `outputs`
        the model has, by name."""
        options = verb_options(Client.infer, options, keywords)
        return self._send(self._infer_call(rows, input_name, outputs, options))

    def _send(self, call: Call) -> Any:
        """Every chunk of the call, one after another, answers put together by the call."""
        call, info = self._prepare(call)
        pieces, report, answers = call.chunks(info), call.reporter(), []
        for rows, request_id in pieces:
            answers.append(self._infer(call, self._request(call, rows, request_id, info)))
            report(rows)
        return call.build(answers, [request_id for _, request_id in pieces])

    def _prepare(self, call: Call) -> tuple[Call, ModelInfo]:
        """The call routed (a priority-1 call to its model's interactive lane where one is
        loaded: asked once per lane) and its model's info."""
        if (lane := self._lane_to_ask(call)) is not None:
            self._lanes[lane] = self.is_ready(lane)
        call = self._routed(call)
        with call.deadline_scope():
            return call, self.info(call.model)

    def _infer(self, call: Call, request: Request) -> Any:
        """One request, tried again as `on_failure` decides."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._infer_once(call, request)
            except TritonClientError as err:
                call, delay = self._next_try(call, err, attempt)
            time.sleep(delay)

    def _http_infer(self, call: Call, request: Request) -> Any:
        """One try over HTTP, within the call's deadline: sent in the background and
        awaited at most the time left."""
        kwargs = self._infer_kwargs(call, request)
        remaining = call.remaining()
        if remaining is None:
            return self._call(self._client.infer, call.model, request.inputs, **kwargs)
        pending = self._call(self._client.async_infer, call.model, request.inputs, **kwargs)
        try:
            return self._call(pending.get_result, timeout=remaining)
        except TritonClientError:
            # Let the request go: its greenlet holds the client's one pooled connection,
            # and one kept alive (a caller that keeps this error keeps it) never gave it
            # back, so the next call raised gevent's LoopExit. Killed, it drops that
            # connection; Triton still serves the request (HTTP cannot cancel it in 2.51).
            greenlet = getattr(pending, "_greenlet", None)
            if greenlet is not None and not greenlet.dead:
                greenlet.kill(block=False)
            raise

    def _grpc_infer(self, call: Call, request: Request) -> Any:
        """One try over gRPC, awaited at most the time left and never cancelled
        (tmr_client.core's doc says why)."""
        answer: queue.SimpleQueue = queue.SimpleQueue()
        self._call(self._client.async_infer, call.model, request.inputs,
                   lambda result, error: answer.put((result, error)),
                   client_timeout=call.deadline.grpc(call.model),
                   **self._infer_kwargs(call, request))
        try:
            result, error = answer.get(timeout=call.deadline.left())
        except queue.Empty as err:
            # Kept until answered: a long-lived client holds only the ones still running.
            self._abandoned = {q for q in self._abandoned if q.empty()} | {answer}
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

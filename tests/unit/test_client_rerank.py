"""rerank(): a query and its documents as (QUERY, DOCUMENT) rows, refused before sending
when wrong, cut into requests like embed's texts, and the scores put back together as a
ranking, best first and cut to top_n. No server: each client's one try is a fake
reranker that scores a document by its length."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tmr_client import AsyncClient, Client, InvalidInputError, Ranked, RerankResult
from tmr_client.calls import Call, Request
from tmr_client.chunking import ENVELOPE_BYTES, LENGTH_PREFIX_BYTES, byte_chunks
from tmr_client.contract import DOCUMENT, QUERY, SCORE, SERVED_BY, TOKENS
from tmr_client.core import NO_RERANKER
from tmr_client.model_info import ModelInfo
from tmr_client.ranking import check_top_n, rank_order, ranking, rerank_result
from tmr_client.shaping import RERANK_INPUTS, RERANK_OUTPUTS, pair_tensor, request_for
from tritonclient.utils import deserialize_bytes_tensor

MODEL = "reranker"
DOCS = ["a", "bbbb", "cc", "dddd", "e", "ffffff", "gg", "hhh", "iiiii", "j"]


def test_pair_tensor_repeats_the_query_beside_each_document():
    rows = pair_tensor("what?", ["a cat", b"raw", "日本"])
    assert rows.shape == (3, 2) and rows.dtype == np.object_
    assert rows.tolist() == [[b"what?", b"a cat"], [b"what?", b"raw"],
                             [b"what?", "日本".encode()]]


@pytest.mark.parametrize(("query", "documents", "message"), [
    ("", ["a"], "query is empty; send the text to rank the documents by"),
    (b"  \n", ["a"], "query is empty"),
    (None, ["a"], "query is None, not str or bytes"),
    (["q"], ["a"], "query is list, not str or bytes"),
    ("q", [], "documents is empty; send at least one document"),
    ("q", ["a", 5], r"documents\[1\] is int, not str or bytes"),
    ("q", ["a", None], r"documents\[1\] is None, not str or bytes"),
    ("q", "a single string", "documents must be a sequence of strings, not a single string"),
    ("q", None, "documents must be a sequence of strings, not None"),
])
def test_pair_tensor_refuses_a_bad_query_or_document_naming_it(query, documents, message):
    with pytest.raises(InvalidInputError, match=message):
        pair_tensor(query, documents)


@pytest.mark.parametrize("top_n", [0, -1, True, 1.5, "3"])
def test_top_n_must_be_a_positive_integer(top_n):
    with pytest.raises(InvalidInputError, match=f"top_n must be an integer >= 1 or None, "
                                                f"got {top_n!r}"):
        check_top_n(top_n)


def test_rank_order_is_best_first_with_ties_in_input_order_and_nan_last():
    scores = np.array([0.2, 0.9, np.nan, 0.9, 0.5, 0.2], dtype=np.float32)
    assert rank_order(scores) == [1, 3, 4, 0, 5, 2]
    assert rank_order(scores, 2) == [1, 3]
    assert rank_order(scores, 99) == [1, 3, 4, 0, 5, 2]
    assert rank_order(np.array([-3.5, 7.0, -0.1])) == [1, 2, 0]  # raw logits too


def test_ranking_keeps_each_documents_index_score_and_text():
    assert ranking(np.array([0.1, 0.7]), ["x", b"y"], 1) == [Ranked(1, pytest.approx(0.7), b"y")]


def test_request_for_puts_each_column_under_its_input_on_both_protocols():
    rows = pair_tensor("q", ["d1", "d22"])
    for module in (tritonclient.http, tritonclient.grpc):
        inputs, outputs = request_for(module, rows, RERANK_INPUTS, [SCORE])
        assert [(t.name(), t.shape()) for t in inputs] == [(QUERY, [2, 1]), (DOCUMENT, [2, 1])]
        assert [sent(t).tolist() for t in inputs] == [[b"q", b"q"], [b"d1", b"d22"]]
        assert len(outputs) == 1


def test_one_input_takes_the_rows_whole_as_before():
    rows = np.array([[b"a", b"b"]], dtype=np.object_)
    (tensor,), _ = request_for(tritonclient.http, rows, ("TEXT",), [])
    assert tensor.shape() == [1, 2]


def test_a_pair_costs_both_texts_and_both_length_prefixes():
    limit = ENVELOPE_BYTES + 1000  # 1000 bytes of data
    pair = 500 - 2 * LENGTH_PREFIX_BYTES  # a query and a document with their prefixes
    assert byte_chunks([pair, pair], 8, limit, columns=2) == [slice(0, 2)]
    assert byte_chunks([pair + 1, pair], 8, limit, columns=2) == [slice(0, 1), slice(1, 2)]


def test_a_pair_too_large_for_one_request_is_named_by_both_inputs():
    call = Call(MODEL, pair_tensor("q" * 5_000_000, ["d"]), RERANK_INPUTS, RERANK_OUTPUTS)
    with pytest.raises(Exception, match=r"QUERY\+DOCUMENT\[0\] is 5000001 bytes"):
        call.chunks(info())


class Answer:
    """What the fake reranker answers: its outputs, and the model's name and version."""

    def __init__(self, outputs: dict[str, np.ndarray]) -> None:
        self.outputs = outputs

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.outputs.get(name)

    def get_response(self) -> dict[str, str]:
        return {"model_name": MODEL, "model_version": "1"}


def sent(tensor: Any) -> np.ndarray:
    """The values an InferInput carries, over either protocol."""
    raw = tensor._get_binary_data() if hasattr(tensor, "_get_binary_data") else \
        tensor._get_content()
    return deserialize_bytes_tensor(raw)


class Reranker:
    """A reranker that scores a document by its length; it keeps every request it got."""

    def __init__(self) -> None:
        self.requests: list[tuple[Call, Request]] = []

    def answer(self, call: Call, request: Request) -> Answer:
        self.requests.append((call, request))
        queries, documents = (sent(t) for t in request.inputs)
        assert set(queries) == {b"what?"}
        n = len(documents)
        return Answer({SCORE: np.array([[len(d)] for d in documents], np.float32),
                       SERVED_BY: np.array([[b"enc v1"]] * n, np.object_),
                       TOKENS: np.array([[len(d) + 3] for d in documents], np.int32)})


def info(rows: int = 4) -> ModelInfo:
    return ModelInfo(max_batch=rows, outputs=RERANK_OUTPUTS, in_flight=2, request_rows=rows,
                     chunk_rows=2)


def rerank(url: str, verb: str, query: str, documents: list[str],
           **kwargs: Any) -> tuple[Any, Reranker]:
    """`verb` of a sync client (the documents as a list) and of an asyncio one (as a
    generator) on the fake reranker: both must rank alike."""
    fake = Reranker()

    def prepared(client: Any) -> Any:
        client._infos[MODEL] = info()
        setattr(client, "_grpc_infer" if client.protocol == "grpc" else "_http_infer",
                fake.answer if isinstance(client, Client) else fake_async)
        return client

    async def fake_async(call: Call, request: Request) -> Answer:
        return fake.answer(call, request)

    async def run_async() -> Any:
        async with prepared(AsyncClient(url)) as c:
            return await getattr(c, verb)(query, iter(documents), **kwargs)

    with prepared(Client(url)) as c:
        result = getattr(c, verb)(query, list(documents), **kwargs)
    other = asyncio.run(run_async())
    assert (other.ranked, other.tokens) == (result.ranked, result.tokens) \
        if isinstance(result, RerankResult) else other == result
    return result, fake


@pytest.mark.parametrize("url", ["localhost:8000", "grpc://localhost:8001"])
def test_rerank_cuts_the_documents_into_requests_and_ranks_them_all(url):
    ranked, fake = rerank(url, "rerank", "what?", DOCS, model=MODEL, top_n=3)
    assert ranked == [Ranked(5, 6.0, "ffffff"), Ranked(8, 5.0, "iiiii"),
                      Ranked(1, 4.0, "bbbb")]
    sizes = [request.inputs[0].shape()[0] for _, request in fake.requests]
    assert sizes[:3] == [4, 4, 2] and sorted(sizes[3:]) == [2, 4, 4]  # sync, then asyncio


def test_rerank_with_info_keeps_each_documents_score_and_tokens_in_input_order():
    result, _ = rerank("localhost:8000", "rerank_with_info", "what?", DOCS, model=MODEL)
    assert isinstance(result, RerankResult)
    assert result.scores.tolist() == [float(len(d)) for d in DOCS]
    assert result.tokens == [len(d) + 3 for d in DOCS]
    assert result.served_by == ["enc v1"] * len(DOCS)
    assert [r.index for r in result.ranked] == [5, 8, 1, 3, 7, 2, 6, 0, 4, 9]  # ties by index
    assert (result.model_name, len(result.request_ids)) == (MODEL, 3)


def test_rerank_sends_raw_scores_and_truncate_as_request_parameters():
    _, fake = rerank("localhost:8000", "rerank", "what?", DOCS[:3], model=MODEL,
                     raw_scores=True, truncate="chunk", chunk_overlap=16)
    call, request = fake.requests[0]
    assert call.infer_kwargs(request.request_id)["parameters"] == {
        "raw_scores": True, "truncate": "chunk", "chunk_overlap": 16}
    assert [r.inputs[0].shape()[0] for _, r in fake.requests[:2]] == [2, 1]  # chunk_rows
    _, fake = rerank("localhost:8000", "rerank", "what?", DOCS[:3], model=MODEL,
                     raw_scores=False)
    call, request = fake.requests[0]
    assert "parameters" not in call.infer_kwargs(request.request_id)


def test_rerank_result_puts_the_chunks_together_before_ranking():
    first = Answer({SCORE: np.array([[0.1], [0.8]], np.float32)})
    second = Answer({SCORE: np.array([[0.9]], np.float32)})
    result = rerank_result([first, second], ["r1", "r2"], documents=["a", "b", "c"], top_n=2)
    assert [(r.index, r.document) for r in result.ranked] == [(2, "c"), (1, "b")]
    assert result.request_ids == ["r1", "r2"] and result.tokens == []


@pytest.mark.parametrize("client", [Client, AsyncClient])
def test_rerank_without_a_model_is_a_type_error_saying_how_to_add_one(client):
    async def run_async() -> None:
        async with AsyncClient("localhost:8000") as c:
            await c.rerank("q", ["a"])

    with pytest.raises(TypeError, match="rerank needs model=") as err:
        if client is Client:
            with Client("localhost:8000", model="not_a_reranker") as c:
                c.rerank("q", ["a"])
        else:
            asyncio.run(run_async())
    assert str(err.value) == NO_RERANKER
    assert "tmr add NAME --family text_ranking --from FOLDER" in NO_RERANKER


def test_chunks_failing_together_over_grpc_leave_no_error_unread():
    """Two chunks in flight (in_flight 2) both refused at once, as a busy server's queue
    does: the caller gets the error, and no failed RPC is left for asyncio to report as
    "Task exception was never retrieved" (found by perf.rerank at 16 clients)."""
    import gc

    from tmr_client.errors import DeadlineExceededError

    reported: list[str] = []

    async def refused(fn: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        raise DeadlineExceededError("Request timeout expired", "UNAVAILABLE")

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: reported.append(context["message"]))
        async with AsyncClient("grpc://localhost:8001") as c:
            c._infos[MODEL] = info()
            c._call = refused
            for _ in range(5):
                with pytest.raises(DeadlineExceededError):
                    await c.rerank("q", DOCS, model=MODEL)
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert reported == []

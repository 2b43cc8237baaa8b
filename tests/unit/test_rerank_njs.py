"""server/nginx/rerank.js's pure functions (POST /v1/rerank and /v2/rerank, Cohere's
shape), run by the real njs as test_openai_njs.py runs openai.js: request checks, the
pairs' subrequests, the ranked answer (read back by the Cohere SDK's own models) and the
front's row names made the request's own."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from cohere.types import RerankResponse
from cohere.v2.types import V2RerankResponse
from tmr_client.contract import DOCUMENT, QUERY, RAW_SCORES, SCORE, TOKENS
from tmr_client.limits import HTTP_MAX_BODY_BYTES

from core.families import TEXT_RANKING
from runtime.errors import InvalidInputError
from runtime.pairs import PairFrame, fit_pair
from runtime.tokenization import TextLimits, TextOptions, decode_texts
from server.front_door import TEMPLATE
from tests.unit.test_openai_njs import error_of, njs


def rerank(body: Any, version: str = "2", priority: str | None = None) -> dict:
    text = body if isinstance(body, str) else json.dumps(body)
    return njs(f"rerank.parseRerank({json.dumps(text)}, table, {json.dumps(priority)}, "
               f"{json.dumps(version)})")


BODY = {"model": "marco", "query": "what is a cat?", "documents": ["a cat", "a car"]}

# -- the contract ------------------------------------------------------------------------


def test_the_route_sends_and_reads_the_familys_tensors():
    assert njs("[openai.QUERY_INPUT, openai.DOCUMENT_INPUT]") == [QUERY, DOCUMENT]
    assert njs("rerank.OUTPUTS") == [SCORE, TOKENS]
    assert [t.name for t in TEXT_RANKING.contract.front_inputs] == [QUERY, DOCUMENT]
    outputs = [t.name for t in TEXT_RANKING.contract.front_outputs]
    assert SCORE in outputs and TOKENS in outputs


def test_the_pairs_are_the_query_on_every_row_beside_each_document():
    inputs = njs("rerank.pairInputs('q', ['a', 'b'])")
    assert inputs == {QUERY: ["q", "q"], DOCUMENT: ["a", "b"]}
    body = json.loads(njs("openai.kserveBody(rerank.pairInputs('q', ['a', 'b']), 1, "
                          "{raw_scores: true}, [['SCORE', false], ['TOKENS', false]])"))
    assert [(i["name"], i["shape"], i["data"]) for i in body["inputs"]] == [
        (QUERY, [2, 1], ["q", "q"]), (DOCUMENT, [2, 1], ["a", "b"])]
    assert body["outputs"] == [{"name": n, "parameters": {"binary_data": False}}
                               for n in (SCORE, TOKENS)]
    assert body["parameters"] == {RAW_SCORES: True, "priority": 1}


# -- the request -------------------------------------------------------------------------


def test_a_v2_body_becomes_the_query_and_the_documents_of_the_named_model_or_alias():
    for name in ("marco", "rank", "cross-encoder/marco"):
        got = rerank({**BODY, "model": name})
        assert got["model"]["front"] == "rank" and got["version"] == "2"
        assert (got["query"], got["texts"]) == ("what is a cat?", ["a cat", "a car"])
        assert (got["topN"], got["returnDocuments"], got["documents"]) == (None, False, None)
        assert (got["priority"], got["parameters"]) == (None, {})


def test_v1_object_documents_are_ranked_by_their_text_and_kept_whole_to_return():
    docs = [{"text": "a cat", "id": "7"}, "a car"]
    got = rerank({**BODY, "documents": docs, "return_documents": True, "top_n": 1}, "1")
    assert got["texts"] == ["a cat", "a car"] and got["documents"] == docs
    assert (got["version"], got["topN"], got["returnDocuments"]) == ("1", 1, True)


def test_the_extensions_become_the_front_models_request_parameters():
    got = rerank({**BODY, "raw_scores": True, "truncate": "chunk", "chunk_overlap": 4}, "2",
                 "high")
    assert got["parameters"] == {RAW_SCORES: True, "truncate": "chunk", "chunk_overlap": 4}
    assert got["priority"] == 1
    assert rerank({**BODY, "raw_scores": False, "truncate": False})["parameters"] == {
        "truncate": False}


@pytest.mark.parametrize("extra", [
    {key: None for key in ("top_n", "return_documents", "raw_scores", "rank_fields",
                           "max_chunks_per_doc", "max_tokens_per_doc", "relevant_spans",
                           "priority", "truncate", "prompt_name")},
    {"max_tokens_per_doc": 4096}, {"max_tokens_per_doc": 512},
    {"relevant_spans": {"mode": "disabled"}},
    {"top_n": 50},  # more than the documents: all of them, as Cohere answers
], ids=["nulls", "cohere's default", "the model's", "spans off", "top_n over"])
def test_fields_a_cohere_client_sends_that_change_nothing_are_accepted(extra):
    got = rerank({**BODY, **extra})
    assert got["texts"] == BODY["documents"] and got["parameters"] == {}
    assert got["topN"] == extra.get("top_n")


def test_a_thousand_documents_are_one_request():
    assert rerank({**BODY, "documents": ["d"] * 1000})["texts"] == ["d"] * 1000


LIMIT = "over the limit of 1000 per request"


@pytest.mark.parametrize(("body", "status", "param", "message"), [
    ("{", 400, None, "the request body is not valid JSON"),
    ([BODY], 400, None, "the request body must be a JSON object"),
    ({**BODY, "model": None}, 400, "model", "you must provide a model parameter"),
    ({**BODY, "model": ""}, 400, "model", "you must provide a model parameter"),
    ({**BODY, "model": 3}, 400, "model", "model must be a string"),
    ({**BODY, "model": "nope"}, 404, "model",
     "The model 'nope' does not exist; served reranking models: marco"),
    ({**BODY, "model": "minilm"}, 404, "model",
     "The model 'minilm' is a text-embedding model, not served by this route: use POST "
     "/v1/embeddings"),
    ({**BODY, "model": "efficientnet"}, 404, "model",
     "is an image-classification model, not served by this route: use POST /v1/classify; "
     "served reranking models: marco"),
    ({**BODY, "query": None}, 400, "query", "you must provide a query parameter"),
    ({**BODY, "query": ""}, 400, "query", "query is an empty string"),
    ({**BODY, "query": 5}, 400, "query", "query is a number, not a string"),
    ({**BODY, "query": ["q"]}, 400, "query", "query is an array, not a string"),
    ({**BODY, "query": "é" * 8193}, 400, "query",
     "query is 16386 bytes, over the limit of 16384"),
    ({**BODY, "documents": None}, 400, "documents", "you must provide a documents parameter"),
    ({**BODY, "documents": []}, 400, "documents", "documents must be a non-empty array"),
    ({**BODY, "documents": "a cat"}, 400, "documents", "documents must be a non-empty array"),
    ({**BODY, "documents": {"text": "a"}}, 400, "documents", "must be a non-empty array"),
    ({**BODY, "documents": ["a", 3]}, 400, "documents", "documents[1] is a number, not a"),
    ({**BODY, "documents": ["a", None]}, 400, "documents", "documents[1] is null"),
    ({**BODY, "documents": ["a", ["b"]]}, 400, "documents", "documents[1] is an array"),
    ({**BODY, "documents": ["a", {"title": "b"}]}, 400, "documents",
     'documents[1] has no text string: an object document needs "text"'),
    ({**BODY, "documents": [{"text": 3}]}, 400, "documents", "documents[0] has no text"),
    ({**BODY, "documents": ["a", ""]}, 400, "documents",
     "documents[1] is an empty string; every document must have text"),
    ({**BODY, "documents": [{"text": ""}]}, 400, "documents", "documents[0] is an empty"),
    ({**BODY, "documents": ["d"] * 1001}, 400, "documents", "documents has 1001 items, " + LIMIT),
    ({**BODY, "top_n": 0}, 400, "top_n", "top_n must be an integer >= 1; got 0"),
    ({**BODY, "top_n": -2}, 400, "top_n", "got -2"),
    ({**BODY, "top_n": 1.5}, 400, "top_n", "got 1.5"),
    ({**BODY, "top_n": "3"}, 400, "top_n", 'got "3"'),
    ({**BODY, "top_n": True}, 400, "top_n", "got true"),
    ({**BODY, "return_documents": "yes"}, 400, "return_documents",
     'return_documents must be true or false; got "yes"'),
    ({**BODY, "raw_scores": 1}, 400, "raw_scores", "raw_scores must be true or false; got 1"),
    ({**BODY, "truncate": "cut"}, 400, "truncate", "one of reject, truncate, chunk"),
    ({**BODY, "chunk_overlap": -1}, 400, "chunk_overlap", "an integer >= 0"),
    ({**BODY, "max_tokens_per_doc": 100}, 400, "max_tokens_per_doc",
     "max_tokens_per_doc under marco's max_tokens (512) is not supported"),
    ({**BODY, "max_tokens_per_doc": 0}, 400, "max_tokens_per_doc", "an integer >= 1; got 0"),
    ({**BODY, "max_tokens_per_doc": "4096"}, 400, "max_tokens_per_doc", 'got "4096"'),
    ({**BODY, "rank_fields": ["text"]}, 400, "rank_fields", "rank_fields is not supported"),
    ({**BODY, "max_chunks_per_doc": 10}, 400, "max_chunks_per_doc",
     'max_chunks_per_doc is not supported: send truncate: "chunk"'),
    ({**BODY, "priority": 0}, 400, "priority",
     "priority in the body is not supported: send the header x-priority"),
    ({**BODY, "relevant_spans": {"mode": "enabled"}}, 400, "relevant_spans",
     "relevant_spans is not supported"),
    ({**BODY, "prompt_name": "query"}, 400, "prompt_name",
     "prompt_name applies to text-embedding models (/v1/embeddings); marco ranks documents"),
    ({**BODY, "input": ["a"]}, 400, "input", "input applies to text-embedding models"),
], ids=lambda v: str(v)[:40])
def test_a_bad_rerank_body_is_refused_naming_the_field(body, status, param, message):
    got_status, error = error_of(rerank(body))
    assert (got_status, error["param"]) == (status, param)
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"


def test_an_unknown_priority_header_is_refused():
    status, error = error_of(rerank(BODY, "2", "urgent"))
    assert (status, error["param"]) == (400, "x-priority")


# -- the subrequests ---------------------------------------------------------------------


def test_the_pairs_go_in_chunks_of_the_models_rows():
    assert njs("rerank.rerankParts('q', ['a', 'b', 'c', 'd', 'e', 'f', 'g'], 3)") == [
        [0, 3], [3, 6], [6, 7]]
    assert njs("rerank.rerankParts('q', ['a'], 3)") == [[0, 1]]


def test_a_long_query_makes_smaller_chunks_counted_as_escaped_json():
    query = "\x01" * njs("rerank.MAX_QUERY_BYTES")  # 6 bytes each in JSON
    pair = len(json.dumps(query)) + len(json.dumps("a"))
    per_part = njs("rerank.PART_BYTES") // pair
    parts = njs(f"rerank.rerankParts({json.dumps(query)}, Array(64).fill('a'), 64)")
    assert per_part < 64 and parts[0] == [0, per_part]
    assert [p[1] - p[0] for p in parts[:-1]] == [per_part] * (len(parts) - 1)


def test_a_single_pair_over_the_part_size_goes_alone():
    got = njs("rerank.rerankParts('q', ['x'.repeat(rerank.PART_BYTES), 'a', 'b'], 8)")
    assert got == [[0, 1], [1, 3]]


def test_every_subrequest_stays_under_the_body_that_kills_triton():
    """The worst a client can send: the longest query of control characters, and
    documents filling the body limit, each as escaped as JSON allows."""
    script = ("(function () { var q = '\\u0001'.repeat(rerank.MAX_QUERY_BYTES); "
              "var docs = Array(60).fill('\\u0001'.repeat(10000)); "
              "return rerank.rerankParts(q, docs, 64).map((p) => Buffer.byteLength("
              "openai.kserveBody(rerank.pairInputs(q, docs.slice(p[0], p[1])), 1, {}, "
              "[['SCORE', false], ['TOKENS', false]]))); })()")
    assert len(json.dumps(["\x01" * 10000] * 60)) < HTTP_MAX_BODY_BYTES  # a body it takes
    sizes = njs(script)
    assert len(sizes) > 1 and max(sizes) < HTTP_MAX_BODY_BYTES


# -- the answer --------------------------------------------------------------------------


def answer(scores: list[float], tokens: list[int]) -> dict:
    """A front's JSON answer to SCORE and TOKENS (Triton's KServe shape)."""
    return {"model_name": "rank", "outputs": [
        {"name": SCORE, "datatype": "FP32", "shape": [len(scores), 1], "data": scores},
        {"name": TOKENS, "datatype": "INT32", "shape": [len(tokens), 1], "data": tokens}]}


CHUNKS = [answer([0.125, 0.75, 0.5], [10, 12, 11]), answer([0.75, 0.0625], [9, 8])]
DOCS = ["a", {"text": "b", "id": "x"}, "c", "d", "e"]


def ranked(extra: dict, version: str = "2") -> dict:
    rows = (f"rerank.scoreRows({json.dumps(CHUNKS[0])}, 0)"
            f".concat(rerank.scoreRows({json.dumps(CHUNKS[1])}, 3))")
    body = json.dumps({**BODY, "documents": DOCS, **extra})
    return njs(f"rerank.rankAnswer({rows}, rerank.parseRerank({json.dumps(body)}, table, "
               f"null, {json.dumps(version)}), 'req-1')")


def test_the_scores_of_every_chunk_come_back_best_first_ties_in_the_order_sent():
    got = ranked({})
    assert [(r["index"], r["relevance_score"]) for r in got["results"]] == [
        (1, 0.75), (3, 0.75), (2, 0.5), (0, 0.125), (4, 0.0625)]
    assert all("document" not in r for r in got["results"])
    assert got["id"] == "req-1" and got["model"] == "marco"
    assert got["meta"] == {"api_version": {"version": "2"}, "billed_units": {"search_units": 1},
                           "tokens": {"input_tokens": 50}}
    assert got["usage"] == {"total_tokens": 50}


def test_top_n_cuts_the_best_and_return_documents_gives_each_as_sent():
    got = ranked({"top_n": 2, "return_documents": True}, "1")
    assert [r["index"] for r in got["results"]] == [1, 3]
    assert [r["document"] for r in got["results"]] == [{"text": "b", "id": "x"}, {"text": "d"}]
    assert got["meta"]["api_version"] == {"version": "1"}
    assert len(ranked({"top_n": 9})["results"]) == 5


def test_the_cohere_sdks_read_the_answer_as_their_own_types():
    v2 = V2RerankResponse.model_validate(ranked({"top_n": 3}))
    assert [(r.index, r.relevance_score) for r in v2.results] == [(1, 0.75), (3, 0.75),
                                                                   (2, 0.5)]
    assert v2.meta.api_version.version == "2" and v2.meta.billed_units.search_units == 1
    assert v2.meta.tokens.input_tokens == 50
    v1 = RerankResponse.model_validate(ranked({"return_documents": True}, "1"))
    assert [r.document.text for r in v1.results] == ["b", "d", "c", "a", "e"]
    assert v1.id == "req-1"


def test_a_search_unit_is_billed_per_hundred_documents():
    script = ("rerank.rankAnswer(Array(250).fill(0).map((x, i) => ({index: i, score: 0, "
              "tokens: 1})), {version: '2', topN: 1, model: {id: 'm'}}, 'r').meta")
    assert njs(script)["billed_units"] == {"search_units": 3}


def test_raw_scores_pass_through_unbounded_and_still_rank():
    rows = [{"index": 0, "score": -3.5, "tokens": 4}, {"index": 1, "score": 7.25, "tokens": 4}]
    got = njs(f"rerank.rankAnswer({json.dumps(rows)}, {{version: '2', topN: null, "
              f"model: {{id: 'm'}}}}, 'r').results")
    assert got == [{"index": 1, "relevance_score": 7.25}, {"index": 0, "relevance_score": -3.5}]


# -- errors from the front ---------------------------------------------------------------


def failure(text: str, offset: int) -> dict:
    body = json.dumps({"error": text})
    result = njs(f"openai.upstreamFailure(400, {json.dumps(body)}, {offset}, rerank.pairRow)")
    return json.loads(result["body"])["error"]


def test_the_fronts_rows_become_the_requests_documents_and_query():
    error = failure("DOCUMENT[1] is an empty string; QUERY[1] is 600 tokens", 6)
    assert error["message"] == "documents[7] is an empty string; query is 600 tokens"
    assert error["param"] == "documents"
    assert failure("QUERY[2] is not valid UTF-8", 3)["param"] == "query"


def refusal(make) -> str:
    """The front's own message for a bad row (runtime.tokenization, runtime.pairs)."""
    with pytest.raises(InvalidInputError) as caught:
        make()
    return str(caught.value)


def column(*rows: bytes) -> np.ndarray:
    return np.array(rows, dtype=np.object_).reshape(-1, 1)


FRAME = PairFrame(lead=(101,), middle=(102,), trail=(102,), types=((0,), (0,), (0,), (1,), (1,)))
PRODUCED = [  # (the front's real message, the tensor and row it names, the request's name)
    (lambda: decode_texts(column(b"ok", b"\xff\xfe"), TextLimits(), DOCUMENT), DOCUMENT,
     "documents[9]"),
    (lambda: decode_texts(column(b"ok", b"\xff\xfe"), TextLimits(), QUERY), QUERY, "query"),
    (lambda: fit_pair([1] * 4, [2] * 9, FRAME, TextLimits(max_tokens=8),
                      TextOptions("reject", 0), 1), DOCUMENT, "documents[9]"),
    (lambda: fit_pair([1] * 6, [2] * 9, FRAME, TextLimits(max_tokens=8),
                      TextOptions("chunk", 0), 1), QUERY, "query"),
    (lambda: fit_pair([1], [], FRAME, TextLimits(), TextOptions("truncate", 0), 1), DOCUMENT,
     "documents[9]"),
]


@pytest.mark.parametrize(("make", "tensor", "own"), PRODUCED,
                         ids=["document utf8", "query utf8", "pair over", "query too long",
                              "no tokens"])
def test_the_fronts_real_row_messages_get_the_requests_names(make, tensor, own):
    message = refusal(make)
    assert f"{tensor}[1]" in message
    got = failure(message, 8)["message"]
    assert got == message.replace(f"{tensor}[1]", own)
    assert f"{QUERY}[" not in got and f"{DOCUMENT}[" not in got


# -- the route in nginx ------------------------------------------------------------------


def test_nginx_serves_both_rerank_routes_with_the_openai_routes_keys_and_limits():
    template = TEMPLATE.read_text()
    assert "js_import rerank from ${RERANK_NJS_SCRIPT};" in template
    found = re.search(r"location ~ (\S+) \{(.*?)\n        \}", template[
        template.index("js_content rerank.route") - 600:], re.S)
    assert found and "js_content rerank.route;" in found.group(2)
    route = re.compile(found.group(1))
    assert [bool(route.match(p)) for p in ("/v1/rerank", "/v2/rerank", "/v3/rerank",
                                           "/v1/rerank/x")] == [True, True, False, False]
    openai = re.search(r"location ~ \^/v1/\(embeddings.*?\{(.*?)\n        \}", template, re.S)
    assert openai
    for line in ('if ($api_client = "")', "limit_req zone=per_client burst=${BURST} nodelay;",
                 "error_page 401 @openai_unauthorized;", "error_page 429 @openai_rate_limited;"):
        assert line in found.group(2) and line in openai.group(1)
    assert "/v1/rerank (and /v2/rerank)" in template  # the unknown route's 404 lists it

"""server/nginx/openai.js's pure functions, run by the real njs (the `njs` CLI, the same
0.7.9 engine as nginx's module): request checks, chunks, the KServe body, answers, errors.
The rerank routes (rerank.js) are tested in test_rerank_njs.py with the same runner."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
from typing import Any

import numpy as np
import pytest
from tmr_client.contract import OVERLENGTH_POLICIES

from core.families.text_embedding import TEXT_EMBEDDING
from runtime.errors import InvalidInputError
from runtime.tokenization import (
    Specials,
    TextLimits,
    TextOptions,
    decode_texts,
    fit_text,
)
from server.front_door import NGINX_DIR

TABLE = {"created": 1,
         "models": [{"id": "minilm", "names": ["minilm", "embed", "alias/x"],
                     "front": "embed", "dimensions": 4, "request_rows": 2, "in_flight": 2,
                     "max_batch": 4},
                    {"id": "e5", "names": ["e5"], "front": "e5", "dimensions": 4,
                     "sizes": [4, 2], "prompts": ["passage", "query"], "max_tokens": 16,
                     "request_rows": 2, "in_flight": 1, "max_batch": 3}],
         "classifiers": [{"id": "lite", "names": ["lite", "efficientnet"], "front": "lite",
                          "lane": "lite_interactive", "request_rows": 4, "in_flight": 1,
                          "max_batch": 16}],
         "rerankers": [{"id": "marco", "names": ["marco", "rank", "cross-encoder/marco"],
                        "front": "rank", "lane": "rank_interactive", "max_batch": 32,
                        "request_rows": 3, "in_flight": 2, "max_tokens": 512,
                        "chunk_rows": 1, "chunks_by_default": False}]}


NJS_LINE = 512  # the njs CLI cuts a console.log line at 2048 bytes (<= 4 bytes a char)


def njs(expression: str) -> Any:
    """The JSON value of a JS expression over the modules `openai` and `rerank`, and
    `table`."""
    script = (f"import openai from 'openai.js';\nimport rerank from 'rerank.js';\n"
              f"var table = {json.dumps(TABLE)};\n"
              f"var out = JSON.stringify({expression});\n"
              f"for (var i = 0; i < out.length; i += {NJS_LINE}) "
              f"{{ console.log(out.slice(i, i + {NJS_LINE})); }}\n")
    done = subprocess.run(["njs", "-p", str(NGINX_DIR), "-"], input=script, text=True,
                          capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads("".join(done.stdout.splitlines()))


def parse(body: Any, priority: str | None = None) -> dict:
    text = body if isinstance(body, str) else json.dumps(body)
    return njs(f"openai.parseRequest({json.dumps(text)}, table, {json.dumps(priority)})")


def error_of(result: dict) -> tuple[int, dict]:
    return result["error"]["status"], json.loads(result["error"]["body"])["error"]


def test_a_string_input_becomes_one_text_of_the_named_model_or_its_alias():
    for name in ("minilm", "embed", "alias/x"):
        result = parse({"model": name, "input": "hello", "user": "u" * 300})
        assert result["texts"] == ["hello"] and result["model"]["front"] == "embed"
        assert (result["format"], result["priority"]) == ("float", None)
        assert result["user"] == "u" * 256  # logged, at most 256 characters


@pytest.mark.parametrize(("header", "priority"), [("1", 1), ("high", 1), (" High ", 1),
                                                  ("2", 2), ("standard", 2)])
def test_the_priority_header_maps_to_tritons_levels(header, priority):
    assert parse({"model": "minilm", "input": "x"}, header)["priority"] == priority


@pytest.mark.parametrize(("body", "status", "param", "message"), [
    ("{", 400, None, "the request body is not valid JSON"),
    ({"input": "x"}, 400, "model", "you must provide a model parameter"),
    ({"model": 3, "input": "x"}, 400, "model", "model must be a string"),
    ({"model": "gpt", "input": "x"}, 404, "model",
     "The model 'gpt' does not exist; served embedding models: minilm"),
    ({"model": "minilm"}, 400, "input", "you must provide an input parameter"),
    ({"model": "minilm", "input": []}, 400, "input", "input must be a non-empty string"),
    ({"model": "minilm", "input": {"a": 1}}, 400, "input", "input must be a non-empty string"),
    ({"model": "minilm", "input": ["a", None]}, 400, "input", "input[1] is null, not a string"),
    ({"model": "minilm", "input": ["a", {"t": 1}]}, 400, "input",
     "input[1] is an object, not a string"),
    ({"model": "minilm", "input": [1, 2, 3]}, 400, "input",
     "input[0] is an array of token ids"),
    ({"model": "minilm", "input": [[1, 2], [3]]}, 400, "input",
     "check_embedding_ctx_length=False"),
    ({"model": "minilm", "input": ["a"] * 2049}, 400, "input",
     "input has 2049 items, over the limit of 2048 per request"),
    ({"model": "minilm", "input": "x", "dimensions": 3}, 400, "dimensions",
     "dimensions must be one of minilm's sizes: 4 (its embeddings are not trained to be cut"),
    ({"model": "minilm", "input": "x", "prompt_name": "query"}, 400, "prompt_name",
     'prompt_name names no prompt of minilm: got "query"; it has no prompts'),
    ({"model": "minilm", "input": "x", "encoding_format": "hex"}, 400, "encoding_format",
     'got "hex"'),
], ids=lambda v: str(v)[:30])
def test_a_bad_request_gets_openais_error_shape_naming_the_param(body, status, param, message):
    got_status, error = error_of(parse(body))
    assert (got_status, error["param"]) == (status, param)
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"


def test_an_unknown_priority_is_refused():
    status, error = error_of(parse({"model": "minilm", "input": "x"}, "urgent"))
    assert (status, error["param"]) == (400, "x-priority")


def test_chunks_cover_the_inputs_in_order():
    assert njs("openai.chunks(5, 2)") == [[0, 2], [2, 4], [4, 5]]
    assert njs("openai.chunks(64, 64)") == [[0, 64]]


COUNT_OUTPUTS = ["TOKENS", "TRUNCATED_TOKENS", "WINDOWS"]


def test_the_kserve_body_asks_for_binary_embeddings_and_json_counts():
    body = json.loads(njs('openai.kserveBody({TEXT: ["a", "b"]}, 1)'))
    assert body["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1],
                               "data": ["a", "b"]}]
    assert body["outputs"] == [{"name": "EMBEDDING", "parameters": {"binary_data": True}},
                               *({"name": n, "parameters": {"binary_data": False}}
                                 for n in COUNT_OUTPUTS)]
    assert body["parameters"] == {"priority": 1}
    assert "parameters" not in json.loads(njs('openai.kserveBody({TEXT: ["a"]}, null)'))
    both = json.loads(njs('openai.kserveBody({TEXT: ["a"]}, 2, '
                          '{truncate: "chunk", chunk_overlap: 8})'))
    assert both["parameters"] == {"truncate": "chunk", "chunk_overlap": 8, "priority": 2}


def test_the_counts_the_route_sums_are_the_familys_front_outputs():
    names = [t.name for t in TEXT_EMBEDDING.contract.front_outputs]
    assert all(name in names for name in COUNT_OUTPUTS)


@pytest.mark.parametrize(("extension", "parameters"), [
    ({}, {}), ({"truncate": True}, {"truncate": True}), ({"truncate": False},
                                                         {"truncate": False}),
    ({"truncate": "chunk", "chunk_overlap": 0}, {"truncate": "chunk", "chunk_overlap": 0}),
    ({"truncate": None}, {}),
])
def test_truncate_and_chunk_overlap_become_the_front_models_request_parameters(extension,
                                                                              parameters):
    assert parse({"model": "minilm", "input": "x", **extension})["parameters"] == parameters


def test_the_routes_truncate_values_are_the_request_contracts():
    assert njs("openai.TRUNCATE_CHOICES") == list(OVERLENGTH_POLICIES)


@pytest.mark.parametrize(("extension", "param", "message"), [
    ({"truncate": "cut"}, "truncate",
     'truncate must be true, false, or one of reject, truncate, chunk; got "cut"'),
    ({"truncate": 1}, "truncate", "got 1"),
    ({"chunk_overlap": -2}, "chunk_overlap", "chunk_overlap must be an integer >= 0; got -2"),
    ({"chunk_overlap": 1.5}, "chunk_overlap", "got 1.5"),
])
def test_a_bad_truncate_or_chunk_overlap_is_a_400_naming_it(extension, param, message):
    status, error = error_of(parse({"model": "minilm", "input": "x", **extension}))
    assert (status, error["param"]) == (400, param)
    assert message in error["message"]


def kserve_answer(rows: list[list[float]], tokens: list[int], truncated: list[int] | None = None,
                  windows: list[int] | None = None) -> tuple[str, int]:
    """A Triton binary answer (JSON header, then the float32 rows), base64 for njs."""
    counts = {"TOKENS": tokens, "TRUNCATED_TOKENS": truncated or [0] * len(rows),
              "WINDOWS": windows or [1] * len(rows)}
    header = json.dumps({"outputs": [
        {"name": "EMBEDDING", "datatype": "FP32", "shape": [len(rows), 4],
         "parameters": {"binary_data_size": 16 * len(rows)}},
        *({"name": name, "datatype": "INT32", "shape": [len(rows), 1], "data": data}
          for name, data in counts.items())]})
    payload = b"".join(struct.pack("<4f", *row) for row in rows)
    return base64.b64encode(header.encode() + payload).decode(), len(header)


@pytest.mark.parametrize("header_pad", [0, 1, 2, 3])  # float rows at any byte alignment
def test_an_answer_decodes_to_float_rows_or_base64_and_sums_the_tokens(header_pad):
    rows = [[0.5, -1.25, 3.0, 0.1], [1e-7, 2.0, -0.0, 7.5]]
    packed, length = kserve_answer(rows, [3, 4], [0, 9], [1, 2])
    packed = base64.b64encode(b" " * header_pad + base64.b64decode(packed)).decode()
    buffer = f"Buffer.from({json.dumps(packed)}, 'base64').slice({header_pad})"
    floats = njs(f"openai.decodeAnswer({buffer}, {length}, 2, 4, 'float')")
    assert floats["counts"] == {"prompt_tokens": 7, "truncated_tokens": 9, "windows": 3}
    assert floats["embeddings"] == [[struct.unpack("<f", struct.pack("<f", v))[0] for v in r]
                                    for r in rows]
    packed64 = njs(f"openai.decodeAnswer({buffer}, {length}, 2, 4, 'base64')")
    assert [base64.b64decode(e) for e in packed64["embeddings"]] == [
        struct.pack("<4f", *r) for r in rows]


@pytest.mark.parametrize(("status", "expected"), [(400, 400), (503, 503), (429, 503),
                                                 (502, 503), (500, 500)])
def test_tritons_errors_keep_their_meaning_with_the_requests_own_row_numbers(status, expected):
    text = json.dumps({"error": "TEXT[3] is 302 tokens, over the limit; TEXT[10] too"})
    result = njs(f"openai.upstreamFailure({status}, {json.dumps(text)}, 64)")
    error = json.loads(result["body"])["error"]
    assert result["status"] == expected
    assert error["message"] == "input[67] is 302 tokens, over the limit; input[74] too"
    assert error["type"] == {400: "invalid_request_error", 503: "server_error",
                             500: "server_error"}[expected]


TEXT = TEXT_EMBEDDING.contract.front_inputs[0].name


def refusal(make) -> str:
    """The message the front model's own validation writes (runtime.tokenization)."""
    with pytest.raises(InvalidInputError) as caught:
        make()
    return str(caught.value)


def rows(*items: bytes) -> np.ndarray:
    return np.array(items, dtype=np.object_).reshape(-1, 1)


PRODUCED = [  # (the front model's real message, the row it names)
    (lambda: decode_texts(rows(b"ok", b"\xff\xfe"), TextLimits(), TEXT), 1),
    (lambda: decode_texts(rows(b"ok", b"ok", b"   "), TextLimits(), TEXT), 2),
    (lambda: decode_texts(rows(b"x" * 9), TextLimits(max_text_bytes=8), TEXT), 0),
    (lambda: fit_text(list(range(10)), Specials(), TextLimits(max_tokens=4),
                      TextOptions("reject", 1), 5, TEXT), 5),
    (lambda: fit_text(list(range(10)), Specials(), TextLimits(max_tokens=4,
                                                              max_windows_per_text=2),
                      TextOptions("chunk", 1), 3, TEXT), 3),
    (lambda: fit_text([101, 102], Specials(), TextLimits(), TextOptions("chunk", 1), 4,
                      TEXT), 4),
]


def test_the_route_sends_the_familys_input_tensor():
    assert njs("openai.TEXT_INPUT") == TEXT


@pytest.mark.parametrize(("make", "row"), PRODUCED,
                         ids=["utf8", "empty", "bytes", "tokens", "windows", "no tokens"])
def test_the_front_models_own_row_messages_get_the_requests_row_numbers(make, row):
    """Producer and parser agree: whatever the wording, the row the front model names
    comes back as the request's own input[offset + row], and no TEXT[...] is left."""
    message = refusal(make)
    assert f"{TEXT}[{row}]" in message
    body = json.dumps({"error": message})
    error = json.loads(njs(f"openai.upstreamFailure(400, {json.dumps(body)}, 64)")["body"])
    assert error["error"]["message"] == message.replace(f"{TEXT}[{row}]", f"input[{64 + row}]")
    assert f"{TEXT}[" not in error["error"]["message"]


def test_the_committed_models_table_is_the_repositorys():
    from server.openai_models import COMMITTED, render

    assert COMMITTED.read_text() == render(), (
        "run: python -m server.openai_models > server/nginx/openai_models.json")


def parsed(route: str, body: Any, priority: str | None = None) -> dict:
    return njs(f"openai.{route}({json.dumps(json.dumps(body))}, table, "
               f"{json.dumps(priority)})")


def test_a_prompt_and_a_matryoshka_size_of_the_model_become_request_parameters():
    got = parse({"model": "e5", "input": "x", "prompt_name": "query", "dimensions": 2})
    assert got["parameters"] == {"prompt_name": "query", "dimensions": 2}
    # its own size is no cut: nothing is sent
    assert parse({"model": "e5", "input": "x", "dimensions": 4})["parameters"] == {}


@pytest.mark.parametrize(("extension", "param", "message"), [
    ({"prompt_name": "doc"}, "prompt_name",
     'prompt_name names no prompt of e5: got "doc"; its prompts: passage, query'),
    ({"prompt_name": 3}, "prompt_name", "got 3"),
    ({"dimensions": 3}, "dimensions", "dimensions must be one of e5's sizes: 4, 2; got 3"),
    ({"dimensions": "2"}, "dimensions", 'got "2"'),
])
def test_an_unknown_prompt_or_size_is_a_400_naming_the_models_own(extension, param, message):
    status, error = error_of(parse({"model": "e5", "input": "x", **extension}))
    assert (status, error["param"]) == (400, param) and message in error["message"]


def test_tokenize_asks_the_front_to_count_only():
    got = parsed("parseTokenize", {"model": "e5", "input": ["a", "b"], "prompt_name": "query"})
    assert got["texts"] == ["a", "b"]
    assert got["parameters"] == {"prompt_name": "query", "count_only": True}


@pytest.mark.parametrize(("route", "body", "status", "param", "message"), [
    ("parseTokenize", {"model": "e5", "input": []}, 400, "input", "non-empty"),
    ("parseTokenize", {"model": "e5", "input": [""]}, 400, "input", "input[0] is an empty"),
    ("parseTokenize", {"model": "e5", "input": [1]}, 400, "input", "token ids"),
    ("parseTokenize", {"model": "nope", "input": "a"}, 404, "model", "served embedding"),
    ("parseTokenize", {"model": "e5", "input": "a", "prompt_name": "x"}, 400, "prompt_name",
     "its prompts: passage, query"),
    ("parseTokenize", {"model": "e5", "input": "a", "dimensions": 2}, 400, "dimensions",
     "no meaning"),
    ("parseSimilarity", {"model": "e5", "inputs": ["a"]}, 400, "inputs", "must be an object"),
    ("parseSimilarity", {"model": "e5", "inputs": {"sentences": ["a"]}}, 400,
     "inputs.source_sentence", "non-empty string"),
    ("parseSimilarity", {"model": "e5", "inputs": {"source_sentence": "a", "sentences": []}},
     400, "inputs.sentences", "non-empty"),
    ("parseSimilarity", {"model": "e5", "inputs": {"source_sentence": "a",
                                                    "sentences": ["b", "c", "d"]}},
     400, "inputs.sentences", "3 items, over the limit of 2"),
    ("parseSimilarity", {"model": "e5", "inputs": {"source_sentence": "a", "sentences": ["b"]},
                         "dimensions": 3}, 400, "dimensions", "4, 2"),
    ("parseSimilarity", {"model": "lite", "inputs": {}}, 404, "model", "served embedding"),
    ("parseClassify", {"model": "minilm", "input": "x"}, 404, "model",
     "served image-classification models: lite"),
    ("parseClassify", {"model": "lite", "input": [None]}, 400, "input", "input[0] is null"),
    ("parseClassify", {"model": "lite", "input": "x", "top_k": 0}, 400, "top_k", ">= 1"),
    ("parseClassify", {"model": "lite"}, 400, "input", "provide an input"),
    ("parseTokenize", {"model": "e5", "input": ["a"] * 2049}, 400, "input",
     "2049 items, over the limit of 2048"),
    ("parseClassify", {"model": "lite", "input": ["x"] * 2049}, 400, "input",
     "2049 items, over the limit of 2048"),
    ("parseSimilarity", {"model": "e5", "inputs": {"source_sentence": "a", "sentences": ["b"]},
                         "prompt_name": "x"}, 400, "prompt_name", "its prompts: passage, query"),
    ("parseClassify", {"model": "lite", "input": "x", "prompt_name": "query"}, 400,
     "prompt_name", "applies to text-embedding models; lite classifies images"),
    ("parseClassify", {"model": "lite", "input": "x", "dimensions": 128}, 400, "dimensions",
     "applies to text-embedding models"),
    ("parseClassify", {"model": "lite", "input": "x", "top_k": "3"}, 400, "top_k",
     "integer >= 1"),
], ids=lambda v: str(v)[:40])
def test_the_new_routes_refuse_bad_bodies_in_openais_shape(route, body, status, param, message):
    got_status, error = error_of(parsed(route, body))
    assert (got_status, error["param"]) == (status, param)
    assert message in error["message"]


def test_similarity_sends_the_source_first_and_names_rows_by_their_own_names():
    got = parsed("parseSimilarity", {"model": "e5", "prompt_name": "query", "inputs": {
        "source_sentence": "s", "sentences": ["a", "b"]}})
    assert got["texts"] == ["s", "a", "b"] and got["parameters"] == {"prompt_name": "query"}
    text = json.dumps({"error": "TEXT[0] is empty; TEXT[2] too"})
    result = njs(f"openai.upstreamFailure(400, {json.dumps(text)}, 0, openai.similarityRow)")
    error = json.loads(result["body"])["error"]
    assert error["message"] == "inputs.source_sentence is empty; inputs.sentences[1] too"
    assert error["param"] == "inputs.source_sentence"  # the first row it names


def test_classify_takes_an_image_models_name_or_alias_and_top_k():
    got = parsed("parseClassify", {"model": "efficientnet", "input": "data:image/png;base64,AA",
                                   "top_k": 3}, "high")
    assert got["model"]["front"] == "lite" and got["priority"] == 1
    assert got["parameters"] == {"top_k": 3} and got["texts"] == ["data:image/png;base64,AA"]
    body = json.loads(njs("openai.kserveBody({[openai.IMAGE_INPUT]: ['x']}, 1, {top_k: 3}, "
                          "[['LABELS', false]])"))
    assert body["inputs"][0]["name"] == "IMAGE" and body["outputs"] == [
        {"name": "LABELS", "parameters": {"binary_data": False}}]


@pytest.mark.parametrize(("truncated", "windows"), [(0, 1), (5, 2), (5, 0), (1, 1)])
def test_the_routes_policy_outcomes_are_the_sdks(truncated, windows):
    from tmr_client.contract import policy_outcome

    for policy in OVERLENGTH_POLICIES:
        assert njs(f"openai.policyOutcome({json.dumps(policy)}, {truncated}, {windows})") == \
            policy_outcome(policy, truncated, windows)


def test_a_count_answer_becomes_rows_with_each_policys_outcome():
    answer = {"outputs": [{"name": "TOKENS", "data": [5, 40]},
                          {"name": "TRUNCATED_TOKENS", "data": [0, 24]},
                          {"name": "WINDOWS", "data": [1, 3]}]}
    rows = njs(f"openai.countRows({json.dumps(answer)}, 2, 16)")
    assert rows[0] == {"object": "token_count", "index": 2, "tokens": 5, "max_tokens": 16,
                       "truncated_tokens": 0, "windows": 1,
                       "policies": {"reject": "fits", "truncate": "fits", "chunk": "fits"}}
    assert rows[1]["policies"] == {"reject": "refused", "truncate": "truncated",
                                   "chunk": "chunked"}


def test_a_class_answer_becomes_each_images_best_class_and_its_top_k():
    answer = {"outputs": [
        {"name": "CLASS_IDS", "shape": [2, 2], "data": [7, 1, 3, 4]},
        {"name": "LABELS", "shape": [2, 2], "data": ["cat", "dog", "car", "bus"]},
        {"name": "PROBABILITIES", "shape": [2, 2], "data": [0.5, 0.25, 0.75, 0.125]}]}
    rows = njs(f"openai.classRows({json.dumps(answer)}, 8)")
    assert [(r["index"], r["label"], r["class_id"], r["probability"]) for r in rows] == [
        (8, "cat", 7, 0.5), (9, "car", 3, 0.75)]
    assert rows[1]["top_k"] == [{"class_id": 3, "label": "car", "probability": 0.75},
                                {"class_id": 4, "label": "bus", "probability": 0.125}]


def test_cosines_are_of_each_row_with_the_first():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(4, 6)).round(3)
    got = np.array(njs(f"openai.cosines({json.dumps(rows.tolist())})"))
    want = rows[1:] @ rows[0] / (np.linalg.norm(rows[1:], axis=1) * np.linalg.norm(rows[0]))
    assert np.allclose(got, want, atol=1e-9)


RERANKER_HINT = "is a reranker (cross-encoder), not served by this route: use POST /v1/rerank"


@pytest.mark.parametrize(("route", "body"), [
    ("parseRequest", {"model": "marco", "input": "x"}),
    ("parseTokenize", {"model": "rank", "input": "x"}),
    ("parseSimilarity", {"model": "cross-encoder/marco",
                         "inputs": {"source_sentence": "a", "sentences": ["b"]}}),
    ("parseClassify", {"model": "marco", "input": "x"}),
])
def test_a_rerankers_name_on_another_route_is_a_404_pointing_to_rerank(route, body):
    status, error = error_of(parsed(route, body))
    assert (status, error["param"], error["code"]) == (404, "model", "model_not_found")
    assert f"The model '{body['model']}' {RERANKER_HINT}" in error["message"]


def test_a_text_models_name_on_classify_names_its_route_and_the_image_models():
    status, error = error_of(parsed("parseClassify", {"model": "alias/x", "input": "x"}))
    assert status == 404
    assert error["message"] == (
        "The model 'alias/x' is a text-embedding model, not served by this route: use "
        "POST /v1/embeddings (or /v1/tokenize, /v1/similarity); served image-classification "
        "models: lite")


def test_models_lists_the_text_image_and_ranking_models():
    assert [m["id"] for m in njs("openai.allModels(table)")] == ["minilm", "e5", "lite", "marco"]
    assert [m["id"] for m in njs("openai.allModels({models: [], classifiers: []})")] == []


@pytest.mark.parametrize(("truncate", "rows"), [(None, 3), ("truncate", 3), ("chunk", 1)])
def test_a_chunked_request_goes_in_the_models_chunk_rows(truncate, rows):
    assert njs(f"openai.partRows(table.rerankers[0], {json.dumps(truncate)} || undefined)") == rows

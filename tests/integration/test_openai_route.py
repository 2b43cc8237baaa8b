"""The OpenAI-compatible route at the front door, driven by the clients application
developers use: the `openai` package with its defaults (base64), LangChain's
OpenAIEmbeddings and LlamaIndex's OpenAILikeEmbedding. Each must get the SDK's embeddings,
and each error the typed exception that client raises."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
from tmr_client import Client

from core.ports import free_port
from server.front_door import FrontDoor
from server.launcher import TritonServer
from server.settings import FrontDoorSettings
from tests.integration.helpers import assert_serving, fresh, http_post
from tests.integration.test_front_door import new_keys, open_front_door

pytestmark = pytest.mark.timeout(120)

MODEL = "minilm"  # the repository's text model, by its name (`tmr add minilm ...`)
ALIAS = "sentence-transformers/all-MiniLM-L6-v2"  # its front config's openai_names
TEXTS = ["The cat sat on the mat.", "Une phrase en français.", "数学は美しい。",
         "short", "A somewhat longer sentence about Triton, batching and embeddings."]


@pytest.fixture(scope="module")
def door(triton: TritonServer) -> Iterator[FrontDoor]:
    door = open_front_door(triton)
    yield door
    assert door.close() == 0


def base_url(door: FrontDoor) -> str:
    return f"http://{door.http_url}/v1"


def client(door: FrontDoor, key: str | None = None, **options: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url(door), api_key=key or door.api_keys["alice"],
                         max_retries=0, **options)


def sdk(triton: TritonServer, texts: list[str]) -> tuple[np.ndarray, list[int]]:
    with Client(triton.grpc_url, protocol="grpc") as c:
        result = c.embed_with_info(texts)
    return result.embeddings, result.tokens


def assert_same(vectors: object, reference: np.ndarray) -> None:
    got = np.asarray(vectors, dtype=np.float64)
    assert got.shape == reference.shape
    cosine = (got * reference).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(
        reference, axis=1)
    assert cosine.min() >= 0.9999, cosine.min()


def post(door: FrontDoor, body: object, headers: dict[str, str] | None = None,
         path: str = "/v1/embeddings") -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, answer = http_post(door.http_url, path, raw,
                               {"Authorization": f"Bearer {door.api_keys['alice']}",
                                **(headers or {})})
    return status, json.loads(answer)


# -- the openai package -------------------------------------------------------------------


def test_openai_with_its_defaults_gets_the_sdks_embeddings_and_token_counts(door, triton):
    texts = fresh(*TEXTS)
    reference, tokens = sdk(triton, texts)
    with client(door) as c:  # encoding_format defaults to base64 in the openai client
        one = c.embeddings.create(model=MODEL, input=texts[0])
        many = c.embeddings.create(model=MODEL, input=texts)
    assert one.model == MODEL and one.object == "list" and len(one.data) == 1
    assert_same([one.data[0].embedding], reference[:1])
    assert [d.index for d in many.data] == list(range(len(texts)))
    assert_same([d.embedding for d in many.data], reference)
    assert many.usage.prompt_tokens == many.usage.total_tokens == sum(tokens)


def test_openai_100_texts_are_cut_into_chunks_and_come_back_in_order(door, triton):
    texts = fresh(*(f"text number {i}: {TEXTS[i % len(TEXTS)]}" for i in range(100)))
    reference, _ = sdk(triton, texts)
    with client(door) as c:
        answer = c.embeddings.create(model=ALIAS, input=texts, encoding_format="float")
    assert [d.index for d in answer.data] == list(range(100))
    assert_same([d.embedding for d in answer.data], reference)


def test_float_and_base64_carry_the_same_float32_values(door):
    texts = fresh("same values either way")
    _, floats = post(door, {"model": MODEL, "input": texts, "encoding_format": "float"})
    _, packed = post(door, {"model": MODEL, "input": texts, "encoding_format": "base64"})
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(np.asarray(floats["data"][0]["embedding"], np.float32),
                                  decoded)


def test_2048_inputs_are_served_in_one_request(door, triton):
    texts = fresh(*(f"item {i}" for i in range(2048)))
    with client(door, timeout=120) as c:
        answer = c.embeddings.create(model=MODEL, input=texts)
    assert [d.index for d in answer.data] == list(range(2048))
    sample = [0, 63, 64, 1000, 2047]
    reference, _ = sdk(triton, [texts[i] for i in sample])
    assert_same([answer.data[i].embedding for i in sample], reference)


def test_models_are_listed_and_retrieved_by_name_and_alias(door):
    with client(door) as c:
        listed = [m.id for m in c.models.list()]
        assert MODEL in listed
        assert c.models.retrieve(ALIAS).id == MODEL
        with pytest.raises(openai.NotFoundError, match="The model 'nope' does not exist"):
            c.models.retrieve("nope")


def test_dimensions_equal_to_the_models_own_are_accepted(door):
    with client(door) as c:
        answer = c.embeddings.create(model=MODEL, input="x", dimensions=384)
    assert len(answer.data[0].embedding) == 384


# -- errors, as each client raises them ----------------------------------------------------


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"input": ""}, openai.BadRequestError, r"input\[0\] is an empty string"),
    ({"input": ["fine", ""]}, openai.BadRequestError, r"input\[1\] is an empty string"),
    ({"input": [[101, 2023, 102]]}, openai.BadRequestError,
     r"input\[0\] is an array of token ids; .*check_embedding_ctx_length=False"),
    ({"input": [7]}, openai.BadRequestError, r"input\[0\] is an array of token ids"),
    ({"input": "x", "dimensions": 128}, openai.BadRequestError,
     r"dimensions must be one of minilm's sizes: 384 \(its embeddings are not trained to "
     r"be cut: it declares no Matryoshka sizes\); got 128"),
    ({"input": "x", "extra_body": {"prompt_name": "query"}}, openai.BadRequestError,
     r'prompt_name names no prompt of minilm: got "query"; it has no prompts'),
    ({"input": "x", "encoding_format": "int8"}, openai.BadRequestError,
     r'encoding_format must be "float" or "base64", got "int8"'),
    ({"input": ["x"] * 2049}, openai.BadRequestError,
     r"input has 2049 items, over the limit of 2048 per request"),
    ({"input": "x", "model": "text-embedding-3-small"}, openai.NotFoundError,
     r"The model 'text-embedding-3-small' does not exist; served embedding models: minilm"),
], ids=["empty", "empty in a list", "token ids", "one token id", "dimensions", "prompt",
        "format",
        "2049 inputs", "unknown model"])
def test_bad_requests_get_the_openai_clients_typed_errors(door, options, error, message):
    with client(door) as c, pytest.raises(error, match=message) as info:
        c.embeddings.create(**{"model": MODEL, **options})
    assert info.value.body["type"] == "invalid_request_error"
    assert_serving(door.upstreams[0][0])


def test_a_text_over_the_token_limit_is_named_by_its_index_in_the_request(door):
    texts = [f"text {i}" for i in range(100)]
    texts[70] = "word " * 300  # in the second chunk of 64
    with client(door) as c, pytest.raises(
            openai.BadRequestError,
            match=r"input\[70\] is 302 tokens, over the limit of 256 tokens") as info:
        c.embeddings.create(model=MODEL, input=texts)
    assert info.value.body["param"] == "input"


LICENCE = Path("/usr/share/common-licenses/GPL-3").read_text(encoding="utf-8")


def test_truncate_and_chunk_are_extension_fields_and_usage_counts_every_window(door, triton):
    """`truncate` (true, false or "chunk") and `chunk_overlap` go through as the front
    model's request parameters; usage counts the tokens the encoder ran over (every window
    of a chunked text), plus the tokens truncation dropped and the windows."""
    texts = [LICENCE[:9000], fresh("a short one")[0]]
    with Client(triton.grpc_url, protocol="grpc") as c:
        chunked = c.embed_with_info(texts, truncate="chunk")
        cut = c.embed_with_info(texts, truncate=True)
    with client(door) as c:
        answer = c.embeddings.create(model=MODEL, input=texts, extra_body={"truncate": "chunk"})
        truncated = c.embeddings.create(model=MODEL, input=texts, extra_body={"truncate": True})
        with pytest.raises(openai.BadRequestError,
                           match=r"input\[0\] is \d+ tokens, over the limit of 256 tokens "
                                 r"\(overlength_policy=reject; send truncate=true"):
            c.embeddings.create(model=MODEL, input=texts)
    assert_same([d.embedding for d in answer.data], chunked.embeddings)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == sum(chunked.tokens)
    assert answer.usage.model_extra == {"truncated_tokens": 0, "windows": sum(chunked.windows)}
    assert chunked.windows[0] > 1
    assert_same([d.embedding for d in truncated.data], cut.embeddings)
    assert truncated.usage.prompt_tokens == sum(cut.tokens) == 256 + cut.tokens[1]
    assert truncated.usage.model_extra == {"truncated_tokens": cut.truncated_tokens[0],
                                           "windows": 2}


def test_a_chunked_request_of_many_long_texts_is_cut_under_the_windows_limit(door, triton):
    """9 licences need 280 windows, over one request's 256: the route sends them to the
    front in requests of chunk_rows texts, as the SDK does."""
    with client(door, timeout=120) as c:
        answer = c.embeddings.create(model=MODEL, input=[LICENCE] * 9,
                                     extra_body={"truncate": "chunk", "chunk_overlap": 16})
    vectors = np.asarray([d.embedding for d in answer.data], np.float64)
    assert len(vectors) == 9 and np.allclose(vectors, vectors[0], atol=1e-6)
    with Client(triton.grpc_url, protocol="grpc") as sdk_client:
        one = sdk_client.embed_with_info([LICENCE], truncate="chunk", chunk_overlap=16)
    assert_same(vectors[:1], one.embeddings)
    assert answer.usage.model_extra["windows"] == 9 * one.windows[0]


@pytest.mark.parametrize(("extra", "message"), [
    ({"truncate": "cut"}, 'truncate must be true, false, or one of reject, truncate, chunk; '
                          'got "cut"'),
    ({"truncate": "chunk", "chunk_overlap": 300},
     r"parameter 'chunk_overlap' must be an integer from 0 to 253"),
    ({"chunk_overlap": -1}, r"chunk_overlap must be an integer >= 0; got -1"),
])
def test_a_bad_truncate_or_overlap_is_a_bad_request(door, extra, message):
    with client(door) as c, pytest.raises(openai.BadRequestError, match=message):
        c.embeddings.create(model=MODEL, input=["x"], extra_body=extra)
    assert_serving(door.upstreams[0][0])


def test_an_unknown_key_is_an_authentication_error_and_x_api_key_works_too(door):
    with client(door, key="not-a-key") as c, pytest.raises(
            openai.AuthenticationError, match="Incorrect or missing API key") as info:
        c.embeddings.create(model=MODEL, input="x")
    assert info.value.code == "invalid_api_key"
    status, answer = http_post(door.http_url, "/v1/embeddings",
                               json.dumps({"model": MODEL, "input": "x"}).encode(),
                               {"x-api-key": door.api_keys["bob"]})
    assert status == 200 and len(json.loads(answer)["data"]) == 1


def test_over_the_rate_limit_is_a_rate_limit_error(triton):
    slow = open_front_door(triton, rate_per_minute=1)
    try:
        with client(slow) as c, pytest.raises(openai.RateLimitError,
                                              match="rate limit exceeded") as info:
            for n in range(3):  # the rate's one and the burst's one pass, the third not
                c.embeddings.create(model=MODEL, input=f"request {n}")
        assert info.value.code == "rate_limit_exceeded"
    finally:
        assert slow.close() == 0


def test_a_body_over_the_limit_gets_413_in_openais_shape(door):
    status, answer = post(door, {"model": MODEL,
                                 "input": ["x" * 16000] * (door.settings.max_body_bytes // 16000)})
    assert status == 413
    assert answer["error"]["code"] == "request_too_large"
    assert str(door.settings.max_body_bytes) in answer["error"]["message"]


@pytest.mark.parametrize(("body", "headers", "path", "status", "message"), [
    (b'{"model": "minilm", "input": ', {}, "/v1/embeddings", 400,
     "the request body is not valid JSON"),
    (b'["not", "an", "object"]', {}, "/v1/embeddings", 400, "must be a JSON object"),
    ({"input": "x"}, {}, "/v1/embeddings", 400, "you must provide a model parameter"),
    ({"model": MODEL}, {}, "/v1/embeddings", 400, "you must provide an input parameter"),
    ({"model": MODEL, "input": "x"}, {"x-priority": "urgent"}, "/v1/embeddings", 400,
     'x-priority must be 1 or "high", 2 or "standard"; got "urgent"'),
    ({"model": MODEL, "input": "x", "user": 5}, {}, "/v1/embeddings", 400,
     "user must be a string"),
    ({"model": MODEL, "input": "x"}, {}, "/v1/completions", 404, "no such route"),
    (b"{", {}, "/v1/tokenize", 400, "the request body is not valid JSON"),
    ({"model": MODEL, "input": [""]}, {}, "/v1/tokenize", 400, "input[0] is an empty string"),
    ({"model": MODEL, "input": [3]}, {}, "/v1/tokenize", 400, "array of token ids"),
    ({"model": "nope", "input": "x"}, {}, "/v1/tokenize", 404, "served embedding models"),
    ({"model": MODEL, "input": "x", "prompt_name": "q"}, {}, "/v1/tokenize", 400,
     "it has no prompts"),
    ({"model": MODEL, "inputs": {"source_sentence": "a", "sentences": ["b"] * 64}}, {},
     "/v1/similarity", 400, "inputs.sentences has 64 items, over the limit of 63"),
    ({"model": MODEL, "inputs": {"source_sentence": "", "sentences": ["b"]}}, {},
     "/v1/similarity", 400, "inputs.source_sentence must be a non-empty string"),
    ({"model": MODEL, "inputs": {"source_sentence": "a", "sentences": "b"},
      "dimensions": 100}, {}, "/v1/similarity", 400, "dimensions must be one of minilm's"),
    ({"model": MODEL, "input": "x"}, {}, "/v1/classify", 404,
     "served image-classification models: digits, efficientnet_lite0"),
    ({"model": "efficientnet_lite0", "input": ["", "x"]}, {}, "/v1/classify", 400,
     "input[0] is an empty string"),
    ({"model": "efficientnet_lite0", "input": "x", "top_k": "3"}, {}, "/v1/classify", 400,
     "top_k must be an integer >= 1"),
], ids=["bad JSON", "not an object", "no model", "no input", "bad priority", "bad user",
        "unknown route", "tokenize JSON", "tokenize empty", "tokenize ids",
        "tokenize model", "tokenize prompt", "similarity limit", "similarity source",
        "similarity size", "classify text model", "classify empty", "classify top_k"])
def test_malformed_requests_get_precise_errors_in_openais_shape(door, body, headers, path,
                                                                status, message):
    got, answer = post(door, body, headers, path)
    assert got == status, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert message in answer["error"]["message"]


def test_priority_header_is_served_and_the_user_is_logged(door):
    for priority in ("high", "1", "standard", "2"):
        status, answer = post(door, {"model": MODEL, "input": fresh("prioritised"),
                                     "user": "tenant-42"}, {"x-priority": priority})
        assert status == 200, answer
    assert 'client=alice "POST /v1/embeddings HTTP/1.1" 200' in door.access_log.read_text()
    assert 'user="tenant-42"' in door.access_log.read_text()


def test_get_on_embeddings_is_405_and_missing_key_is_401_in_openais_shape(door):
    status, answer = http_post(door.http_url, "/v1/embeddings", None,
                               {"Authorization": f"Bearer {door.api_keys['alice']}"},
                               method="GET")
    assert status == 405 and json.loads(answer)["error"]["code"] == "method_not_allowed"
    status, answer = http_post(door.http_url, "/v1/models", None, {}, method="GET")
    assert status == 401 and json.loads(answer)["error"]["code"] == "invalid_api_key"


def test_triton_down_is_a_503_the_openai_client_retries_then_raises():
    dead = FrontDoor(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}",
                     FrontDoorSettings(http_port=free_port(), grpc_port=free_port()), new_keys())
    with dead, client(dead) as c, pytest.raises(openai.InternalServerError) as info:
        c.embeddings.create(model=MODEL, input="x")
    assert info.value.status_code == 503
    assert info.value.body["type"] == "server_error"


# -- LangChain and LlamaIndex --------------------------------------------------------------


def test_langchain_openai_embeddings_documents_and_query(door, triton):
    from langchain_openai import OpenAIEmbeddings

    texts = fresh(*TEXTS)
    reference, _ = sdk(triton, texts)
    embeddings = OpenAIEmbeddings(model=ALIAS, base_url=base_url(door),
                                  api_key=door.api_keys["alice"],
                                  check_embedding_ctx_length=False, max_retries=0)
    assert_same(embeddings.embed_documents(texts), reference)
    assert_same([embeddings.embed_query(texts[2])], reference[2:3])


def test_langchain_errors_are_the_openai_clients(door):
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(model=MODEL, base_url=base_url(door), api_key="wrong-key",
                                  check_embedding_ctx_length=False, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        embeddings.embed_query("x")


def test_llamaindex_openai_like_embedding(door, triton):
    from llama_index.embeddings.openai_like import OpenAILikeEmbedding

    texts = fresh(*TEXTS)
    reference, _ = sdk(triton, texts)
    embedding = OpenAILikeEmbedding(model_name=MODEL, api_base=base_url(door),
                                    api_key=door.api_keys["bob"], embed_batch_size=2,
                                    max_retries=0)
    assert_same(embedding.get_text_embedding_batch(texts), reference)
    assert_same([embedding.get_query_embedding(texts[0])], reference[:1])


# -- docs/openai.md's snippets, as written -----------------------------------------------------


def readme_snippets(rerank: bool = False) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks of docs/openai.md: the embedding routes', or
    with `rerank` the rerank route's (Cohere's SDK: tests/integration/test_rerank.py runs
    them against a server with a reranker)."""
    import re

    from core.paths import PROJECT_ROOT

    text = (PROJECT_ROOT / "docs" / "openai.md").read_text(encoding="utf-8")
    return [(lang, code) for lang, code in re.findall(r"```(bash|python)\n(.*?)```", text, re.S)
            if ("import cohere" in code) == rerank]


def test_the_openai_doc_snippets_run_as_written(door):
    import subprocess
    import sys

    snippets = readme_snippets()
    assert [lang for lang, _ in snippets] == ["bash", "python", "python", "python", "bash",
                                              "bash"]
    for lang, code in snippets:
        code = code.replace("localhost:8080", door.http_url).replace(
            "tmr-dev-key", door.api_keys["alice"])
        command = ["bash", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        out = done.stdout.strip()
        if lang == "bash":
            assert len(json.loads(out)["data"]) == 2
        else:
            assert out.split()[0] in ("2", "384"), out


# -- /v1/tokenize, /v1/similarity, /v1/classify ---------------------------------------------


def test_tokenize_counts_as_the_sdk_and_says_what_each_policy_does(door, triton):
    texts = ["short", "word " * 300]
    status, answer = post(door, {"model": MODEL, "input": texts}, path="/v1/tokenize")
    assert status == 200, answer
    with Client(triton.grpc_url, protocol="grpc") as c:
        counts = c.count_tokens(texts).counts
    rows = answer["data"]
    assert [r["tokens"] for r in rows] == [c.tokens for c in counts] == [3, 302]
    assert rows[0]["policies"] == {"reject": "fits", "truncate": "fits", "chunk": "fits"}
    assert rows[1]["policies"] == {"reject": "refused", "truncate": "truncated",
                                   "chunk": "chunked"}
    assert (rows[1]["truncated_tokens"], rows[1]["max_tokens"]) == (302 - 256, 256)
    assert rows[1]["windows"] == counts[1].windows == 2
    assert answer["usage"]["prompt_tokens"] == 305
    assert 'client=alice "POST /v1/tokenize HTTP/1.1" 200' in door.access_log.read_text()


def test_similarity_is_the_cosine_of_the_sdks_embeddings(door, triton):
    source, sentences = TEXTS[0], TEXTS[1:]
    status, answer = post(door, {"model": ALIAS, "inputs": {"source_sentence": source,
                                                            "sentences": sentences}},
                          path="/v1/similarity")
    assert status == 200, answer
    vectors, _ = sdk(triton, [source, *sentences])
    want = vectors[1:] @ vectors[0] / (np.linalg.norm(vectors[1:], axis=1)
                                       * np.linalg.norm(vectors[0]))
    got = [row["score"] for row in answer["data"]]
    assert [row["index"] for row in answer["data"]] == list(range(len(sentences)))
    assert np.allclose(got, want, atol=1e-4)
    with Client(triton.http_url) as c:
        result = c.similarity(source, sentences)
    assert np.allclose(result.scores, want, atol=1e-4)
    assert len(result.request_ids) == 1  # one request


def test_classify_takes_base64_and_data_urls_as_the_sdk_classifies(door, triton):
    from tests.image_samples import cat, encode

    jpeg = encode(cat(), "JPEG", quality=90)
    raw = base64.b64encode(jpeg).decode()
    url = "data:image/jpeg;base64," + raw
    status, answer = post(door, {"model": "efficientnet_lite0", "input": [raw, url],
                                 "top_k": 3}, {"x-priority": "high"}, path="/v1/classify")
    assert status == 200, answer
    with Client(triton.http_url, model="efficientnet_lite0") as c:
        want = c.classify([jpeg], top_k=3).predictions[0]
    for row in answer["data"]:
        assert [k["class_id"] for k in row["top_k"]] == [p.class_id for p in want]
        assert row["label"] == want[0].label
        assert abs(row["probability"] - want[0].probability) < 1e-5
    assert answer["usage"] == {"images": 2}
    status, answer = post(door, {"model": "efficientnet_lite0", "input": [raw, "bm90IGFu"]},
                          path="/v1/classify")
    assert status == 400 and answer["error"]["param"] == "input", answer
    assert "input[1]" in answer["error"]["message"]
    assert_serving(door.upstreams[0][0])


@pytest.mark.parametrize("path", ["/v1/tokenize", "/v1/similarity", "/v1/classify"])
def test_the_new_routes_need_a_key_and_take_post_only(door, path):
    status, answer = http_post(door.http_url, path, b"{}", {})
    assert status == 401 and json.loads(answer)["error"]["code"] == "invalid_api_key"
    status, answer = http_post(door.http_url, path, None,
                               {"Authorization": f"Bearer {door.api_keys['alice']}"},
                               method="GET")
    assert status == 405 and json.loads(answer)["error"]["code"] == "method_not_allowed"

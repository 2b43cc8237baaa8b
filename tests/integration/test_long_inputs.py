"""Long texts as users send them, against the real server: per-request truncation, long
documents embedded in windows (`truncate="chunk"`), their bounds, duplicates encoded once,
and the token accounting on /metrics; over HTTP and gRPC, through the SDK and raw KServe
requests (the OpenAI route's side is in test_openai_route.py)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tmr_client import NO_RETRY, Client, InvalidInputError

from export.chunk_reference import ChunkReference, cosine
from tests.conftest import MINILM_SOURCE
from tests.integration.helpers import (
    assert_serving,
    grown,
    http_post,
    metric_value,
    reloaded_with,
)

pytestmark = pytest.mark.timeout(300)

FRONT = "embed"  # it runs its primary encoder in its own process
MAX_TOKENS = 256
REPO = Path(__file__).resolve().parents[2]
# Real long texts: a licence every Debian machine ships, and this project's own docs.
GPL = Path("/usr/share/common-licenses/GPL-3").read_text(encoding="utf-8")
LONG_TEXTS = {
    "GPL-3": GPL,
    "docs/reliability.md": (REPO / "docs" / "reliability.md").read_text(encoding="utf-8"),
    "docs/serving.md (first 24 kB)":
        (REPO / "docs" / "serving.md").read_text(encoding="utf-8")[:24000],
}
PROTOCOLS = ["http", "grpc"]


def url_of(triton, protocol: str) -> str:
    return triton.http_url if protocol == "http" else triton.grpc_url


@pytest.fixture(scope="module")
def reference() -> ChunkReference:
    return ChunkReference(MINILM_SOURCE, MAX_TOKENS)


def sentence_transformers_vector(text: str) -> np.ndarray:
    """sentence-transformers' own answer for a long text: it truncates at 256 tokens."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MINILM_SOURCE), device="cpu")
    assert model.max_seq_length == MAX_TOKENS
    return model.encode([text])[0]


# -- truncation, per request ------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_truncate_true_cuts_a_long_text_as_sentence_transformers_does_and_says_how_much(
        triton, protocol) -> None:
    text = GPL[:6000]
    with Client(url_of(triton, protocol), protocol=protocol) as client:
        answer = client.embed_with_info([text, "a short one"], truncate=True)
        full = client.embed_with_info([text], truncate="chunk").tokens[0]
    assert answer.tokens == [MAX_TOKENS, 5]
    assert answer.windows == [1, 1]
    assert answer.truncated_tokens == [len(reference_ids(text)) - MAX_TOKENS, 0]
    assert full > MAX_TOKENS
    assert cosine(answer.embeddings[0], sentence_transformers_vector(text)) >= 0.9999


def reference_ids(text: str) -> list[int]:
    """The text's tokens, special tokens included, by Hugging Face's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MINILM_SOURCE))(text)["input_ids"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_models_reject_default_names_the_text_and_how_to_ask_for_more(triton,
                                                                         protocol) -> None:
    with Client(url_of(triton, protocol), protocol=protocol, retry=NO_RETRY) as client, \
            pytest.raises(InvalidInputError, match=(
                r"TEXT\[1\] is \d+ tokens, over the limit of 256 tokens \(overlength_policy="
                r"reject; send truncate=true to cut it or truncate=chunk to embed it")):
        client.embed(["fine", GPL[:6000]])
    assert_serving(triton.http_url)


def kserve_body(texts: list[str], parameters: dict) -> bytes:
    return json.dumps({
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1],
                    "data": texts}],
        "outputs": [{"name": n} for n in ("EMBEDDING", "TOKENS", "TRUNCATED_TOKENS",
                                          "WINDOWS")],
        "parameters": parameters}).encode()


def outputs_of(answer: bytes) -> dict[str, list]:
    return {o["name"]: o["data"] for o in json.loads(answer)["outputs"]}


def test_kserve_request_parameters_choose_the_policy_over_raw_http(triton, reference) -> None:
    text = GPL[:6000]
    windows_32, windows_0 = (len(reference.windows(text, n)) for n in (32, 0))
    assert windows_32 > windows_0 > 1
    for parameters, windows, dropped in [({"truncate": True}, 1, True),
                                         ({"truncate": "truncate"}, 1, True),
                                         ({"truncate": "chunk"}, windows_32, False),
                                         ({"truncate": "chunk", "chunk_overlap": 0}, windows_0,
                                          False)]:
        status, answer = http_post(triton.http_url, "/v2/models/embed/infer",
                                   kserve_body([text], parameters))
        assert status == 200, answer
        out = outputs_of(answer)
        assert out["WINDOWS"] == [windows], parameters
        assert (out["TRUNCATED_TOKENS"][0] > 0) is dropped
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer",
                               kserve_body([text], {"truncate": False}))
    assert status == 400 and "overlength_policy=reject" in json.loads(answer)["error"]


@pytest.fixture
def embed_truncates_by_default(triton) -> Iterator[None]:
    """`embed` reloaded (in the server only) with overlength_policy truncate."""
    with reloaded_with(triton, "embed", {"overlength_policy": "truncate"}):
        yield


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_refuses_truncation_whatever_the_models_default(
        triton, protocol, embed_truncates_by_default, reference) -> None:
    text = GPL[:6000]
    with Client(url_of(triton, protocol), protocol=protocol, retry=NO_RETRY) as client:
        assert client.embed_with_info([text]).truncated_tokens[0] > 0  # the model's default
        with pytest.raises(InvalidInputError, match=r"TEXT\[0\] is \d+ tokens, over the limit"):
            client.embed([text], truncate=False)
        assert client.embed_with_info([text], truncate="chunk").windows == [
            len(reference.windows(text, 32))]


# -- long documents in windows ------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_chunked_text_is_the_token_weighted_mean_of_its_windows_in_eager_pytorch(
        triton, protocol, reference) -> None:
    names = list(LONG_TEXTS)
    texts = [LONG_TEXTS[n] for n in names]
    with Client(url_of(triton, protocol), protocol=protocol) as client:
        answer = client.embed_with_info(texts, truncate="chunk")
    for i, name in enumerate(names):
        expected = reference.chunked(texts[i], overlap=32)
        assert answer.windows[i] == len(expected.tokens) > 10, name
        assert answer.tokens[i] == sum(expected.tokens), name
        assert answer.truncated_tokens[i] == 0
        assert cosine(answer.embeddings[i], expected.vector) >= 0.9999, name
        assert abs(np.linalg.norm(answer.embeddings[i]) - 1) < 1e-5


def front_count(server, name: str, **labels: str) -> float:
    return metric_value(server.metrics_url, name, model=FRONT, **labels)


def settled(server, name: str, before: float, expected: float, **labels: str) -> float:
    """A front counter's growth since `before`, once it reaches `expected` (sent with the
    batch's metrics) or after 10 s."""
    return grown(server.metrics_url, name, before, expected, model=FRONT, **labels)


def test_a_long_document_costs_its_windows_and_nothing_more(triton) -> None:
    """Each window is one row of the encoder's batches: the front's encoder runs over
    exactly the tokens of the document's windows, in fewer calls than windows."""
    text = LONG_TEXTS["docs/serving.md (first 24 kB)"]
    tokens0 = front_count(triton, "tmr_encoder_tokens_total", kind="real")
    calls0 = front_count(triton, "tmr_encoder_calls_total")
    with Client(triton.grpc_url, protocol="grpc") as client:
        answer = client.embed_with_info([text], truncate="chunk")
    windows, tokens = answer.windows[0], answer.tokens[0]
    assert windows > 20
    assert settled(triton, "tmr_encoder_tokens_total", tokens0, tokens, kind="real") == tokens
    calls = front_count(triton, "tmr_encoder_calls_total") - calls0
    assert 1 <= calls < windows  # batched, not one a call


def test_the_windows_overlap_can_be_asked_for_per_request(triton, reference) -> None:
    text = GPL[:12000]
    with Client(triton.http_url) as client:
        none = client.embed_with_info([text], truncate="chunk", chunk_overlap=0)
        lots = client.embed_with_info([text], truncate="chunk", chunk_overlap=200)
    assert none.windows[0] == len(reference.chunked(text, overlap=0).tokens)
    assert lots.windows[0] == len(reference.chunked(text, overlap=200).tokens) > none.windows[0]
    assert cosine(lots.embeddings[0], reference.chunked(text, overlap=200).vector) >= 0.9999


def test_identical_texts_of_a_request_are_encoded_once(triton) -> None:
    texts = [f"the same sentence, sent four times {uuid.uuid4().hex[:6]}"] * 4 + [
        f"another one {uuid.uuid4().hex[:6]}"]
    tokens0 = front_count(triton, "tmr_encoder_tokens_total", kind="real")
    copies0 = front_count(triton, "tmr_duplicate_rows_total")
    with Client(triton.http_url) as client:
        answer = client.embed_with_info(texts)
    encoded = answer.tokens[0] + answer.tokens[4]  # each distinct text once
    assert settled(triton, "tmr_encoder_tokens_total", tokens0, encoded, kind="real") == encoded
    assert front_count(triton, "tmr_duplicate_rows_total") - copies0 == 3
    assert np.array_equal(answer.embeddings[0], answer.embeddings[3])


# -- bounds and bad input -----------------------------------------------------------------


BAD = [
    ("a text over its windows limit", ["a " * 30000], {"truncate": "chunk"},
     r"TEXT\[0\] is \d+ tokens: \d+ windows of 254 text tokens overlapping by 32, over the "
     r"limit of 128 windows per text"),
    ("a text over the byte limit", ["x " * 70000], {"truncate": "chunk"},
     r"TEXT\[0\] is 140000 bytes, over the limit of 131072 bytes"),
    ("a text with no tokens once tokenized", ["ok", "\u200b\u200b\u2060"], {"truncate": True},
     r"TEXT\[1\] has no tokens once tokenized"),
    ("an unknown truncate value", ["x"], {"truncate": "drop"},
     r"parameter 'truncate' must be true, false, or one of reject, truncate, chunk; got "
     r"\"drop\""),
    ("an overlap as wide as a window", ["x"], {"truncate": "chunk", "chunk_overlap": 254},
     r"parameter 'chunk_overlap' must be an integer from 0 to 253"),
]


@pytest.mark.parametrize(("case", "texts", "parameters", "message"), BAD,
                         ids=[c[0] for c in BAD])
def test_bad_long_input_gets_a_precise_400_over_http_and_the_sdk_over_grpc(
        triton, case, texts, parameters, message) -> None:
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer",
                               kserve_body(texts, parameters))
    assert status == 400, answer
    assert re.search(message, json.loads(answer)["error"]), answer
    options = {"truncate": parameters["truncate"], "chunk_overlap":
               parameters.get("chunk_overlap")}
    with Client(triton.grpc_url, protocol="grpc", retry=NO_RETRY) as client:
        if parameters["truncate"] not in (True, False, "reject", "truncate", "chunk"):
            with pytest.raises(InvalidInputError, match="truncate must be True, False"):
                client.embed(texts, **options)  # the SDK refuses it before sending
        else:
            with pytest.raises(InvalidInputError, match=message):
                client.embed(texts, **options)
    assert_serving(triton.http_url)


def test_a_request_over_its_windows_limit_is_refused_and_the_sdk_never_sends_one(
        triton) -> None:
    """9 licences of about 31 windows each need 280 windows in one request, over 256; the
    SDK cuts a chunked call into requests of 2 texts (256 windows / 128 a text)."""
    status, answer = http_post(triton.http_url, "/v2/models/embed/infer",
                               kserve_body([GPL] * 9, {"truncate": "chunk"}))
    assert status == 400
    assert re.search(r"the request's 9 texts need \d+ windows, over the limit of 256 windows "
                     r"per request; send fewer or shorter texts", json.loads(answer)["error"])
    with Client(triton.grpc_url, protocol="grpc") as client:
        answer = client.embed_with_info([GPL] * 9, truncate="chunk")
    assert len(answer.request_ids) == 5 and len(set(answer.windows)) == 1
    assert np.allclose(answer.embeddings, answer.embeddings[0], atol=1e-6)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_invalid_utf8_deep_inside_a_long_text_names_the_byte(triton, protocol) -> None:
    data = GPL[:30000].encode() + b"\xc3\x28" + GPL[30000:33000].encode()
    with Client(url_of(triton, protocol), protocol=protocol, retry=NO_RETRY) as client, \
            pytest.raises(InvalidInputError,
                          match=r"TEXT\[0\] is not valid UTF-8: invalid continuation byte at "
                                r"byte 30000"):
        client.embed([data], truncate="chunk")  # type: ignore[list-item]
    assert_serving(triton.http_url)


# -- token accounting ---------------------------------------------------------------------


SAMPLE = re.compile(r'^(tmr_\w+)\{([^}]*)\} (\S+)$')


def front_samples(triton) -> dict[tuple[str, str], float]:
    """(metric name, its labels but model's) -> value, for embed's series, read from the
    exposition text as Prometheus reads it."""
    import urllib.request

    with urllib.request.urlopen(triton.metrics_url, timeout=10) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[2]))
        if labels.pop("model", None) == "embed":
            key = (match[1], ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
            out[key] = out.get(key, 0.0) + float(match[3])
    return out


def test_tokens_lengths_truncation_chunks_and_padding_are_counted_on_metrics(triton) -> None:
    before = front_samples(triton)
    with Client(triton.http_url) as client:
        cut = client.embed_with_info([GPL[:6000]], truncate=True)
        chunked = client.embed_with_info([GPL[:12000]], truncate="chunk")
        short = client.embed_with_info(["two words", "and a longer text too, "
                                        "with words enough to pass the first two buckets"])
    after = front_samples(triton)

    def grew(name: str, labels: str = "") -> float:
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert grew("tmr_text_tokens_total") == sum(cut.tokens + chunked.tokens + short.tokens)
    assert grew("tmr_overlength_texts_total", "policy=truncate") == 1
    assert grew("tmr_overlength_texts_total", "policy=chunk") == 1
    assert grew("tmr_truncated_tokens_total") == cut.truncated_tokens[0]
    assert grew("tmr_chunk_windows_total") == chunked.windows[0]
    assert grew("tmr_text_input_tokens_count") == 4
    assert grew("tmr_text_input_tokens_bucket", "le=+Inf") == 4
    assert grew("tmr_text_input_tokens_bucket", "le=8") == 1  # "two words": 4 tokens
    assert grew("tmr_encoder_tokens_total", "kind=real") == sum(
        cut.tokens + chunked.tokens + short.tokens)
    assert grew("tmr_encoder_tokens_total", "kind=padding") >= 0
    assert grew("tmr_encoder_calls_total") >= 3

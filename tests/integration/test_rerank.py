"""Rerankers, the text_ranking family, end to end: `tmr add` of a cross-encoder folder, then
its scores on every route against eager sentence-transformers `CrossEncoder.predict` on
the same folder, the long-document policies, and bad input at the KServe route and the
front door (Cohere's `/v1/rerank` and `/v2/rerank`, called with Cohere's own SDK).

The folder is built from real weights (export/seeded_cross_encoder.py): no cross-encoder can be
installed offline here, and its scores mean nothing, so equality with eager PyTorch is
what is shown. The server is this module's own: the reranker and the shipped embedding
model (for the routes' wrong-family answers), nothing else loaded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tmr_client import AsyncClient, Client, InvalidInputError

from core.families.catalog import find
from core.startup import startup_models
from core.variant import REVIEWED
from export.seeded_cross_encoder import MAX_LENGTH, seeded_cross_encoder
from runtime.pairs import PairEncoder, fit_pair, pair_feeds
from runtime.tokenization import TextLimits, TextOptions
from server.front_door import FrontDoor
from server.launcher import TritonServer
from tests.conftest import MINILM_SOURCE, start_server, stop_cleanly
from tests.integration.helpers import (
    add_version,
    assert_serving,
    http_post,
    repository_of,
    tmr,
)
from tests.integration.test_front_door import open_front_door
from tests.integration.test_fuzz import FUZZ

NAME = "reranker"
EMBEDDER = "embed"  # the shipped text model, served beside it
QUERY = "how do I read a file line by line"
DOCUMENTS = ["Open the file and iterate over it: each iteration yields one line.",
             "A cat sat on the mat.",
             "Return a < b.",
             "Sockets send bytes over a network connection.",
             "The csv module reads the rows of a comma-separated file, one list per row.",
             "Lines of a text file end with a newline character."]
LONG = "The csv module reads rows of a comma separated file and writes them back. " * 30


@dataclass
class Served:
    server: TritonServer
    door: FrontDoor
    repository: Path
    folder: Path
    eager: object  # sentence_transformers.CrossEncoder

    def predict(self, query: str, documents: list[str]) -> np.ndarray:
        return np.asarray(self.eager.predict([(query, d) for d in documents]), np.float64)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from sentence_transformers import CrossEncoder

    root = tmp_path_factory.mktemp("rerank")
    folder = seeded_cross_encoder(MINILM_SOURCE, root / "cross-encoder")
    repo = repository_of(root, EMBEDDER, f"{EMBEDDER}_interactive",
                         *(f"minilm_{f}" for f in ("onnx", "torchscript", "int8", "openvino")))
    added = tmr("add", NAME, "--family", "text_ranking", "--from", str(folder),
                "--repository", str(repo), "--no-tune", timeout_s=1200)
    assert added.returncode == 0, added.stdout + added.stderr
    print(f"\ntmr add {NAME}:\n{added.stdout}")  # the formats' parity and INT8's agreement
    server = start_server(repo, root / "tritonserver.log", load_models=tuple(
        startup_models(repo, REVIEWED, wanted=[EMBEDDER, NAME])))
    door = open_front_door(server)
    try:
        yield Served(server, door, repo, folder, CrossEncoder(str(folder), device="cpu"))
    finally:
        door.close()
        stop_cleanly(server)


def kserve(served: Served, queries: list[str], documents: list[object],
           **parameters: object) -> tuple[int, dict]:
    body = {"inputs": [
        {"name": "QUERY", "datatype": "BYTES", "shape": [len(queries), 1], "data": queries},
        {"name": "DOCUMENT", "datatype": "BYTES", "shape": [len(documents), 1],
         "data": documents}],
        "outputs": [{"name": "SCORE"}, {"name": "WINDOWS"}], "parameters": parameters}
    status, answer = http_post(served.server.http_url, f"/v2/models/{NAME}/infer",
                               json.dumps(body).encode())
    return status, json.loads(answer)


def output(answer: dict, name: str) -> np.ndarray:
    found = next(o for o in answer["outputs"] if o["name"] == name)
    return np.array(found["data"], dtype=np.float64)


@pytest.fixture(scope="module")
def cohere_api(served: Served) -> Iterator[tuple[object, object]]:
    """Cohere's own SDK at the door: ClientV2 (/v2/rerank) and Client (/v1/rerank)."""
    import cohere
    import httpx

    url, key = f"http://{served.door.http_url}", served.door.api_keys["alice"]
    with httpx.Client(timeout=60) as http:
        yield (cohere.ClientV2(base_url=url, api_key=key, httpx_client=http),
               cohere.Client(base_url=url, api_key=key, httpx_client=http))


@pytest.mark.timeout(1800)
def test_the_added_reranker_is_a_family_model_and_serves_its_front(served: Served) -> None:
    model = find(served.repository, NAME)
    assert model.family.name == "text_ranking" and model.front == NAME
    assert sorted(model.encoders) == ["int8", "onnx", "openvino", "torchscript"]
    provenance = json.loads((served.repository / f"{NAME}_int8" / "1" /
                             "provenance.json").read_text())
    ranking = provenance["checks"]["ranking_vs_fp32_onnx"]  # INT8's agreement, recorded
    assert ranking["rank_correlation"] >= 0.93 and ranking["queries"] == 48


@pytest.mark.timeout(600)
def test_served_scores_equal_cross_encoder_predict_on_every_route(served: Served,
                                                                  cohere_api: tuple) -> None:
    """The SDK (HTTP and gRPC, sync and async), KServe JSON, `tmr rerank --json` and
    Cohere's SDK through the door (v2 and v1): each score within 1e-4 of
    CrossEncoder.predict, in the same order."""
    documents = [*DOCUMENTS, LONG]
    reference = served.predict(QUERY, documents)
    order = list(np.argsort(-reference, kind="stable"))
    got: dict[str, np.ndarray] = {}
    for protocol, url in (("http", served.server.http_url), ("grpc", served.server.grpc_url)):
        with Client(url, protocol=protocol) as client:
            result = client.rerank_with_info(QUERY, documents, model=NAME)
            ranked = client.rerank(QUERY, documents, model=NAME, top_n=3)
        got[f"sdk-{protocol}"] = np.asarray(result.scores, np.float64)
        assert [r.index for r in ranked] == order[:3]
        assert ranked[0].document == documents[order[0]]
        assert result.truncated_tokens[-1] > 0  # the long one was cut, as CrossEncoder cuts it

        async def run(url: str = url, protocol: str = protocol) -> list:
            async with AsyncClient(url, protocol=protocol) as client:
                return await client.rerank(QUERY, documents, model=NAME)

        ranked = asyncio.run(run())
        assert [r.index for r in ranked] == order
        got[f"async-{protocol}"] = np.array([s for _, s in sorted((r.index, r.score)
                                                                  for r in ranked)])
    status, answer = kserve(served, [QUERY] * len(documents), documents)
    assert status == 200, answer
    got["kserve"] = output(answer, "SCORE")
    done = tmr("rerank", "--url", served.server.http_url, "--model", NAME, "--json", QUERY,
               *documents)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(done.stdout)
    assert [r["index"] for r in rows] == order
    got["cli"] = np.array([r["relevance_score"] for r in sorted(rows, key=lambda r: r["index"])])
    v2, v1 = cohere_api
    answer2 = v2.rerank(model=NAME, query=QUERY, documents=documents)
    answer1 = v1.rerank(model=NAME, query=QUERY, documents=documents, return_documents=True)
    assert [r.index for r in answer2.results] == order == [r.index for r in answer1.results]
    assert answer1.results[0].document.text == documents[order[0]]
    for route, answer in (("cohere-v2", answer2), ("cohere-v1", answer1)):
        got[route] = np.array([r.relevance_score for r in sorted(answer.results,
                                                                 key=lambda r: r.index)])
    worst = {route: float(np.abs(scores - reference).max()) for route, scores in got.items()}
    print(f"\n{NAME}: largest difference from CrossEncoder.predict per route: {worst}")
    assert max(worst.values()) <= 1e-4, worst


@pytest.mark.timeout(600)
def test_raw_scores_are_the_logits_and_top_n_cuts_the_ranking(served: Served,
                                                               cohere_api: tuple) -> None:
    reference = served.predict(QUERY, DOCUMENTS)
    with Client(served.server.grpc_url, protocol="grpc") as client:
        raw = client.rerank(QUERY, DOCUMENTS, model=NAME, raw_scores=True)
    logits = np.array([s for _, s in sorted((r.index, r.score) for r in raw)])
    assert np.abs(1 / (1 + np.exp(-logits)) - reference).max() <= 1e-4
    assert (logits < 0).any() or (logits > 1).any()  # logits, not probabilities
    v2, _ = cohere_api
    assert len(v2.rerank(model=NAME, query=QUERY, documents=DOCUMENTS, top_n=2).results) == 2
    assert len(v2.rerank(model=NAME, query=QUERY, documents=DOCUMENTS, top_n=50).results) == 6


def eager_windows(served: Served, query: str, document: str) -> np.ndarray:
    """The logit of each window of a chunked pair, by eager PyTorch on the rows the
    family's own fitting makes."""
    import torch

    encoder = PairEncoder(served.folder / "tokenizer.json")
    (q,), (d,) = encoder.ids([query]), encoder.ids([document])
    fitted = fit_pair(q, d, encoder.frame, TextLimits(max_tokens=MAX_LENGTH),
                      TextOptions(policy="chunk", overlap=32), 0)
    ids, mask, types = (torch.from_numpy(a) for a in pair_feeds(fitted.rows, encoder.pad_id))
    with torch.inference_mode():
        return served.eager.model(input_ids=ids, attention_mask=mask,
                                  token_type_ids=types).logits[:, 0].numpy()


@pytest.mark.timeout(600)
def test_long_documents_truncate_as_cross_encoder_or_are_refused_or_score_their_best_window(
        served: Served, cohere_api: tuple) -> None:
    reference = served.predict(QUERY, [LONG])[0]
    status, answer = kserve(served, [QUERY], [LONG])  # the family's default: truncate
    assert status == 200 and abs(output(answer, "SCORE")[0] - reference) <= 1e-4
    status, answer = kserve(served, [QUERY], [LONG], truncate="reject")
    assert status == 400 and "DOCUMENT[0]" in answer["error"], answer
    assert f"over the limit of {MAX_LENGTH} tokens" in answer["error"]
    status, answer = kserve(served, [QUERY], [LONG], truncate="chunk", raw_scores=True)
    assert status == 200, answer
    windows = eager_windows(served, QUERY, LONG)
    assert output(answer, "WINDOWS")[0] == len(windows) > 1
    assert abs(output(answer, "SCORE")[0] - windows.max()) <= 1e-4
    v2, _ = cohere_api
    import cohere

    with pytest.raises(cohere.errors.BadRequestError) as refused:
        v2.rerank(model=NAME, query=QUERY, documents=["short", LONG],
                  request_options={"additional_body_parameters": {"truncate": "reject"}})
    assert "documents[1]" in str(refused.value.body)


BAD_BODIES = [  # (body changes, the field the 4xx names)
    ({"query": ""}, "query"),
    ({"query": None}, "query"),
    ({"documents": None}, "documents"),
    ({"documents": []}, "documents"),
    ({"documents": ["ok", 7]}, "documents"),
    ({"documents": ["ok", ""]}, "documents"),
    ({"documents": ["d"] * 1001}, "documents"),
    ({"top_n": 0}, "top_n"),
    ({"top_n": -2}, "top_n"),
    ({"top_n": 1.5}, "top_n"),
    ({"top_n": "3"}, "top_n"),
    ({"model": "no-such-model"}, "model"),
    ({"model": EMBEDDER}, "model"),
    ({"raw_scores": "yes"}, "raw_scores"),
    ({"return_documents": "no"}, "return_documents"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("change", "field"), BAD_BODIES)
def test_bad_rerank_bodies_get_a_4xx_naming_the_field(served: Served, change: dict,
                                                      field: str) -> None:
    body = {"model": NAME, "query": QUERY, "documents": DOCUMENTS[:2], **change}
    for route in ("/v1/rerank", "/v2/rerank"):
        status, answer = door_post(served, route, body)
        error = json.loads(answer)["error"]
        assert 400 <= status < 500 and error["param"] == field, (route, status, error)


def door_post(served: Served, route: str, body: object) -> tuple[int, bytes]:
    return http_post(served.door.http_url, route, json.dumps(body).encode(),
                     {"Authorization": f"Bearer {served.door.api_keys['alice']}",
                      "Content-Type": "application/json"})


@pytest.mark.timeout(600)
def test_each_family_on_the_others_route_is_told_where_to_go(served: Served) -> None:
    status, answer = door_post(served, "/v1/rerank", {"model": EMBEDDER, "query": "q",
                                                      "documents": ["d"]})
    assert status == 404 and "/v1/embeddings" in json.loads(answer)["error"]["message"]
    status, answer = door_post(served, "/v1/embeddings", {"model": NAME, "input": "q"})
    assert status == 404 and "/v1/rerank" in json.loads(answer)["error"]["message"]


@pytest.mark.timeout(600)
def test_bad_pairs_at_the_kserve_route_and_the_sdk_get_clear_errors(served: Served) -> None:
    status, answer = kserve(served, ["q", "r"], ["a", "b", "c"])  # Triton's own check
    assert status == 400 and "batch size does not match" in answer["error"], answer
    status, answer = kserve(served, ["q", "q"], ["fine", "   "])
    assert status == 400 and "DOCUMENT[1]" in answer["error"], answer
    status, answer = kserve(served, ["q"], ["a"], raw_scores="yes")
    assert status == 400 and "raw_scores" in answer["error"], answer
    status, answer = kserve(served, ["q"], ["a"], count_only=True)
    assert status == 400 and "count_only" in answer["error"], answer
    body = json.dumps({"inputs": [
        {"name": "QUERY", "datatype": "INT32", "shape": [1, 1], "data": [1]},
        {"name": "DOCUMENT", "datatype": "BYTES", "shape": [1, 1], "data": ["a"]}]}).encode()
    status, _ = http_post(served.server.http_url, f"/v2/models/{NAME}/infer", body)
    assert status == 400
    with Client(served.server.http_url) as client:
        with pytest.raises(InvalidInputError, match="DOCUMENT"):
            client.rerank("q", [b"\xff\xfe"], model=NAME)
        with pytest.raises(InvalidInputError, match="top_n"):
            client.rerank("q", ["a"], model=NAME, top_n=0)
        assert client.rerank("q", ["a"], model=NAME)[0].index == 0  # still usable
    assert_serving(served.server.http_url)


rerank_bodies = st.fixed_dictionaries({}, optional={
    "model": st.sampled_from([NAME, EMBEDDER, "", "x" * 300, None, 3]),
    "query": st.one_of(st.text(max_size=30), st.integers(), st.none(), st.lists(st.text())),
    "documents": st.one_of(st.lists(st.one_of(st.text(max_size=30), st.integers(), st.none(),
                                              st.fixed_dictionaries({"text": st.text()})),
                                    max_size=5), st.text(), st.none()),
    "top_n": st.one_of(st.integers(-3, 10), st.floats(allow_nan=False), st.text(max_size=3)),
    "return_documents": st.one_of(st.booleans(), st.text(max_size=3)),
    "raw_scores": st.one_of(st.booleans(), st.integers()),
    "truncate": st.one_of(st.sampled_from(["reject", "truncate", "chunk", "x"]), st.booleans()),
})


@FUZZ
@given(body=rerank_bodies)
def test_random_rerank_bodies_get_an_answer_or_a_4xx(served: Served, body: dict) -> None:
    status, answer = door_post(served, "/v2/rerank", body)
    assert status == 200 or 400 <= status < 500, (status, answer[:300])
    if status != 200:
        assert json.loads(answer)["error"]["message"]


@pytest.mark.timeout(600)
def test_the_reranker_still_serves_after_the_fuzzing(served: Served) -> None:
    with Client(served.server.http_url) as client:
        assert len(client.rerank(QUERY, DOCUMENTS, model=NAME)) == len(DOCUMENTS)
    assert_serving(served.server.http_url)


@pytest.mark.timeout(600)
def test_a_new_version_is_gated_promoted_and_rolled_back_as_the_other_families(
        served: Served) -> None:
    """`tmr promote` (the rank gate) then `tmr rollback` on the reranker's primary, the
    served version named in SERVED_BY each time; this test runs last, so the routes above
    saw version 1."""
    encoder = served.repository / f"{NAME}_onnx"
    add_version(encoder, 2, encoder / "1" / "model.onnx")
    url = f"http://{served.server.http_url}"
    promoted = tmr("promote", NAME, "2", "--url", url, "--repository", str(served.repository))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "rank_correlation" in promoted.stdout + promoted.stderr

    def served_version() -> str:
        with Client(served.server.http_url) as client:
            return client.rerank_with_info(QUERY, DOCUMENTS[:2], model=NAME).served_by[0]

    deadline = time.monotonic() + 30
    while not served_version().startswith(f"{NAME}_onnx:2:") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert served_version().startswith(f"{NAME}_onnx:2:fp32:L0")
    back = tmr("rollback", NAME, "--url", url, "--repository", str(served.repository))
    assert back.returncode == 0, back.stdout + back.stderr
    deadline = time.monotonic() + 30
    while not served_version().startswith(f"{NAME}_onnx:1:") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert served_version().startswith(f"{NAME}_onnx:1:fp32:L0")


@pytest.mark.timeout(600)
def test_the_rerank_doc_snippets_run_as_written(served: Served) -> None:
    """docs/openai.md's Cohere examples, the reranker's name for RERANKER."""
    import subprocess
    import sys

    from tests.integration.test_openai_route import readme_snippets

    snippets = readme_snippets(rerank=True)
    assert [lang for lang, _ in snippets] == ["python"]
    for _, code in snippets:
        code = code.replace("localhost:8080", served.door.http_url).replace(
            "tmr-dev-key", served.door.api_keys["alice"]).replace("RERANKER", NAME)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        index, score, text = done.stdout.split(maxsplit=2)
        assert index in ("0", "1") and 0 <= float(score) <= 1 and text.strip() == "a kitten"

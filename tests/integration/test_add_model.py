"""`tmr add` on a copy of the repository: a second text-embedding model served with no code
change, its embeddings equal to sentence-transformers' own (eager PyTorch).

CI adds a smaller second model built here from real weights: all-MiniLM-L6-v2 cut to its
first 3 layers, with CLS pooling and no normalisation, a maximum of 128 tokens, named
prompts (`query: `, `passage: `) and Matryoshka sizes (`--matryoshka-dims 256,128`), so
every model fact the family reads from a folder differs from the shipped model's. The same
test adds all-mpnet-base-v2 (MPNet, 768-d, 440 MB, assembled from five packages) when
`TMR_ADD_SOURCE` names it, which `make test-mpnet` does: too slow for CI (docs).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tmr_client import Client, InvalidInputError

from core.families import served_precision
from core.families.catalog import find
from core.families.configs import parameters_of
from core.repository import copy_repository
from core.versions import read_config, versions_on_disk
from export.sources import resolve
from server.launcher import TritonServer
from tests.conftest import MINILM_SOURCE, REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import assert_serving, http_post, tmr
from tests.integration.test_embed_serving import TEXTS, sentence_transformers_embeddings
from tests.integration.test_front_door import open_front_door

NAME = os.environ.get("TMR_ADD_NAME", "small")


def smaller_model(folder: Path) -> Path:
    """all-MiniLM-L6-v2 cut to 3 layers, CLS pooling, unnormalised, 128 tokens (a real ST
    folder: sentence-transformers loads it as it is)."""
    shutil.copytree(MINILM_SOURCE, folder)
    edits = {
        "config.json": {"num_hidden_layers": 3},
        "1_Pooling/config.json": {"pooling_mode_mean_tokens": False,
                                  "pooling_mode_cls_token": True},
        "sentence_bert_config.json": {"max_seq_length": 128},
    }
    for name, changes in edits.items():
        data = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**data, **changes}, indent=1))
    modules = [m for m in json.loads((folder / "modules.json").read_text())
               if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules, indent=1))
    st_config = folder / "config_sentence_transformers.json"
    data = json.loads(st_config.read_text()) if st_config.exists() else {}
    st_config.write_text(json.dumps({**data, "prompts": PROMPTS}, indent=1))
    return folder


PROMPTS = {"query": "query: ", "passage": "passage: "}
SIZES = (256, 128)


@pytest.fixture(scope="module")
def added(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path, Path]]:
    root = tmp_path_factory.mktemp("add")
    repo = copy_repository([REPOSITORY], root / "repository")
    source = os.environ.get("TMR_ADD_SOURCE") or str(smaller_model(root / "source"))
    out = tmr("add", NAME, "--family", "text_embedding", "--from", source,
              "--repository", str(repo), "--no-tune", "--matryoshka-dims",
              ",".join(map(str, SIZES)), timeout_s=3000)
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"\ntmr add {NAME}:\n{out.stdout}")  # its fidelity and gate figures (-s shows them)
    server = start_server(repo, root / "tritonserver.log")
    yield server, repo, resolve(source)
    stop_cleanly(server)


@pytest.mark.timeout(3600)
def test_an_added_model_is_served_with_no_code_change_and_equals_eager_pytorch(added) -> None:
    server, repo, folder = added
    model = find(repo, NAME)
    assert model.front == NAME
    assert sorted(model.encoders) == ["int8", "onnx", "openvino", "torchscript"]
    reference = sentence_transformers_embeddings(folder, TEXTS)
    with Client(server.grpc_url, protocol="grpc") as client:
        result = client.embed_with_info(TEXTS, model=NAME)
        shipped = client.embed(TEXTS)  # the default model still serves beside it
    got = result.embeddings
    assert got.shape == reference.shape and shipped.shape[0] == len(TEXTS)
    cosine = (got * reference).sum(1) / (np.linalg.norm(got, axis=1)
                                          * np.linalg.norm(reference, axis=1))
    print(f"\n{NAME}: dim {got.shape[1]}, cosine vs sentence-transformers min {cosine.min():.6f}")
    assert cosine.min() >= 0.9999
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(reference, axis=1),
                       rtol=1e-3)  # the same normalisation (or none)
    # The reviewed config calls the family's primary at FP32 whatever this host is: the
    # host's choices are `tmr tune`'s (test_host_profile.py), never frozen into config.pbtxt.
    assert model.primary == model.family.serving.primary
    primary = model.encoder(model.primary)
    precision = served_precision(parameters_of(read_config(repo / primary)))
    assert result.served_by == [f"{primary}:1:{precision}:L0"] * len(TEXTS)


@pytest.mark.timeout(3600)
def test_adding_it_again_changes_nothing_and_a_bad_source_leaves_nothing(added) -> None:
    _, repo, folder = added
    model = find(repo, NAME)
    before = {m: versions_on_disk(repo / m) for m in model.models}
    again = tmr("add", NAME, "--family", "text_embedding", "--from", str(folder),
                "--repository", str(repo), "--no-tune")  # tuning is test_tune.py's
    if again.returncode != 0:  # added from parts:...: the folder is another source string
        assert "already exists" in again.stderr, again.stderr[-3000:]
    else:
        assert again.stdout.count("up to date") == 4, again.stdout
    assert {m: versions_on_disk(repo / m) for m in model.models} == before
    empty = repo.parent / "not_a_model"
    empty.mkdir()
    bad = tmr("add", "broken", "--family", "text_embedding", "--from", str(empty),
              "--repository", str(repo))
    assert bad.returncode == 2 and "no config.json" in bad.stderr, bad.stderr
    assert not [p for p in repo.iterdir() if "broken" in p.name]
    unknown = tmr("add", "other", "--family", "audio", "--from", str(folder),
                  "--repository", str(repo))
    assert unknown.returncode == 2 and "unknown model family 'audio'" in unknown.stderr


@pytest.fixture(scope="module")
def eager(added):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(added[2]), device="cpu")


def eager_embeddings(model, texts: list[str], **options: object) -> np.ndarray:
    """sentence-transformers' own, each text alone (no padding)."""
    return np.stack([model.encode([t], **options)[0] for t in texts])


def min_cosine(got: object, reference: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == reference.shape
    return float(((got * reference).sum(1) / np.linalg.norm(got, axis=1)
                  / np.linalg.norm(reference, axis=1)).min())


def kserve(server: TritonServer, texts: list[str], **parameters: object) -> tuple[int, dict]:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1],
                        "data": texts}],
            "outputs": [{"name": "EMBEDDING"}], "parameters": parameters}
    status, answer = http_post(server.http_url, f"/v2/models/{NAME}/infer",
                               json.dumps(body).encode())
    return status, json.loads(answer)


def kserve_vectors(answer: dict) -> np.ndarray:
    output = answer["outputs"][0]
    return np.array(output["data"], dtype=np.float32).reshape(output["shape"])


def cli_embed(server: TritonServer, folder: Path, *flags: str) -> np.ndarray:
    """TEXTS through `tmr embed --model NAME FLAGS --out F.npy`."""
    out = folder / f"cli{len(list(folder.iterdir()))}.npy"
    done = tmr("embed", "--url", server.http_url, "--model", NAME, *flags, "--out", str(out),
               *TEXTS)
    assert done.returncode == 0, done.stdout + done.stderr
    return np.load(out)


@pytest.mark.timeout(600)
def test_prompts_and_sizes_equal_eager_sentence_transformers_on_every_route(
        added, eager, tmp_path: Path):
    """Each prompt, and each Matryoshka size, through the SDK (gRPC), KServe JSON, the
    OpenAI route and `tmr embed`, against sentence-transformers' encode(prompt_name=...,
    truncate_dim=...)."""
    import openai

    server = added[0]
    prompts = PROMPTS if not os.environ.get("TMR_ADD_SOURCE") else dict(eager.prompts)
    door = open_front_door(server)
    try:
        api = openai.OpenAI(base_url=f"http://{door.http_url}/v1",
                            api_key=door.api_keys["alice"], max_retries=0)
        for name in prompts:
            reference = eager_embeddings(eager, TEXTS, prompt_name=name)
            with Client(server.grpc_url, protocol="grpc") as client:
                sdk = client.embed(TEXTS, model=NAME, prompt_name=name)
            status, answer = kserve(server, TEXTS, prompt_name=name)
            assert status == 200, answer
            door_answer = api.embeddings.create(model=NAME, input=TEXTS,
                                                extra_body={"prompt_name": name})
            routes = {"sdk": sdk, "kserve": kserve_vectors(answer),
                      "openai": [d.embedding for d in door_answer.data],
                      "cli": cli_embed(server, tmp_path, "--prompt-name", name)}
            found = {route: min_cosine(got, reference) for route, got in routes.items()}
            print(f"\n{NAME} prompt {name!r}: min cosine vs sentence-transformers {found}")
            assert min(found.values()) >= 0.9999, found
        for size in SIZES:
            reference = eager_embeddings(eager, TEXTS, truncate_dim=size)
            with Client(server.http_url) as client:
                sdk = client.embed(TEXTS, model=NAME, dimensions=size)
            status, answer = kserve(server, TEXTS, dimensions=size)
            assert status == 200, answer
            door_answer = api.embeddings.create(model=NAME, input=TEXTS, dimensions=size)
            routes = {"sdk": sdk, "kserve": kserve_vectors(answer),
                      "openai": [d.embedding for d in door_answer.data],
                      "cli": cli_embed(server, tmp_path, "--dimensions", str(size))}
            found = {route: min_cosine(got, reference) for route, got in routes.items()}
            print(f"{NAME} dimensions {size}: min cosine vs truncate_dim {found}")
            assert min(found.values()) >= 0.9999, found
        # What the model does not declare is a 400 naming what it has, on every route.
        with Client(server.http_url) as client:
            with pytest.raises(InvalidInputError, match="its prompts: passage, query"):
                client.embed(["x"], model=NAME, prompt_name="document")
            with pytest.raises(InvalidInputError, match=r"sizes: \d+, 256, 128; got 100"):
                client.embed(["x"], model=NAME, dimensions=100)
        status, answer = kserve(server, ["x"], dimensions=100)
        assert status == 400 and "256, 128" in answer["error"], answer
        with pytest.raises(openai.BadRequestError, match="its prompts: passage, query"):
            api.embeddings.create(model=NAME, input="x", extra_body={"prompt_name": "doc"})
        with pytest.raises(openai.BadRequestError, match=r"sizes: .*256, 128"):
            api.embeddings.create(model=NAME, input="x", dimensions=100)
        assert_serving(server.http_url)
    finally:
        assert door.close() == 0


@pytest.mark.timeout(300)
def test_token_counts_and_similarity_use_the_prompt_as_the_model_counts_it(added, eager):
    server, _, _ = added
    texts = ["a short one", "word " * 200]
    with Client(server.grpc_url, protocol="grpc") as client:
        counts = client.count_tokens(texts, model=NAME, prompt_name="query").counts
        scores = client.similarity(TEXTS[0], TEXTS[1:], model=NAME,
                                   prompt_name="query").scores
    want = [len(eager.tokenizer("query: " + t)["input_ids"]) for t in texts]
    assert [c.tokens for c in counts] == want
    assert counts[0].fits and counts[1].outcome("truncate") == "truncated"
    assert counts[1].truncated_tokens == want[1] - 128  # the model's 128 tokens
    vectors = eager_embeddings(eager, TEXTS, prompt_name="query")
    expected = vectors[1:] @ vectors[0] / (np.linalg.norm(vectors[1:], axis=1)
                                           * np.linalg.norm(vectors[0]))
    assert np.allclose(scores, expected, atol=1e-4)
    out = tmr("tokens", "--url", server.http_url, "--model", NAME, "--prompt-name", "query",
              "--json", *texts)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["texts"]
    assert [r["tokens"] for r in rows] == want and rows[1]["chunk"] == "chunked"
    # an unknown prompt gets embed's 400, and the CLI's one line
    bad = tmr("tokens", "--url", server.http_url, "--model", NAME, "--prompt-name", "x", "y")
    assert bad.returncode != 0 and "its prompts: passage, query" in bad.stderr, bad.stderr

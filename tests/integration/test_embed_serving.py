"""embed answers with the same embeddings as eager PyTorch, over every transport.

The reference is sentence-transformers itself (eager PyTorch, its own pooling and
normalisation) on the model's folder: nothing of this project's export code.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from tmr_client import AsyncClient, Client

from core.families import TEXT_EMBEDDING
from runtime.tokenization import TextEncoder, pad_batch
from tests.conftest import MINILM_SOURCE
from tests.integration.helpers import http_post

INT8_MIN_COSINE = float(TEXT_EMBEDDING.format("int8").gate["gate_min_cosine"])

TEXTS = [
    "Triton batches requests on the server.",
    "A much longer sentence about dynamic batching, priority queues and graceful "
    "degradation, which pads differently from the short ones around it.",
    "short",
    "Ünïcödé and emoji 🚀 survive the round trip.",
]


def sentence_transformers_embeddings(folder, texts: list[str]) -> np.ndarray:
    """sentence-transformers' own eager embeddings, each text alone (no padding)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return np.stack([model.encode([t])[0] for t in texts])


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return sentence_transformers_embeddings(MINILM_SOURCE, TEXTS)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_embed_matches_pytorch_reference_sync(triton, protocol, reference) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    with Client(url, protocol=protocol) as client:
        got = client.embed(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert cosines(got, reference).min() >= 0.9999


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_embed_matches_pytorch_reference_async(triton, protocol, reference) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url

    async def run() -> np.ndarray:
        async with AsyncClient(url, protocol=protocol) as client:
            return await client.embed(TEXTS, priority=1)

    got = asyncio.run(run())
    assert cosines(got, reference).min() >= 0.9999


def test_client_splits_lists_into_requests_of_the_fronts_preferred_batch(triton,
                                                                          reference) -> None:
    texts = TEXTS * 40  # 160 rows > max_batch_size 64
    with Client(triton.grpc_url, protocol="grpc") as client:
        result = client.embed_with_info(texts)
    chunks = -(-len(texts) // TEXT_EMBEDDING.serving.front_batching.preferred_batch_size[0])
    assert len(result.request_ids) == chunks and len(set(result.request_ids)) == chunks
    assert result.model_name == "embed" and result.model_versions == ["1"] * chunks
    assert result.tokens[:4] == [len(r) for r in TextEncoder(
        MINILM_SOURCE / "tokenizer.json").token_ids(TEXTS)]
    assert cosines(result.embeddings, np.tile(reference, (40, 1))).min() >= 0.9999


def encoder_output(http_url: str, model: str, output: str, ids: np.ndarray,
                   mask: np.ndarray) -> np.ndarray:
    body = json.dumps({"inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": list(ids.shape),
         "data": ids.ravel().tolist()},
        {"name": "attention_mask", "datatype": "INT64", "shape": list(mask.shape),
         "data": mask.ravel().tolist()},
    ]}).encode()
    status, answer = http_post(http_url, f"/v2/models/{model}/infer", body)
    assert status == 200, answer
    out = next(o for o in json.loads(answer)["outputs"] if o["name"] == output)
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


@pytest.fixture(scope="module")
def padded_batch() -> tuple[np.ndarray, np.ndarray]:
    encoder = TextEncoder(MINILM_SOURCE / "tokenizer.json")
    return pad_batch(encoder.token_ids(TEXTS), encoder.pad_id)


def test_onnx_and_torchscript_models_agree(triton, padded_batch) -> None:
    ids, mask = padded_batch
    onnx = encoder_output(triton.http_url, "minilm_onnx", "embedding", ids, mask)
    torchscript = encoder_output(triton.http_url, "minilm_torchscript", "embedding__0", ids, mask)
    assert np.abs(onnx - torchscript).max() <= 1e-5


def test_int8_model_stays_within_the_export_fidelity_threshold(triton, padded_batch,
                                                                reference) -> None:
    ids, mask = padded_batch
    int8 = encoder_output(triton.http_url, "minilm_int8", "embedding", ids, mask)
    assert cosines(int8, reference).min() >= INT8_MIN_COSINE


def test_stub_imports_the_project_venv_numpy_below_2(triton) -> None:
    import sys

    body = json.dumps({"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1],
                                   "data": ["numpy"]}]}).encode()
    status, answer = http_post(triton.http_url, "/v2/models/stub_env/infer", body)
    assert status == 200, answer
    info = json.loads(json.loads(answer)["outputs"][0]["data"][0])
    assert int(info["numpy_version"].split(".")[0]) < 2, info
    assert info["numpy_path"].startswith(sys.prefix), info  # this venv, not the global one
    assert info["python"] == sys.version.split()[0]  # the venv's own interpreter


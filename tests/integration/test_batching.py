"""Dynamic batching really happens: texts of different lengths share executions, and
similar lengths share encoder calls."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from tmr_client import NO_RETRY, AsyncClient, Client

from core.repository import edit_config
from server.launcher import TritonServer
from tests.conftest import MINILM_SOURCE, start_server, stop_cleanly
from tests.integration.helpers import (
    concurrent_encoder_calls,
    grown,
    metric_value,
    quiet_counts,
    repository_of,
    settled_counts,
)
from tests.integration.test_embed_serving import cosines, sentence_transformers_embeddings

CONCURRENCY = 48


async def concurrent_embeds(url: str, texts: list[str]) -> list[np.ndarray]:
    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY) as client:
        return await asyncio.gather(*(client.embed([t]) for t in texts))


def encoder_calls(server: TritonServer, front: str = "embed") -> float:
    """The encoder calls a front has made (python_backends/text_model.py TokenMetrics)."""
    return metric_value(server.metrics_url, "tmr_encoder_calls_total", model=front)


def calls_since(server: TritonServer, before: float, at_least: int = 1) -> float:
    """Encoder calls since `before`, once the counter (sent with a batch's metrics) shows
    at least `at_least` of them, or after 10 s."""
    return grown(server.metrics_url, "tmr_encoder_calls_total", before, at_least,
                 model="embed")


def test_concurrent_texts_of_different_lengths_share_executions(triton) -> None:
    """48 texts of 48 lengths sent at once: the front's workers take them in batches
    (python_backends/workers.py) and send each batch's rows in length buckets
    (`length_bucket_waste`), one encoder call a bucket, so similar lengths share calls."""
    texts = [" ".join(["token"] * (i + 1)) for i in range(CONCURRENCY)]  # 48 distinct lengths
    before = quiet_counts(triton.http_url, "embed")
    calls_before = encoder_calls(triton)

    results = asyncio.run(concurrent_embeds(triton.grpc_url, texts))

    assert all(r.shape == (1, 384) for r in results)
    after = settled_counts(triton.http_url, "embed", before.inference_count + CONCURRENCY)
    assert after.inference_count - before.inference_count == CONCURRENCY
    calls = calls_since(triton, calls_before)
    assert 1 <= calls < CONCURRENCY, f"{calls} encoder calls for {CONCURRENCY} texts"


def test_direct_encoder_requests_of_one_shape_are_batched_into_one_session_call(triton) -> None:
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    before = quiet_counts(triton.http_url, "minilm_int8")
    calls_before = metric_value(triton.metrics_url, "tmr_backend_runtime_rows_total",
                                model="minilm_int8")
    concurrent_encoder_calls(triton.grpc_url, "minilm_int8", ids, 32)
    after = settled_counts(triton.http_url, "minilm_int8", before.inference_count + 32)
    assert after.inference_count - before.inference_count == 32
    assert after.execution_count - before.execution_count < 32
    rows = metric_value(triton.metrics_url, "tmr_backend_runtime_rows_total",
                        model="minilm_int8") - calls_before
    assert rows == 32


def two_instances_with_an_idle_session(config) -> None:
    """A host layout of several encoder instances (the tuner's `--full` on more cores):
    2 instances x 1 thread, and the idle session of 2 for a lone request."""
    config.instance_group[0].count = 2
    config.parameters["intra_op_thread_count"].string_value = "1"
    config.parameters["idle_intra_op_thread_count"].string_value = "2"


def over_bls(config) -> None:
    """The front calls its primary's model over BLS (a host profile's BLS layout) rather
    than running it in its own process."""
    config.parameters["primary_in_process"].string_value = "false"


@pytest.fixture(scope="module")
def layered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("idle-session")
    repo = repository_of(root, "embed", "minilm_onnx", "minilm_int8")
    edit_config(repo, "minilm_onnx", two_instances_with_an_idle_session)
    edit_config(repo, "embed", over_bls)
    server = start_server(repo, root / "tritonserver.log")
    yield server
    stop_cleanly(server)


def test_a_lone_request_runs_on_the_idle_session_and_a_crowd_on_the_instances_own(
        layered) -> None:
    """minilm_onnx with 2 instances x 1 thread and idle_intra_op_thread_count 2: with no
    peer busy (nor finished within the recent window), a batch runs on the 2-thread
    session. (The reviewed configs run one instance on every core, which needs none.)"""
    def idle_and_all() -> tuple[float, float]:
        return tuple(metric_value(layered.metrics_url, name, model="minilm_onnx")
                     for name in ("tmr_backend_idle_session_calls_total",
                                  "tmr_backend_runtime_calls_total"))

    idle0, all0 = idle_and_all()
    with Client(layered.http_url, retry=NO_RETRY) as client:
        for i in range(10):
            client.embed([f"a lone request number {i}"])
            time.sleep(0.05)  # past the peers' recent window (busy_peers.BusyPeers)
    idle1, all1 = idle_and_all()
    assert all1 - all0 >= 10
    assert idle1 - idle0 >= 8, "lone requests should use the idle session"

    asyncio.run(concurrent_embeds(layered.grpc_url, [f"crowd {i} " * (i % 7 + 1)
                                                     for i in range(CONCURRENCY)]))
    idle2, all2 = idle_and_all()
    assert idle2 - idle1 < all2 - all1, "under load the instances run their own sessions"


def test_a_request_over_several_length_buckets_gets_each_row_its_own_vector(triton) -> None:
    """One request whose rows fall in several length buckets: one encoder call a bucket,
    and every row still gets its own text's vector (against sentence-transformers, each
    text alone), in the request's row order."""
    nonce = uuid.uuid4().hex[:8]  # no cached row can answer
    texts = [f"{nonce} " + " ".join(["word"] * n) for n in (180, 1, 60, 3, 120, 9, 30, 240)]
    before = encoder_calls(triton)
    with Client(triton.http_url, retry=NO_RETRY) as client:
        got = client.embed(texts)
    calls = calls_since(triton, before, at_least=4)
    assert calls >= 4, f"{calls} encoder call(s): the rows should span several buckets"
    reference = sentence_transformers_embeddings(MINILM_SOURCE, texts)
    assert cosines(got, reference).min() >= 0.9999

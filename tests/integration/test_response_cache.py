"""Triton's response cache on `embed`: it works, and why it is off in the shipped config.

A server of its own runs a copy of the repository with `response_cache { enable: true }`
on `embed`. Identical valid requests are answered from the cache (the hits show in
nv_cache_num_hits_per_model). But Triton 2.51 also caches a Python model's error
response, as an empty success: the second identical bad request gets 200 with no
outputs. If a later Triton fixes that, the second test fails, and the cache can be
turned on in model_repository/embed/config.pbtxt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from tmr_client import Client

from core.repository import edit_config
from server.launcher import TritonServer
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import fresh, http_post, metric_value, repository_of

KEEP = {"embed", "minilm_onnx", "minilm_int8"}


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("response_cache")
    repo = repository_of(root, *KEEP)
    edit_config(repo, "embed", lambda config: setattr(config.response_cache, "enable", True))
    server = start_server(repo, root / "tritonserver.log")
    yield server
    stop_cleanly(server)


def test_identical_requests_are_answered_by_the_response_cache(cached) -> None:
    texts = fresh("cache me once")
    before = metric_value(cached.metrics_url, "nv_cache_num_hits_per_model", model="embed")
    with Client(cached.grpc_url, protocol="grpc") as client:
        first = client.embed_with_info(texts)
        second = client.embed_with_info(texts)
    hits = metric_value(cached.metrics_url, "nv_cache_num_hits_per_model", model="embed")
    assert hits - before == 1
    assert np.array_equal(first.embeddings, second.embeddings)
    assert second.served_by == first.served_by  # the cached answer says what computed it


def test_triton_2_51_caches_an_error_response_as_an_empty_success(cached) -> None:
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                   "data": ["   "]}]}).encode()
    status, answer = http_post(cached.http_url, "/v2/models/embed/infer", body)
    assert status == 400 and "TEXT[0] is empty" in json.loads(answer)["error"]
    status, answer = http_post(cached.http_url, "/v2/models/embed/infer", body)
    assert (status, json.loads(answer).get("outputs")) == (200, [])  # the bug, still there

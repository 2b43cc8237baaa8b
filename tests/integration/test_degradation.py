"""The degradation router on its own server: forced levels, recovery, fail-over, deep health."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from tmr_client import NO_RETRY, Client
from tmr_client.auth import key_headers

from core.families.catalog import catalog
from core.repository import copy_repository
from server.admin import AUTO, deep_health, force_level_explicit, wait_for_level
from server.launcher import TritonServer
from server.settings import admin_key
from tests.conftest import REPOSITORY, start_server, stop_cleanly
from tests.integration.helpers import (
    fresh,
    http_post,
    metric_value,
    steady_high_priority_load,
    tmr,
)
from tests.load import NORMAL, by_priority, standard_closed_loop

TEXTS = ("the router degrades on purpose", "and recovers on purpose")


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A server of its own (state changes here must not leak into other tests)."""
    root = tmp_path_factory.mktemp("degradation")
    repo = copy_repository([REPOSITORY], root / "repository")
    server = start_server(repo, root / "tritonserver.log")
    yield server
    stop_cleanly(server)


def test_every_row_reports_the_primary_encoder_at_level_0(router) -> None:
    with Client(router.grpc_url, protocol="grpc") as client:
        result = client.embed_with_info(fresh(*TEXTS), priority=1)
    assert result.served_by == ["minilm_onnx:1:fp32:L0"] * 2


def test_operator_forces_the_int8_level_and_auto_restores_fp32(router) -> None:
    texts = fresh(*TEXTS)
    with Client(router.http_url) as client:
        fp32 = client.embed(texts)
    forced = tmr("degrade", "--level", "2", "--url", router.http_url)
    assert forced.returncode == 0, forced.stderr
    assert "embed now reports: minilm_int8:1:int8:L2" in forced.stdout
    with Client(router.http_url) as client:
        result = client.embed_with_info(texts)
    assert result.served_by == ["minilm_int8:1:int8:L2"] * 2
    cosine = (result.embeddings * fp32).sum(1)
    assert cosine.min() >= 0.95  # the export's INT8 fidelity floor
    restored = tmr("degrade", "--level", "auto", "--url", router.http_url)
    assert restored.returncode == 0, restored.stderr
    assert "embed now reports: minilm_onnx:1:fp32:L0" in restored.stdout


def test_no_level_refuses_by_priority_the_highest_automatic_one_serves_everyone(router) -> None:
    force_level_explicit(router.http_url, 3)
    wait_for_level(router.http_url, 3)
    with Client(router.grpc_url, protocol="grpc", retry=NO_RETRY) as client:
        for priority in (None, 2, 1):  # Triton's default (low), low, high: all served
            served = client.embed_with_info(fresh(*TEXTS), priority=priority).served_by
            assert all(s.endswith(":L3") for s in served), served
    assert metric_value(router.metrics_url, "tmr_rejections_total") == 0
    force_level_explicit(router.http_url, AUTO)
    wait_for_level(router.http_url, AUTO)


def test_after_an_overload_normal_traffic_is_served_at_once(router) -> None:
    """32 + 64 closed-loop clients at priority 1 and 2 (standard `priority` only), then,
    1 s after they stop, 4 clients at the default priority: none of theirs fails."""
    overload = asyncio.run(standard_closed_loop(router.http_url, ((1, 32), (2, 64)), 6.0,
                                                "overload"))
    time.sleep(1.0)
    normal = asyncio.run(standard_closed_loop(router.http_url, NORMAL, 3.0, "normal"))
    rows = {(r.phase, r.priority): r for r in by_priority(overload, 6.0, "overload")
            + by_priority(normal, 3.0, "normal")}
    print(f"\nafter an overload: {rows}")
    high = rows[("overload", 1)]
    assert high.served >= 0.99 * high.requests, high
    assert all(key.startswith("503 ") for r in rows.values() for key in r.failures), rows
    assert rows[("normal", 0)].failures == {} and rows[("normal", 0)].served > 0
    force_level_explicit(router.http_url, AUTO)
    wait_for_level(router.http_url, AUTO)


def test_top_level_answers_503_to_everyone_until_the_operator_lifts_it(router) -> None:
    force_level_explicit(router.http_url, 4)
    wait_for_level(router.http_url, 4)
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                   "data": fresh("anything")}]}).encode()
    status, answer = http_post(router.http_url, "/v2/models/embed/infer", body)
    assert status == 503
    assert "degraded to level 4 (unavailable): out of service" in json.loads(answer)["error"]
    force_level_explicit(router.http_url, AUTO)
    assert wait_for_level(router.http_url, AUTO) == "minilm_onnx:1:fp32:L0"


def test_deep_health_probes_every_model_with_a_real_inference(router) -> None:
    checks = deep_health(router.http_url, ["embed", "minilm_onnx", "minilm_int8",
                                           "minilm_torchscript"])
    assert all(c.ok for c in checks), checks
    body = json.dumps({"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1],
                                   "data": ["go"]}]}).encode()
    status, answer = http_post(router.http_url, "/v2/models/health/infer", body)
    assert status == 200, answer
    report = json.loads(json.loads(answer)["outputs"][0]["data"][0])
    every = [name for model in catalog(REPOSITORY) for name in model.models]
    assert report["healthy"] is True and set(report["models"]) == set(every)
    # what operations changed since the host profile was tuned, as a list and a gauge
    assert isinstance(report["profile_changes"], list)
    assert metric_value(router.metrics_url, "tmr_host_profile_changes", model="health") == \
        len(report["profile_changes"])
    out = tmr("health", "--url", router.http_url)
    assert out.returncode == 0 and out.stdout.count("OK  ") == len(every) == 18, out.stdout


def repository_call(url: str, action: str, model: str) -> None:
    """load_model / unload_model with a client of its own (gevent clients stay per thread)."""
    admin = httpclient.InferenceServerClient(url)
    try:
        getattr(admin, action)(model, headers=key_headers(admin=True, admin_key=admin_key()))
    finally:
        admin.close()


def test_unloading_the_primary_model_under_load_costs_nothing_its_front_holds_it(
        router) -> None:
    """The front runs its primary's served version in its own process (one model, one
    process): unloading the encoder model under load fails nothing and moves no row to
    the fallback. (Where a front calls its primary over BLS, the GPU profile, a vanished
    primary fails over within the batch: python_backends/front.py `_run_plan`.)"""
    async def scenario() -> tuple[list, list]:
        load = asyncio.ensure_future(steady_high_priority_load(router.grpc_url, 6.0,
                                                               priority=2))
        await asyncio.sleep(2.0)
        await asyncio.to_thread(repository_call, router.http_url, "unload_model", "minilm_onnx")
        return await load

    fallbacks = metric_value(router.metrics_url, "tmr_degradation_fallbacks_total")
    try:
        served, errors = asyncio.run(scenario())
    finally:
        repository_call(router.http_url, "load_model", "minilm_onnx")
    assert errors == []
    assert served and all(s.startswith("minilm_onnx:1:fp32:L0") for s in served), \
        sorted(set(served))
    assert metric_value(router.metrics_url, "tmr_degradation_fallbacks_total") == fallbacks


def test_cached_answers_level_serves_repeated_texts_from_the_router_cache(router) -> None:
    texts = fresh("asked again and again")
    force_level_explicit(router.http_url, 3)  # a reload: every instance starts empty
    wait_for_level(router.http_url, 3)
    before = metric_value(router.metrics_url, "tmr_router_cache_hits_total")
    with Client(router.http_url) as client:
        # Each of the 3 embed instances has its own cache: 7 asks repeat on at least one.
        answers = [client.embed_with_info(texts) for _ in range(7)]
    served = [a.served_by[0] for a in answers]
    assert served[0] == "minilm_int8:1:int8:L3"
    assert any(s == "minilm_int8:1:int8:L3:cached" for s in served), served
    assert metric_value(router.metrics_url, "tmr_router_cache_hits_total") - before >= 1
    assert all(np.array_equal(a.embeddings, answers[0].embeddings) for a in answers)
    force_level_explicit(router.http_url, AUTO)
    wait_for_level(router.http_url, AUTO)


def test_the_image_family_degrades_to_its_int8_encoder_too(router) -> None:
    from tests.image_samples import mnist_test_pngs

    pngs, labels = mnist_test_pngs(20)
    forced = tmr("degrade", "digits", "--level", "2", "--url", router.http_url)
    assert forced.returncode == 0, forced.stderr
    assert "digits now reports: digits_int8:1:int8:L2" in forced.stdout
    with Client(router.http_url, model="digits") as client:
        result = client.classify(pngs, top_k=1)
    assert set(result.served_by) == {"digits_int8:1:int8:L2"}
    top1 = np.array([p[0].class_id for p in result.predictions])
    assert (top1 == np.array(labels)).mean() >= 0.95
    restored = tmr("degrade", "digits", "--level", "auto", "--url", router.http_url)
    assert restored.returncode == 0, restored.stderr
    assert "digits now reports: digits_onnx:1:fp32:L0" in restored.stdout

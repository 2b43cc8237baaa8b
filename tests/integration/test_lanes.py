"""The interactive lane (core/families/lanes.py): priority 1 reaches `<front>_interactive`
over the SDK (HTTP and gRPC) and through the front door from a raw client that sends only
the standard `priority` parameter; every other request goes to the shared front; a
model without a lane keeps its request. Counted with Triton's own per-model metrics on
the session's server, which loads the lanes at start like every front."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tmr_client import NO_RETRY, Client

from core.families.catalog import catalog
from core.families.lanes import lane_name
from server.front_door import FrontDoor
from server.launcher import TritonServer
from server.prometheus import metric_value
from tests.conftest import REPOSITORY
from tests.integration.helpers import fresh, http_post, reloaded_with, tmr
from tests.integration.test_front_door import key, open_front_door, text_body

pytestmark = pytest.mark.timeout(120)

FRONT = "embed"
FRONTS = [m.front for m in catalog(REPOSITORY) if m.front]
LANE = lane_name(FRONT)


def successes(server: TritonServer, model: str) -> float:
    return metric_value(server.metrics_url, "nv_inference_request_success", model=model)


def taken(server: TritonServer) -> dict[str, float]:
    """The requests FRONT's workers took, by class: "1" through its lane, "2" the rest."""
    return {level: metric_value(server.metrics_url, "tmr_requests_by_priority_total",
                                model=FRONT, priority=level) for level in ("1", "2")}


def moved_since(server: TritonServer, before: dict[str, float]) -> dict[str, float]:
    """What each class took since `before`, once the counters, sent with the next batch's
    metrics, have caught up (a second's grace)."""
    deadline = time.monotonic() + 5
    while True:
        now = taken(server)
        moved = {k: now[k] - before[k] for k in now}
        if sum(moved.values()) or time.monotonic() > deadline:
            return moved
        time.sleep(0.1)


LANE_TOOK = {"1": 1, "2": 0}  # the lane's worker took it
FRONT_TOOK = {"1": 0, "2": 1}  # the front's bulk workers did


@pytest.fixture(scope="module")
def door(triton: TritonServer) -> Iterator[FrontDoor]:
    door = open_front_door(triton)
    yield door
    assert door.close() == 0, door.error_log_text()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("priority", [1, 2, None])
def test_the_sdk_sends_priority_1_to_the_lane_and_the_rest_to_the_shared_front(
        triton: TritonServer, protocol: str, priority: int | None) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    before, lane = taken(triton), successes(triton, LANE)
    with Client(url, protocol=protocol) as client:
        result = client.embed_with_info(fresh("a query typed by a person"), priority=priority)
    assert result.served_by[0].startswith("minilm_")
    assert moved_since(triton, before) == (LANE_TOOK if priority == 1 else FRONT_TOOK)
    assert successes(triton, LANE) - lane == (1 if priority == 1 else 0)


@pytest.mark.parametrize("priority", [1, 2])
def test_the_front_door_routes_the_standard_priority_parameter(
        triton: TritonServer, door: FrontDoor, priority: int) -> None:
    body = json.loads(text_body(*fresh("a raw client's query")))
    body["parameters"] = {"priority": priority}
    before = taken(triton)
    status, answer = http_post(door.http_url, f"/v2/models/{FRONT}/infer",
                               json.dumps(body).encode(), key(door))
    assert status == 200, answer
    assert moved_since(triton, before) == (LANE_TOOK if priority == 1 else FRONT_TOOK)


def test_a_model_without_a_lane_keeps_its_priority_1_request(
        triton: TritonServer, door: FrontDoor) -> None:
    body = {"inputs": [{"name": name, "datatype": "INT64", "shape": [1, 3],
                        "data": [101, 7592, 102] if name == "input_ids" else [1, 1, 1]}
                       for name in ("input_ids", "attention_mask")],
            "parameters": {"priority": 1}}
    status, answer = http_post(door.http_url, "/v2/models/minilm_onnx/infer",
                               json.dumps(body).encode(), key(door))
    assert status == 200, answer
    assert json.loads(answer)["model_name"] == "minilm_onnx"


def test_the_lane_answers_what_its_front_answers(triton: TritonServer) -> None:
    texts = fresh("the same text both ways")
    with Client(triton.http_url) as client:
        shared = client.embed_with_info(texts, priority=2)
        laned = client.embed_with_info(texts, priority=1)
    assert laned.served_by == shared.served_by  # the same encoder, version and precision
    assert float((laned.embeddings * shared.embeddings).sum()) > 0.9999


@pytest.mark.parametrize("priority", ["1", "standard"])
def test_the_openai_route_sends_x_priority_1_to_the_lane(
        triton: TritonServer, door: FrontDoor, priority: str) -> None:
    body = json.dumps({"model": "minilm", "input": fresh("an OpenAI client's query")})
    before = taken(triton)
    status, answer = http_post(door.http_url, "/v1/embeddings", body.encode(),
                               {**key(door), "Content-Type": "application/json",
                                "x-priority": priority})
    assert status == 200, answer
    assert len(json.loads(answer)["data"][0]["embedding"]) == 384
    assert moved_since(triton, before) == (LANE_TOOK if priority == "1" else FRONT_TOOK)


def test_a_saturated_lane_refuses_its_overflow_and_bulk_work_still_completes(
        triton: TritonServer) -> None:
    """The starvation bound: raw clients that name the lane flood it (waiting 50 ms after
    a refusal, as Retry-After asks); the lane refuses what its queue cannot hold at once,
    the SDK's priority 1 overflows to the shared front and is served, and the shared path,
    on the cores the lane leaves, serves every bulk request within priority 2's queue
    timeout."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    stop, lane = threading.Event(), Counter()

    def flood() -> None:
        client = httpclient.InferenceServerClient(triton.http_url)
        try:
            while not stop.is_set():
                text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
                text.set_data_from_numpy(np.array([[fresh("a query in a flood")[0].encode()]],
                                                  dtype=np.object_))
                try:
                    client.infer(LANE, [text])
                    lane["served"] += 1
                except InferenceServerException as err:
                    lane["refused" if "Exceeds maximum queue size" in str(err)
                         else str(err)] += 1
                    stop.wait(0.05)
        finally:
            client.close()

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(24)]
    with reloaded_with(triton, FRONT, {"interactive_queue": "4"}):  # a lane 24 clients fill
        for thread in flooders:
            thread.start()
        flooded(triton, flooders, stop, lane)
    assert set(lane) <= {"served", "refused"}, lane


def flooded(triton: TritonServer, flooders: list[threading.Thread], stop: threading.Event,
            lane: Counter) -> None:
    """While the lane is flooded: it refuses, priority 1 overflows to the front and is
    served, and bulk work completes."""
    try:
        deadline = time.monotonic() + 60
        while not lane["refused"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lane["refused"], f"the lane never refused: {lane}"
        with Client(triton.http_url, retry=NO_RETRY) as client:
            overflow = client.embed(fresh("priority 1 while the lane is full"), priority=1)
            bulk = [client.embed(fresh(*(f"bulk text {i}" for i in range(16))), priority=2)
                    for _ in range(4)]
    finally:
        stop.set()
        for thread in flooders:
            thread.join(timeout=30)
    assert overflow.shape == (1, 384)
    assert [b.shape for b in bulk] == [(16, 384)] * 4  # none refused, none timed out
    assert lane["served"] > 0, lane


def test_the_shared_path_yields_the_cpu_and_the_lane_and_health_do_not(triton) -> None:
    """The reviewed configs, as the suite's launcher starts them (no decision where it
    started, so nice 10, the setting safe on any host: core/cpu_policy.py): in each front's
    one process the bulk workers and the runtime's threads at nice 10 once warmed, the
    stub's own threads, the lane's worker, the reapers and the thread that hands requests
    over at normal; the lanes have no
    process; the health check at normal; `tmr health --json` and the tmr_cpu_scheduling
    metric say what /proc says."""
    from core.process_memory import scheduling, stub_processes
    from server.prometheus import samples

    stubs = stub_processes(triton.process.pid)
    assert FRONT in stubs and not {m for m in stubs if m.endswith("_interactive")}, \
        sorted(stubs)
    for model, pids in stubs.items():
        threads = Counter(scheduling(int(t.name)) for pid in pids
                          for t in Path(f"/proc/{pid}/task").iterdir())
        threads.pop("", None)
        if model == "health" or model not in FRONTS:  # health, an encoder loaded directly
            assert set(threads) <= {"normal", "nice 10"}, (model, threads)
            continue
        # at normal: the stub's own threads (its health beat among them), the thread that
        # hands requests over, the reapers, the lane's worker; the rest yielding
        assert set(threads) == {"normal", "nice 10"}, (model, threads)
        assert threads["nice 10"] >= 2 and threads["normal"] >= 5, (model, threads)
    health = tmr("health", "--json", "--url", triton.http_url)
    rows = json.loads(health.stdout)["memory"]["by_model"]
    assert rows[FRONT]["cpu"] == "nice 10, normal" and LANE not in rows, rows
    assert rows["health"]["cpu"] == "normal", rows
    shown = {s.labels["model"]: s.labels["policy"] for s in samples(triton.metrics_url)
             if s.name == "tmr_cpu_scheduling"}
    assert shown[FRONT] == "nice 10", shown  # the bulk workers' policy

"""Priority end to end with plain tritonclient: a request to a front's interactive lane
overtakes a backlog queued on the front before it (HTTP, gRPC, and the image family), and
a flood of the lane never starves the front's bulk work: the lane refuses what its queue
cannot hold with 503 / UNAVAILABLE "Exceeds maximum queue size", never anything else.

Since one model is one process (docs/serving.md, "One model, one process"), the front's
workers hold the queue and the lane's requests reach its interactive worker through the
lane's name; a raw client's Triton `priority` on the front's own name is not ordered
(the stub cannot see it). Each backlog request is one execution's worth of rows (the
front's preferred batch). The assertions count requests; none times anything."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from core.families.lanes import lane_name
from tests.image_samples import cat
from tests.integration.helpers import assert_serving, reloaded_with

HIGH, LOW = 1, 2
TEXT_ROWS = TEXT_EMBEDDING.serving.front_batching.preferred_batch_size[0]
IMAGE_ROWS = IMAGE_CLASSIFICATION.serving.front_batching.preferred_batch_size[0]


def texts(n: int) -> list[bytes]:
    """Short texts no other request carries (Triton's response cache answers none)."""
    tag = uuid.uuid4().hex
    return [f"priority order {tag} {i}".encode() for i in range(n)]


def images(n: int) -> list[bytes]:
    """Distinct JPEGs of the cat (a different crop each), so no cache answers them."""
    photo, out = cat(), []
    for i in range(n):
        buffer = io.BytesIO()
        photo.crop((i % 40, i // 40, photo.width - 1, photo.height - 1)).save(buffer, "JPEG")
        out.append(buffer.getvalue())
    return out


def client_for(protocol: str, url: str) -> tuple[object, Callable[..., object]]:
    """A tritonclient asyncio client and its InferInput class."""
    if protocol == "http":
        return httpaio.InferenceServerClient(url, conn_limit=256), httpaio.InferInput
    return grpcaio.InferenceServerClient(url), grpcaio.InferInput


async def infer_error(client: object, infer_input: Callable[..., object], model: str,
                      tensor: str, payload: list[bytes], priority: int) -> object:
    """One request of `payload` rows at `priority`: None when served, else its error."""
    data = infer_input(tensor, [len(payload), 1], "BYTES")
    data.set_data_from_numpy(np.array(payload, dtype=np.object_).reshape(-1, 1))
    try:
        await client.infer(model, [data], priority=priority)
        return None
    except InferenceServerException as exc:
        return exc


async def finish_order(protocol: str, url: str, model: str, tensor: str,
                       make_rows: Callable[[int], list[bytes]], rows: int,
                       backlog: int, highs: int) -> tuple[float, list, list]:
    """Queue `backlog` priority-2 requests on `model`, then `highs` on its lane: when the
    highs were sent, and (when each ended, its error or None) for both groups."""
    client, infer_input = client_for(protocol, url)

    async def send(payload: list[bytes], priority: int) -> tuple[float, object]:
        to = lane_name(model) if priority == HIGH else model
        error = await infer_error(client, infer_input, to, tensor, payload, priority)
        return time.monotonic(), error

    try:
        await send(make_rows(1), HIGH)  # connections and the model are warm
        lows = [asyncio.ensure_future(send(make_rows(rows), LOW)) for _ in range(backlog)]
        await asyncio.sleep(0.05)  # every low request is queued or executing
        sent = time.monotonic()
        ups = [asyncio.ensure_future(send(make_rows(1), HIGH)) for _ in range(highs)]
        return sent, list(await asyncio.gather(*lows)), list(await asyncio.gather(*ups))
    finally:
        await client.close()


def assert_overtaken(sent: float, lows: list, highs: list, instances: int) -> None:
    """Most low requests still waiting when the highs were sent end (served, or refused
    at their queue timeout) after the last high one. In arrival order none would: only
    those executing, or dispatched while the highs were on their way, may end before."""
    assert [e for _, e in highs] == [None] * len(highs), highs
    for _, error in lows:  # served later, or refused at the 2 s queue timeout
        assert error is None or (error.status() in ("503", "StatusCode.UNAVAILABLE")
                                 and "Request timeout expired" in error.message()), error
    waiting = [t for t, _ in lows if t > sent]
    assert len(waiting) > 4 * instances, f"only {len(waiting)} low requests were left"
    last_high = max(t for t, _ in highs)
    after = sum(1 for t in waiting if t > last_high)
    assert after >= 0.75 * len(waiting), \
        f"priority 1 waited behind the backlog: {after} of {len(waiting)} ended after it"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_priority_1_overtakes_a_queued_priority_2_backlog(triton, protocol) -> None:
    url = triton.http_url if protocol == "http" else triton.grpc_url
    # the bulk workers take a batch each; the rest wait in the front's queue
    sent, lows, highs = asyncio.run(finish_order(
        protocol, url, "embed", TEXT_EMBEDDING.contract.front_inputs[0].name, texts, TEXT_ROWS,
        backlog=60, highs=4))
    assert_overtaken(sent, lows, highs, instances=3)
    assert_serving(triton.http_url)


def test_priority_1_overtakes_a_priority_2_image_backlog(triton) -> None:
    # the bulk workers take a batch each; the rest wait in the front's queue
    sent, lows, highs = asyncio.run(finish_order(
        "grpc", triton.grpc_url, "efficientnet_lite0",
        IMAGE_CLASSIFICATION.contract.front_inputs[0].name, images, IMAGE_ROWS, backlog=20,
        highs=2))
    assert_overtaken(sent, lows, highs, instances=2)
    assert_serving(triton.http_url)


async def flood_the_lane(url: str, seconds: float, clients: int,
                         lows: int) -> tuple[list, list]:
    """`clients` raw clients of the lane back to back for `seconds`; meanwhile `lows`
    requests to the front one after another. (the lane's errors, the lows' outcomes)"""
    client, infer_input = client_for("http", url)
    tensor = TEXT_EMBEDDING.contract.front_inputs[0].name
    deadline = time.monotonic() + seconds
    high_errors: list = []

    async def high() -> None:
        while time.monotonic() < deadline:
            error = await infer_error(client, infer_input, lane_name("embed"), tensor,
                                      texts(1), HIGH)
            if error is not None:
                high_errors.append(error)
                await asyncio.sleep(0.05)  # as Retry-After asks

    async def low_stream() -> list:
        await asyncio.sleep(0.5)  # the lane's queue is full from here on
        return [await infer_error(client, infer_input, "embed", tensor, texts(TEXT_ROWS), LOW)
                for _ in range(lows)]

    try:
        results = await asyncio.gather(low_stream(), *(high() for _ in range(clients)))
        return high_errors, results[0]
    finally:
        await client.close()


def test_a_flooded_lane_refuses_its_overflow_and_never_starves_the_front(triton) -> None:
    """The starvation bound (docs/serving.md): the lane has one worker on one thread, so
    a flood of it leaves the bulk workers the other cores; what its queue cannot hold is
    refused at once with 503 and Triton's full-queue wording, never another error, and
    every request ends."""
    with reloaded_with(triton, "embed", {"interactive_queue": "8"}):  # 64 clients fill it
        high_errors, lows = asyncio.run(flood_the_lane(
            triton.http_url, seconds=8.0, clients=64, lows=4))
    assert lows == [None] * 4  # the front's work is served under the flood
    assert high_errors, "the lane never refused: its queue held 64 clients"
    for error in high_errors:
        assert error.status() == "503", error
        assert "Exceeds maximum queue size" in error.message(), error
    assert_serving(triton.http_url)


def test_the_watchdog_probes_a_front_and_its_lane_and_exports_both(triton) -> None:
    """The per-class view: the front probed at its default level, its lane (an ensemble
    into the front's interactive worker) at priority 1."""
    from server.watchdog import Watchdog

    lane = lane_name("embed")
    watchdog = Watchdog(triton.http_url, triton.metrics_url, ["embed", lane], interval_s=0.5)
    classes = {"embed": "0", lane: "1"}

    def served(model: str, name: str = "tmr_priority_probes_total") -> float:
        labels = {"model": model, "priority": classes[model]}
        if name == "tmr_priority_probes_total":
            labels["outcome"] = "served"
        return watchdog.registry.get_sample_value(name, labels) or 0.0

    watchdog.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(served(m) for m in classes):
            time.sleep(0.2)
    finally:
        watchdog.stop()
        watchdog.join(timeout=30)
    assert watchdog.events == []  # a healthy model is never reloaded
    for model in classes:
        assert served(model) >= 1
        assert served(model, "tmr_priority_probe_latency_seconds_count") == served(model)
    assert_serving(triton.http_url)

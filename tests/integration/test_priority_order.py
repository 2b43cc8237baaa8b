"""Priority end to end with plain tritonclient, Triton's standard `priority` only: a
priority-1 request overtakes a priority-2 backlog queued before it (HTTP, gRPC, and the
image family), and under sustained priority-1 saturation priority 2 is refused with 503 /
UNAVAILABLE after at most its queue's timeout, never with anything else.

Each backlog request is one execution's worth of rows (the front's preferred batch), so
the order in which requests finish is the order Triton's priority queue dispatched them.
The assertions count requests; none times anything."""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from core.families import IMAGE_CLASSIFICATION, TEXT_EMBEDDING
from tests.image_samples import cat
from tests.integration.helpers import assert_serving

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
    """Queue `backlog` priority-2 requests, then `highs` priority-1 ones: when the highs
    were sent, and (when each ended, its error or None) for both groups."""
    client, infer_input = client_for(protocol, url)

    async def send(payload: list[bytes], priority: int) -> tuple[float, object]:
        error = await infer_error(client, infer_input, model, tensor, payload, priority)
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
    # 3 instances take 3 executions of TEXT_ROWS rows; the rest wait in the queue
    sent, lows, highs = asyncio.run(finish_order(
        protocol, url, "embed", TEXT_EMBEDDING.contract.front_inputs[0].name, texts, TEXT_ROWS,
        backlog=60, highs=4))
    assert_overtaken(sent, lows, highs, instances=3)
    assert_serving(triton.http_url)


def test_priority_1_overtakes_a_priority_2_image_backlog(triton) -> None:
    # 2 instances take 2 executions of IMAGE_ROWS images; the rest wait
    sent, lows, highs = asyncio.run(finish_order(
        "grpc", triton.grpc_url, "efficientnet_lite0",
        IMAGE_CLASSIFICATION.contract.front_inputs[0].name, images, IMAGE_ROWS, backlog=20,
        highs=2))
    assert_overtaken(sent, lows, highs, instances=2)
    assert_serving(triton.http_url)


async def saturate_with_priority_1(url: str, seconds: float, clients: int,
                                   lows: int) -> tuple[list, list]:
    """`clients` priority-1 clients back to back for `seconds`; meanwhile `lows`
    priority-2 requests one after another. (high errors, low outcomes)."""
    client, infer_input = client_for("http", url)
    tensor = TEXT_EMBEDDING.contract.front_inputs[0].name
    deadline = time.monotonic() + seconds
    high_errors: list = []

    def call(priority: int) -> Awaitable[object]:
        return infer_error(client, infer_input, "embed", tensor, texts(1), priority)

    async def high() -> None:
        while time.monotonic() < deadline:
            if (error := await call(HIGH)) is not None:
                high_errors.append(error)

    async def low_stream() -> list:
        await asyncio.sleep(0.5)  # the priority-1 queue is never empty from here on
        return [await call(LOW) for _ in range(lows)]

    try:
        results = await asyncio.gather(low_stream(), *(high() for _ in range(clients)))
        return high_errors, results[0]
    finally:
        await client.close()


def test_priority_2_under_priority_1_saturation_is_refused_with_503_not_left_waiting(
        triton) -> None:
    """The starvation rule (docs/serving.md): priority 2 is served, or refused with 503
    once its queue timeout passes (or at once when its queue is full); never another
    error, and every request ends."""
    high_errors, lows = asyncio.run(saturate_with_priority_1(
        triton.http_url, seconds=8.0, clients=64, lows=2))
    assert high_errors == []
    refused = [e for e in lows if e is not None]
    for error in refused:
        assert error.status() == "503", error
        assert any(m in error.message() for m in ("Request timeout expired",
                                                   "Exceeds maximum queue size")), error
    assert refused, "priority 2 was served although priority 1 kept the queue full"
    assert_serving(triton.http_url)



def test_the_watchdog_probes_a_front_at_each_priority_and_exports_both(triton) -> None:
    from server.watchdog import Watchdog

    watchdog = Watchdog(triton.http_url, triton.metrics_url, ["embed"], interval_s=0.5)

    def served(priority: str, name: str = "tmr_priority_probes_total") -> float:
        labels = {"model": "embed", "priority": priority}
        if name == "tmr_priority_probes_total":
            labels["outcome"] = "served"
        return watchdog.registry.get_sample_value(name, labels) or 0.0

    watchdog.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (served("1") and served("2")):
            time.sleep(0.2)
    finally:
        watchdog.stop()
        watchdog.join(timeout=30)
    assert watchdog.events == []  # a healthy model is never reloaded
    for priority in ("1", "2"):
        assert served(priority) >= 1
        assert served(priority, "tmr_priority_probe_latency_seconds_count") == served(priority)
    assert_serving(triton.http_url)

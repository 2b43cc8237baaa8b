"""BaseModel's one error path on a real server: whatever a model does wrong, every request
gets exactly one answer, an error naming what happened, and the model keeps serving. The
SDK's typed errors from the server's side (a server error, a full queue's refusal, an
unavailable model) leave its client usable (issue 56; the others: test_sdk_errors.py)."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tmr_client import NO_RETRY, AsyncClient, Client, QueueFullError, ServerError
from tmr_client import UnavailableError as SdkUnavailableError

from server.launcher import TritonServer
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import http_post

CONFIG = """name: "faulty"
backend: "python"
max_batch_size: 8
input [ { name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "REPORT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
# The stub imports the project's packages (python_backends), not the tests: the fixture
# model's source becomes the model.py itself.
SOURCE = (Path(__file__).parent / "faulty_model.py").read_text()
MODEL_PY = SOURCE + "\n\nTritonPythonModel = FaultyModel\n"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("error_path")
    (root / "repository" / "faulty" / "1").mkdir(parents=True)
    (root / "repository" / "faulty" / "config.pbtxt").write_text(CONFIG)
    (root / "repository" / "faulty" / "1" / "model.py").write_text(MODEL_PY)
    server = start_server(root / "repository", root / "tritonserver.log")
    yield server
    stop_cleanly(server)


def ask(server: TritonServer, query: str) -> tuple[int, dict]:
    body = json.dumps({"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1, 1],
                                   "data": [query]}]}).encode()
    status, answer = http_post(server.http_url, "/v2/models/faulty/infer", body)
    return status, json.loads(answer)


@pytest.mark.parametrize(("query", "message"), [
    ("raise", "faulty failed: RuntimeError: boom, on purpose"),
    ("none", "faulty produced no response for this request"),
    ("nothing", "faulty produced no response for this request"),
])
def test_a_failing_model_answers_each_request_with_its_error_and_keeps_serving(
        faulty, query, message) -> None:
    status, answer = ask(faulty, query)
    assert status == 500 and answer["error"] == message, answer
    status, answer = ask(faulty, "ok")
    assert status == 200 and answer["outputs"][0]["data"] == ["ok"]


# the query that provokes it -> the SDK's typed error (QueueFullError is an UnavailableError)
SERVER_SIDE = {"raise": ServerError, "full": QueueFullError, "unavailable": SdkUnavailableError}
KEPT: list[BaseException] = []  # errors a caller keeps, with their tracebacks


def rows(query: str) -> np.ndarray:
    return np.array([[query.encode()]], dtype=np.object_)


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "dropped"])
@pytest.mark.parametrize("query", list(SERVER_SIDE))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sdk_serves_after_each_server_side_error(faulty, protocol, query, kept) -> None:
    """Sync and asyncio, three errors in a row (as a caller that retries meets them), kept
    or dropped: the next call on the same client object answers."""
    url = f"{protocol}://{faulty.http_url if protocol == 'http' else faulty.grpc_url}"
    error, ok = SERVER_SIDE[query], {"model": "faulty"}
    with Client(url, model="faulty", retry=NO_RETRY) as client:
        for _ in range(3):
            with pytest.raises(error, match=r"on purpose|boom") as caught:
                client.infer(rows(query), "QUERY", ["REPORT"], **ok)
            assert type(caught.value) is error, caught.value  # the precise class
            if kept:
                KEPT.append(caught.value)
        del caught
        gc.collect()
        assert client.infer(rows("ok"), "QUERY", ["REPORT"], **ok).outputs["REPORT"] \
            .reshape(-1)[0] == b"ok"

    async def run() -> None:
        async with AsyncClient(url, model="faulty", retry=NO_RETRY) as client:
            for _ in range(3):
                try:
                    await client.infer(rows(query), "QUERY", ["REPORT"], **ok)
                except error as err:
                    assert type(err) is error, err
                    if kept:
                        KEPT.append(err)
                else:
                    pytest.fail(f"{query}: no {error.__name__}")
            gc.collect()
            answer = await client.infer(rows("ok"), "QUERY", ["REPORT"], **ok)
            assert answer.outputs["REPORT"].reshape(-1)[0] == b"ok"

    asyncio.run(run())
    KEPT.clear()

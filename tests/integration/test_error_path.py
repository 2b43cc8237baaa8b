"""BaseModel's one error path on a real server: whatever a model does wrong, every request
gets exactly one answer, an error naming what happened, and the model keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.launcher import TritonServer
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import http_post

CONFIG = """name: "faulty"
backend: "python"
max_batch_size: 0
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
    body = json.dumps({"inputs": [{"name": "QUERY", "datatype": "BYTES", "shape": [1],
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

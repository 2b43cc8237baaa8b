"""A front served by worker threads (python_backends/workers.py): one stub process, one copy
of the primary in it, answers sent after `execute` returns, through the real server.

The server here serves `embed` as a host profile with workers writes it (one instance,
`worker_threads` 2, the primary in process), beside its encoders only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from core.config_edit import edit_file, set_parameter
from core.model_config import mc
from core.process_memory import stub_processes
from server.launcher import TritonServer
from tests.conftest import start_server, stop_cleanly
from tests.integration.helpers import embed_texts, fresh, repository_of

WORKERS = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("workers")
    repo = repository_of(root, "embed", "minilm_onnx", "minilm_int8")
    def one_process_with_workers(config: mc.ModelConfig) -> None:
        del config.instance_group[:]
        config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
        set_parameter("worker_threads", str(WORKERS), add=True)(config)
        set_parameter("primary_in_process", "true", add=True)(config)

    edit_file(repo / "embed" / "config.pbtxt", one_process_with_workers)
    server = start_server(repo, root / "tritonserver.log")
    yield server
    if server.process is not None and server.process.poll() is None:
        stop_cleanly(server)


@pytest.mark.timeout(180)
def test_one_process_serves_concurrent_requests_each_answered_as_alone(
        served: TritonServer) -> None:
    texts = fresh(*(f"worker text number {i} about {'x ' * (i % 9)}" for i in range(48)))
    alone = {t: embed_texts(served.http_url, [t])[0] for t in texts[:8]}
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda t: embed_texts(served.http_url, [t])[0], texts))
    for text, vector in zip(texts, answers):
        assert vector.shape == (384,)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4
        if text in alone:
            assert float(np.dot(alone[text], vector)) > 0.99999
    stubs = stub_processes(served.process.pid)
    assert len(stubs.get("embed", [])) == 1, stubs  # one process, one copy of the weights
    assert "in-process minilm_onnx v1 loaded" in served.log_text()  # the one copy


@pytest.mark.timeout(120)
def test_bad_input_through_a_worker_gets_its_400_and_the_pool_keeps_serving(
        served: TritonServer) -> None:
    with httpclient.InferenceServerClient(served.http_url) as client:
        data = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        data.set_data_from_numpy(np.array([[b"\xff\xfe not utf-8"]], dtype=np.object_))
        with pytest.raises(InferenceServerException) as err:
            client.infer("embed", [data])
        assert err.value.status() == "400"
        assert "UTF-8" in err.value.message()
    assert embed_texts(served.http_url, fresh("after the bad one")).shape == (1, 384)


@pytest.mark.timeout(180)
def test_a_stop_answers_every_request_in_flight(served: TritonServer) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()
    started = threading.Barrier(9)

    def call(i: int) -> None:
        started.wait()
        try:
            embed_texts(served.http_url, fresh(*(f"stop {i} {j}" for j in range(32))))
            result = "ok"
        except InferenceServerException as err:
            result = f"error {err.status()}"
        except Exception as err:  # the connection closed by the stopping server
            result = f"closed {type(err).__name__}"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    started.wait()
    stop_cleanly(served)  # exits 0 within its timeout: nothing left waiting for a worker
    for t in threads:
        t.join(60)
    assert len(outcomes) == 8  # every client heard back, none waited out its timeout
    assert not any(t.is_alive() for t in threads)
    assert "embed/1: workers stopped" in served.log_text()  # the pool's own stop ran


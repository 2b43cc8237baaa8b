"""Small helpers shared by the integration tests: statistics, metrics, health."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient
from tmr_client import NO_RETRY, AsyncClient
from tmr_client.auth import key_headers

from core import versions
from core.paths import PROJECT_ROOT
from core.versions import sha256_file
from server.prometheus import metric_value
from server.settings import admin_key

__all__ = ["metric_value"]


@dataclass(frozen=True)
class ModelCounts:
    """Cumulative counts from Triton's statistics extension for one model."""

    inference_count: int
    execution_count: int
    success_count: int


def model_counts(http_url: str, model: str) -> ModelCounts:
    """Totals over every version of `model` from GET /v2/models/<m>/stats (restricted)."""
    request = urllib.request.Request(f"http://{http_url}/v2/models/{model}/stats",
                                     headers=key_headers(admin=True, admin_key=admin_key()))
    with urllib.request.urlopen(request, timeout=10) as r:
        stats = json.loads(r.read())["model_stats"]
    return ModelCounts(
        inference_count=sum(int(s["inference_count"]) for s in stats),
        execution_count=sum(int(s["execution_count"]) for s in stats),
        success_count=sum(int(s["inference_stats"]["success"]["count"]) for s in stats),
    )


def settled_counts(http_url: str, model: str, inferences: int,
                   timeout_s: float = 10.0) -> ModelCounts:
    """`model_counts` once they show at least `inferences` inferences (Triton counts an
    execution just after it answers, so a read right after the answers can miss it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = model_counts(http_url, model)
        if counts.inference_count >= inferences or time.monotonic() > deadline:
            return counts
        time.sleep(0.1)


def quiet_counts(http_url: str, model: str, quiet_s: float = 0.5,
                 timeout_s: float = 10.0) -> ModelCounts:
    """`model_counts` once they stay the same for `quiet_s`: the baseline of a test that
    counts a shared model's requests. Triton counts a request just after its answer, so a
    read at once can miss an earlier test's last requests (a CI run counted 50 for 48: the
    2 texts test_bad_input sends last)."""
    deadline = time.monotonic() + timeout_s
    counts = model_counts(http_url, model)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = model_counts(http_url, model)
        if now == counts:
            return now
        counts = now
    raise AssertionError(f"{model}'s counts kept changing for {timeout_s:.0f} s: another "
                         f"caller is using it ({counts})")


def http_post(http_url: str, path: str, body: bytes | None,
              headers: dict[str, str] | None = None,
              method: str | None = None) -> tuple[int, bytes]:
    """POST raw bytes (or `method`; GET without a body) and return (status, body),
    including error statuses."""
    request = urllib.request.Request(f"http://{http_url}{path}", data=body, headers=headers or {},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def vm_rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def fresh(*texts: str) -> list[str]:
    """Texts made unique, so Triton's response cache cannot answer them."""
    tag = uuid.uuid4().hex[:8]
    return [f"{t} [{tag}]" for t in texts]


def assert_serving(http_url: str) -> None:
    """The server is ready AND a real embed call succeeds (readiness alone can lie)."""
    with urllib.request.urlopen(f"http://{http_url}/v2/health/ready", timeout=10) as r:
        assert r.status == 200
    body = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                   "data": fresh("the server is still healthy")}]}).encode()
    status, answer = http_post(http_url, "/v2/models/embed/infer", body)
    assert status == 200, answer
    assert json.loads(answer)["outputs"][0]["shape"] == [1, 384]


class LoadGate:
    """Holds a load's workers between requests, so that nothing is in flight (see
    test_stub_failure: a stub SIGKILLed while it holds the IPC mutex aborts Triton 2.51)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.in_flight = 0

    async def hold(self) -> None:
        """Stop new requests and wait until the ones in flight are answered."""
        self.open.clear()
        while self.in_flight:
            await asyncio.sleep(0.005)

    def release(self) -> None:
        self.open.set()


async def steady_high_priority_load(url: str, seconds: float, gate: LoadGate | None = None,
                                    priority: int = 1) -> tuple[list, list]:
    """Four workers sending requests (by default high-priority ones, which the SDK sends to
    the interactive lane) back to back; (served_by, errors)."""
    served, errors = [], []
    deadline = time.monotonic() + seconds
    gate = gate or LoadGate()

    async def worker(client: AsyncClient, n: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            await gate.open.wait()
            gate.in_flight += 1
            try:
                result = await client.embed_with_info([f"worker {n} request {i}"],
                                                      priority=priority)
                served.extend(result.served_by)
            except Exception as err:  # every failure counts, whatever its type
                errors.append(err)
            finally:
                gate.in_flight -= 1

    async with AsyncClient(url, protocol="grpc", retry=NO_RETRY) as client:
        await asyncio.gather(*(worker(client, n) for n in range(4)))
    return served, errors


def reset_router(http_url: str) -> None:
    """Reload embed (a fresh ladder at level 0) after a test that overloads it, so the
    session server's later tests start from normal service."""
    from server.admin import AUTO, force_level_explicit, wait_for_level

    force_level_explicit(http_url, AUTO)
    wait_for_level(http_url, AUTO, timeout_s=60, consecutive=3)


def repository_of(root: Path, *models: str) -> Path:
    """A copy of the test repository under `root` holding only `models` (artifacts linked
    by core.repository.copy_repository), for a test's own small server."""
    from core.repository import copy_repository
    from tests.conftest import REPOSITORY

    repo = copy_repository([REPOSITORY], root / "repository")
    for model in repo.iterdir():
        if model.name not in models:
            shutil.rmtree(model)
    return repo


def add_version(model_dir: Path, version: int, artifact: Path | bytes) -> Path:
    """A new version folder with its own provenance (a copy or a given artifact)."""
    target = model_dir / str(version)
    target.mkdir()
    if isinstance(artifact, bytes):
        (target / "model.onnx").write_bytes(artifact)
    else:
        shutil.copy(artifact, target / "model.onnx")
    provenance = versions.read_provenance(model_dir / "1")
    provenance["version"] = version
    provenance["artifact"] = {**provenance["artifact"],
                              "sha256": sha256_file(target / "model.onnx")}
    (target / "provenance.json").write_text(json.dumps(provenance))
    return target


def noisy_copy(source: Path, scale: float) -> bytes:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source))
    rng = np.random.default_rng(0)
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.size > 1000:
            noisy = array + rng.normal(0, scale * float(array.std()), array.shape)
            init.CopyFrom(numpy_helper.from_array(noisy.astype(np.float32), init.name))
    return model.SerializeToString()


def tmr(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """`tmr ARGS` in the project, its output captured."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)


def concurrent_encoder_calls(grpc_url: str, model: str, ids: np.ndarray, n: int) -> None:
    """`n` concurrent gRPC requests of the same token ids (mask all ones) to a text encoder."""
    import tritonclient.grpc.aio as grpcaio

    async def run() -> None:
        client = grpcaio.InferenceServerClient(grpc_url)
        inputs = []
        for name in ("input_ids", "attention_mask"):
            tensor = grpcaio.InferInput(name, list(ids.shape), "INT64")
            tensor.set_data_from_numpy(ids if name == "input_ids" else np.ones_like(ids))
            inputs.append(tensor)
        await asyncio.gather(*(client.infer(model, inputs) for _ in range(n)))
        await client.close()

    asyncio.run(run())


def slow_copy(source: Path, factor: int) -> bytes:
    """The ONNX graph run `factor` times side by side and averaged: the same outputs (to
    rounding), about `factor` times the work (a candidate that is only slower)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    output = graph.output[0].name
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in graph.node]
    produced = {name for node in nodes for name in node.output}
    branches = []
    del graph.node[:]
    for k in range(factor):
        prefix = f"branch{k}_"
        for node in nodes:
            copy = graph.node.add()
            copy.CopyFrom(node)
            copy.name = prefix + node.name
            copy.input[:] = [prefix + i if i in produced else i for i in node.input]
            copy.output[:] = [prefix + o for o in node.output]
        branches.append(prefix + output)
    graph.initializer.append(numpy_helper.from_array(np.array(1.0 / factor, np.float32),
                                                     "branch_scale"))
    graph.node.extend([helper.make_node("Sum", branches, ["branch_sum"]),
                       helper.make_node("Mul", ["branch_sum", "branch_scale"], [output])])
    return model.SerializeToString()


@contextmanager
def reloaded_with(server, model: str, parameters: dict[str, str]) -> Iterator[None]:
    """`model` reloaded in `server` (a TritonServer) with config parameters overridden,
    in the server only; then its on-disk config sent again (a bare load of a model whose
    files did not change is a no-op on 2.51 and would keep the override)."""
    from server.admin_client import AdminClient

    with AdminClient(server.http_url) as admin:
        admin.reload(model, parameters)
    try:
        yield
    finally:
        with AdminClient(server.http_url) as admin:
            admin.load(model, versions.read_config(server.opts.repository / model))


def embed_texts(url: str, texts: list[str], model: str = "embed") -> np.ndarray:
    """Raw KServe over HTTP: the EMBEDDING of `texts` from `model`."""
    with httpclient.InferenceServerClient(url, network_timeout=60) as client:
        data = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
        data.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=np.object_))
        return client.infer(model, [data]).as_numpy("EMBEDDING")


def grown(metrics_url: str, name: str, before: float, at_least: float,
          timeout_s: float = 10.0, **labels: str) -> float:
    """How much a counter grew since `before`, once it grew by `at_least` or after
    `timeout_s` (a stub's counters reach /metrics with its batch's flush)."""
    deadline = time.monotonic() + timeout_s
    while (growth := metric_value(metrics_url, name, **labels) - before) < at_least \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return growth

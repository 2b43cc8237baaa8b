"""A server that always stops cleanly (docs/reliability.md, section 11): 20 times in a row,
a server that has served every path stops within 10 s with exit 0.

Every path, each time: the rollout split and its shadow (a rollout held at canary 50% with
50% shadowed, as a dead controller leaves it), a long text in chunks, the OpenAI route
through the front door, priority 1 through the lane, a forced degradation level and back,
and a reload through the load API. The front door closes before each stop, as a drain
does: nginx's kept-alive upstream connections would hold Triton's stop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmr_client import Client

from core.paths import PROJECT_ROOT
from server import rollout as ctl
from server.admin import force_level_explicit
from server.admin_client import AdminClient
from server.launcher import TritonServer
from server.settings import ServerOptions
from tests.conftest import free_ports
from tests.integration.helpers import add_version, fresh, http_post, repository_of
from tests.integration.test_front_door import open_front_door

STOPS = 20
STOP_LIMIT_S = 10.0
ENCODER = "minilm_onnx"
MODELS = ("embed", "embed_interactive", ENCODER, "minilm_int8")
LONG_TEXT = " ".join(f"sentence {i} of a long document about rivers." for i in range(120))

pytestmark = pytest.mark.timeout(STOPS * 60)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The text family with a rollout of v2 held at canary 50% (50% shadowed) on disk."""
    root = tmp_path_factory.mktemp("clean-stops")
    repo = repository_of(root, *MODELS)
    model_dir = repo / ENCODER
    add_version(model_dir, 2, (model_dir / "1" / "model.onnx").resolve())
    server = TritonServer(ServerOptions(repository=repo, ports=free_ports()),
                          log_path=root / "rollout-start.log")
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        controller = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "rollout", ENCODER, "2", "--steps", "canary:50",
             "--canary-shadow-fraction", "0.5", "--min-seconds", "100000",
             "--step-timeout-s", "100000",
             "--url", server.http_url, "--metrics-url", server.metrics_url,
             "--repository", str(repo)], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not ctl.read_log(model_dir) or ctl.read_log(model_dir)[-1]["event"] != "start" \
                or not ready_both(server):
            assert time.monotonic() < deadline and controller.poll() is None, \
                "the rollout did not start"
            time.sleep(0.5)
        controller.send_signal(signal.SIGKILL)  # the state stays on disk: the step holds
        controller.wait(10)
    finally:
        server.stop()
    assert ctl.read_state(model_dir).current.canary == 0.5
    yield repo


def ready_both(server: TritonServer) -> bool:
    with AdminClient(server.http_url) as admin:
        return {n for n, (s, _) in ctl.states_of(admin, ENCODER).items() if s == "READY"} \
            == {1, 2}


def serve_every_path(server: TritonServer) -> None:
    """One call of each path; each must answer."""
    with Client(server.grpc_url, protocol="grpc") as client:
        served = client.embed_with_info(fresh(*(f"split row {i}" for i in range(16))))
        assert {str(s.version) for s in served.served} == {"1", "2"}  # the canary split
        assert client.embed([LONG_TEXT], truncate="chunk").shape == (1, 384)
        assert client.embed(fresh("interactive"), priority=1).shape == (1, 384)
    door = open_front_door(server)
    try:
        key = door.api_keys["alice"]
        status, answer = http_post(door.http_url, "/v1/embeddings", json.dumps(
            {"model": "minilm", "input": fresh("the OpenAI route")}).encode(),
            {"Authorization": f"Bearer {key}"})
        assert status == 200, answer
    finally:
        assert door.close() == 0
    force_level_explicit(server.http_url, 2)
    with Client(server.http_url) as client:
        assert client.embed(fresh("at a forced level")).shape == (1, 384)
    force_level_explicit(server.http_url, -1)
    with AdminClient(server.http_url) as admin:
        admin.reload(ENCODER, {})


def test_a_server_that_served_every_path_stops_cleanly_20_times_in_a_row(
        repository: Path, tmp_path: Path) -> None:
    ports, stops = free_ports(), []
    for n in range(STOPS):
        server = TritonServer(ServerOptions(repository=repository, ports=ports),
                              log_path=tmp_path / f"tritonserver-{n}.log")
        server.start()
        try:
            server.wait_ready(timeout_s=240)
            serve_every_path(server)
        finally:
            began = time.monotonic()
            code = server.stop()
            stops.append((code, time.monotonic() - began, server.stop_report))
        assert code == 0 and stops[-1][1] < STOP_LIMIT_S, \
            f"stop {n + 1}: exit {code} after {stops[-1][1]:.1f} s; {server.stop_report}; " \
            f"see {server.log_path}"
    print(f"\n{STOPS} stops: exit codes {sorted({c for c, _, _ in stops})}, seconds "
          f"{[round(s, 1) for _, s, _ in stops]}")

"""The launcher and `tmr serve`: clear failures, a working main job, a clean stop."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from server.launcher import ModelLoadError, PortInUseError, TritonServer
from server.settings import Ports, ServerOptions
from tests.conftest import REPOSITORY, free_ports
from tests.integration.helpers import assert_serving, metric_value, tmr


def test_port_in_use_is_refused_before_start_naming_the_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        ports = free_ports()
        server = TritonServer(ServerOptions(repository=REPOSITORY,
                                            ports=Ports(port, ports.grpc, ports.metrics)),
                              log_path=tmp_path / "triton.log")
        with pytest.raises(PortInUseError, match=f"http port {port} already in use"):
            server.start()
        assert server.process is None


def test_model_that_fails_to_load_is_named_with_tritons_reason(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "minilm_onnx" / "1").mkdir(parents=True)
    shutil.copy(DEFAULT_REPOSITORY / "minilm_onnx" / "config.pbtxt", repo / "minilm_onnx")
    (repo / "minilm_onnx" / "1" / "model.onnx").write_bytes(b"this is not an onnx graph")
    server = TritonServer(ServerOptions(repository=repo, ports=free_ports()),
                          log_path=tmp_path / "triton.log")
    with pytest.raises(ModelLoadError, match=r"model 'minilm_onnx': .*(Protobuf|protobuf|parse)"):
        server.start()
        server.wait_ready(timeout_s=120)
    assert server.process is not None and server.process.poll() is not None


TEXT_FAMILY_CEILING_MIB = 900  # docs/serving.md: the text family alone


def test_tmr_serve_answers_an_embed_call_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`tmr serve --models text_embedding --bulk-cpu nice`: the text family alone (its
    front, lane, BLS encoder and health), its example call, its memory line, within its
    ceiling; the bulk CPU line beside the profile's, and the policy on every stub as
    `tmr health --json` reads it from /proc."""
    ports = free_ports()
    cmd = [sys.executable, "-m", "cli.main", "serve", "--repository", str(REPOSITORY),
           "--http-port", str(ports.http), "--grpc-port", str(ports.grpc),
           "--metrics-port", str(ports.metrics), "--models", "text_embedding",
           "--bulk-cpu", "nice"]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    lines: list[str] = []
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("memory: "):
                break
        assert any(line.startswith("embed answered: dim=384 norm=1.0000") for line in lines), lines
        # which configs serve and why: the host profile `make setup` tuned, or the reviewed
        assert lines[0].startswith(("serving the host profile", "serving the reviewed")), lines
        bulk = next(i for i, line in enumerate(lines) if line.startswith("bulk work yields"))
        assert lines[bulk].startswith("bulk work yields the CPU: nice 10 (--bulk-cpu, for "), lines
        assert lines[bulk + 1].startswith("Triton 2.51.0 is serving"), lines  # the profile's next
        assert any(f"gRPC        localhost:{ports.grpc}" in line for line in lines)
        # the start rule (core.startup): no front routes to TorchScript, so it waits
        assert any(line.startswith("  on demand   ") and "minilm_torchscript" in line
                   for line in lines), lines
        (models,) = [line for line in lines if line.startswith("  models      ")]
        assert "ready: embed, embed_interactive, health" in models, models
        assert "digits" not in models and "efficientnet" not in models, models
        assert not any(line.startswith(("digits answered", "efficientnet_lite0 answered"))
                       for line in lines), lines
        memory = lines[-1]
        rss = float(memory.split("memory: ", 1)[1].split(" MiB RSS", 1)[0].replace(",", ""))
        assert 100 < rss <= TEXT_FAMILY_CEILING_MIB, memory
        # one model, one process: embed (its lane inside it), health, tritonserver
        assert " in 3 processes: " in memory, memory
        health = tmr("health", "--json", "--url", f"localhost:{ports.http}")
        cpu = {name: row.get("cpu") for name, row in
               json.loads(health.stdout)["memory"]["by_model"].items()}
        normal = {"health", "tritonserver"}  # the check, the server
        assert {k: v for k, v in cpu.items() if k in normal} == dict.fromkeys(normal, "normal")
        # the front's bulk workers yield, its lane's worker does not
        assert {v for k, v in cpu.items() if k not in normal} == {"nice 10, normal"}, cpu
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "tritonserver exited with code 0" in rest


def test_tmr_embed_prints_norm_and_first_values(triton) -> None:
    for protocol, url in (("http", triton.http_url), ("grpc", triton.grpc_url)):
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "embed", "--protocol", protocol, "--url", url,
             "a sentence to embed"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=60, check=True).stdout
        assert f"embed v1 over {protocol}" in out
        assert "norm=1.0000 dim=384" in out


def test_tmr_embed_reports_typed_error_and_exit_code(triton) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "embed", "--url", triton.http_url, " "],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "InvalidInputError" in proc.stderr and "TEXT[0] is empty" in proc.stderr


def ports_in_time_wait(ports: Ports) -> set[int]:
    """Which of the server's ports hold a connection in TIME_WAIT (/proc/net/tcp state 06)."""
    waiting = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            port = int(local.rsplit(":", 1)[1], 16)
            if state == "06" and port in ports.as_dict().values():
                waiting.add(port)
    return waiting


def test_restart_at_once_on_the_same_ports_after_a_stop_under_traffic(tmp_path: Path) -> None:
    opts = ServerOptions(repository=REPOSITORY, ports=free_ports())
    with TritonServer(opts, log_path=tmp_path / "first.log") as first:
        for _ in range(5):  # urllib closes nothing itself: the server closes, its side waits
            assert_serving(first.http_url)
            assert metric_value(first.metrics_url, "nv_inference_count", model="embed") > 0
    assert ports_in_time_wait(opts.ports), "the stopped server left no TIME_WAIT to restart over"
    with TritonServer(opts, log_path=tmp_path / "second.log") as second:
        assert_serving(second.http_url)

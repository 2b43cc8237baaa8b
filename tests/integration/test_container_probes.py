"""The container probes against a real server: the deep healthcheck and `tmr watchdog`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core.families.catalog import catalog
from core.ports import free_port
from server.healthcheck import check
from server.launcher import TritonServer
from tests.conftest import REPOSITORY


@pytest.mark.timeout(60)
def test_healthcheck_passes_when_every_model_answers(triton: TritonServer) -> None:
    proc = subprocess.run([sys.executable, "server/healthcheck.py", "--url", triton.http_url],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    every = sorted(name for model in catalog(REPOSITORY) for name in model.models)
    assert proc.stdout == f"healthy: {', '.join(every)}\n"


@pytest.mark.timeout(60)
def test_healthcheck_fails_while_draining(triton: TritonServer, tmp_path: Path) -> None:
    drain = tmp_path / "draining"
    drain.touch()
    ok, reason = check(triton.http_url, drain_file=drain)
    assert not ok and reason.startswith("draining")


@pytest.mark.timeout(30)
def test_healthcheck_fails_when_nothing_listens(tmp_path: Path) -> None:
    ok, reason = check(f"localhost:{free_port()}", timeout_s=2, drain_file=tmp_path / "none")
    assert not ok and reason.startswith("unreachable:")


def metrics_text(port: int, deadline_s: float = 30.0) -> str:
    """The watchdog's /metrics once it answers (it binds its port at start)."""
    began = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"http://localhost:{port}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() - began > deadline_s:
                raise
            time.sleep(0.2)


@pytest.mark.timeout(90)
def test_watchdog_command_serves_its_metrics_and_stops_on_sigterm(triton: TritonServer) -> None:
    port = free_port()
    tmr = Path(sys.executable).parent / "tmr"
    proc = subprocess.Popen(
        [str(tmr), "watchdog", "--url", triton.http_url, "--metrics-url", triton.metrics_url,
         "--port", str(port), "--interval-s", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = metrics_text(port)
        assert "# TYPE tmr_watchdog_reloads_total counter" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert f"probing every family model on {triton.http_url}" in out
    assert "watchdog reloads" not in out  # a healthy server needs no reload

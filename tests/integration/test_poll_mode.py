"""Poll mode: forcing a degradation level is an edit of config.pbtxt, picked up by Triton."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.paths import PROJECT_ROOT
from core.repository import copy_repository
from server.launcher import TritonServer
from tests.conftest import REPOSITORY, start_server, stop_cleanly


@pytest.fixture(scope="module")
def polled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, str]]:
    root = tmp_path_factory.mktemp("poll")
    repo = copy_repository([REPOSITORY], root / "repository")
    server = start_server(repo, root / "tritonserver.log", control_mode="poll")
    yield server, str(repo)
    stop_cleanly(server)


def degrade(server: TritonServer, repo: str, level: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli", "degrade", "--level", level, "--control-mode", "poll",
         "--repository", repo, "--url", server.http_url, "--timeout-s", "60"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)


def test_repository_edit_forces_a_level_and_auto_restores_it(polled) -> None:
    server, repo = polled
    forced = degrade(server, repo, "2")
    assert forced.returncode == 0, forced.stderr
    assert "embed now reports: minilm_int8:1:int8:L2" in forced.stdout
    assert 'key: "forced_level" value: { string_value: "2" }' in \
        (Path(repo) / "embed" / "config.pbtxt").read_text()
    restored = degrade(server, repo, "auto")
    assert restored.returncode == 0, restored.stderr
    assert "embed now reports: minilm_onnx:1:fp32:L0" in restored.stdout

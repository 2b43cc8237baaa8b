"""One source of truth for how Triton is started, on the CPU dev server and in compose.

`server_flags()` renders the tritonserver command line from `ServerOptions`. The CPU
launcher (`server.launcher`) and `docker-compose.yml` both use exactly these flags;
`tests/unit/test_compose.py` checks that the compose file agrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPOSITORY = PROJECT_ROOT / "model_repository"
TRITON_VERSION = "2.51.0"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # NGC 24.10 == Triton 2.51.0
EXIT_TIMEOUT_S = 30
RESPONSE_CACHE_BYTES = 64 * 1024 * 1024
POLL_INTERVAL_S = 2
LOG_FORMAT = "ISO8601"

ControlMode = Literal["explicit", "poll"]


@dataclass(frozen=True)
class Ports:
    """The three listening ports of one server."""

    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002

    def as_dict(self) -> dict[str, int]:
        return {"http": self.http, "grpc": self.grpc, "metrics": self.metrics}


@dataclass(frozen=True)
class ServerOptions:
    """Everything that varies between one server start and another."""

    repository: Path = DEFAULT_REPOSITORY
    ports: Ports = field(default_factory=Ports)
    control_mode: ControlMode = "explicit"
    model_config_name: str | None = None  # e.g. "gpu" selects configs/gpu.pbtxt
    exit_timeout_s: int = EXIT_TIMEOUT_S
    cache_bytes: int = RESPONSE_CACHE_BYTES
    log_verbose: int = 0
    extra: tuple[str, ...] = ()


def server_flags(opts: ServerOptions) -> list[str]:
    """The tritonserver flags for `opts`, without host-specific directories."""
    flags = [
        f"--model-repository={opts.repository}",
        f"--http-port={opts.ports.http}",
        f"--grpc-port={opts.ports.grpc}",
        f"--metrics-port={opts.ports.metrics}",
        "--allow-metrics=true",
        "--metrics-config=summary_latencies=true",
        f"--exit-timeout-secs={opts.exit_timeout_s}",
        f"--cache-config=local,size={opts.cache_bytes}",
        f"--log-format={LOG_FORMAT}",
        f"--log-verbose={opts.log_verbose}",
        "--strict-readiness=true",
        "--disable-auto-complete-config",
    ]
    flags += control_mode_flags(opts.control_mode)
    if opts.model_config_name:
        flags.append(f"--model-config-name={opts.model_config_name}")
    return flags + list(opts.extra)


def control_mode_flags(mode: ControlMode) -> list[str]:
    """Explicit mode loads every model at start; poll mode rescans the repository."""
    if mode == "explicit":
        return ["--model-control-mode=explicit", "--load-model=*"]
    if mode == "poll":
        return ["--model-control-mode=poll", f"--repository-poll-secs={POLL_INTERVAL_S}"]
    raise ValueError(f"unknown model control mode {mode!r}; expected 'explicit' or 'poll'")

"""The trace backend of `tmr serve --trace` (docs/observability.md, "Traces").

Arize Phoenix (`arize-phoenix`, Elastic License 2.0: free to run for oneself, not to sell as
a managed service) stores the spans in SQLite and shows them in a UI; it lives in its own
venv, `.venv-traces` (`make traces`, from requirements-traces.lock), because it needs
protobuf >= 5 and tritonclient 2.51 needs protobuf < 5. In front of it, the OTLP relay
(server/otlp_relay.py) turns Triton's OTLP/JSON into the protobuf Phoenix takes.

Clients send their own spans to the relay too (`TraceBackend.otlp_url`, OTLP/HTTP JSON or
protobuf), so a client span, Triton's spans and the encoders' child spans meet in one trace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from core.paths import PROJECT_ROOT
from core.ports import free_ports
from server.errors import TraceBackendError
from server.launcher import stop_process

TRACES_VENV = PROJECT_ROOT / ".venv-traces"
RELAY_SCRIPT = PROJECT_ROOT / "server" / "otlp_relay.py"
PHOENIX_PORT = 6006  # Phoenix's own default: UI, REST API and OTLP/HTTP
PROJECT = "default"  # Phoenix's project for spans that name none
START_TIMEOUT_S = 120.0


@dataclass
class TraceBackend:
    """Phoenix on 127.0.0.1:`port` (0: a free one) and the OTLP relay in front of it; a
    context manager. Its data stays in `work_dir` between runs."""

    work_dir: Path
    port: int = PHOENIX_PORT
    relay_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Phoenix: its UI, REST API (/v1/projects/...) and OTLP/HTTP protobuf."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_url(self) -> str:
        """Where Triton and clients send spans: the relay (OTLP/HTTP, JSON or protobuf)."""
        return f"http://127.0.0.1:{self.relay_port}/v1/traces"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "phoenix.log"

    def start(self) -> None:
        python = TRACES_VENV / "bin" / "python"
        if not (TRACES_VENV / "bin" / "phoenix").exists():
            raise TraceBackendError(f"{TRACES_VENV} has no Phoenix; run `make traces`")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        grpc_port, relay_port, port = free_ports(3)
        self.port, self.relay_port = self.port or port, self.relay_port or relay_port
        env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(self.port),
               "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_WORKING_DIR": str(self.work_dir),
               "PHOENIX_TELEMETRY_ENABLED": "false"}
        self._spawn([str(TRACES_VENV / "bin" / "phoenix"), "serve"], env, self.log_path)
        self._spawn([str(python), str(RELAY_SCRIPT), "--port", str(self.relay_port),
                     "--to", f"{self.url}/v1/traces"], env, self.work_dir / "relay.log")
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready():
            dead = [p for p in self.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-10:])
                raise TraceBackendError(f"Phoenix did not become ready on {self.url}; "
                                        f"last log lines:\n{tail}")
            time.sleep(0.5)

    def _spawn(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        log = log_path.open("wb")
        self._logs.append(log)
        self.processes.append(subprocess.Popen(argv, env=env, stdout=log,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def spans(self, trace_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """The stored spans, newest first (Phoenix's REST API); of one trace when given."""
        query = urllib.parse.urlencode({"limit": limit})
        with urllib.request.urlopen(f"{self.url}/v1/projects/{PROJECT}/spans?{query}",
                                    timeout=10) as answer:
            data = json.load(answer)["data"]
        return [s for s in data if trace_id is None or s["context"]["trace_id"] == trace_id]

    def stop(self) -> None:
        """SIGTERM to each (Phoenix closes its database), SIGKILL after 20 s."""
        for process in self.processes:
            stop_process(process, signal.SIGTERM, 20.0)
        for log in self._logs:
            log.close()
        self.processes, self._logs = [], []

    def __enter__(self) -> TraceBackend:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

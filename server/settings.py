"""One source of truth for how Triton is started, on the CPU dev server and in compose.

`server_flags()` renders the tritonserver command line from `ServerOptions`. The CPU
launcher (`server.launcher`) and `docker-compose.yml` both use exactly these flags;
`tests/unit/test_compose.py` checks that the compose file agrees.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tmr_client.auth import ADMIN_KEY_ENV, ADMIN_KEY_HEADER
from tmr_client.contract import GRPC_PORT, HTTP_PORT, METRICS_PORT
from tmr_client.limits import GRPC_MAX_MESSAGE_BYTES, HTTP_MAX_BODY_BYTES

from core.cpu_policy import UNDECIDED, BulkCpu
from core.paths import DEFAULT_REPOSITORY
from core.timeouts import PROXY_READ
from core.variant import REVIEWED, Variant

TRITON_VERSION = "2.51.0"
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"  # NGC 24.10 == Triton 2.51.0
# The other images of docker-compose.yml and server/k8s/ (tests/unit/test_compose.py).
TRITON_SDK_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3-sdk"  # perf_analyzer 2.51
PYTHON_IMAGE = "python:3.11.10-slim-bookworm"  # `tmr watchdog`: the venv's Python minor
NGINX_IMAGE = "nginx:1.22.1"  # the same nginx as Debian's on the CPU path
PROMETHEUS_IMAGE = "prom/prometheus:v2.42.0"  # the same Prometheus as Debian's
GRAFANA_IMAGE = "grafana/grafana:11.3.0"
EXIT_TIMEOUT_S = 30
# glibc's malloc for tritonserver and its stubs: a fixed 128 KiB mmap and trim threshold
# hands a bulk batch's buffers back when freed (glibc otherwise raises the mmap threshold
# after the first large free and keeps later ones in the heap), and two arenas. Measured
# (perf.memory --models embed, 60 s mixed load, 2026-12-07): embed 286 -> 188 MiB RSS after
# the load, served requests within the noise; MALLOC_ARENA_MAX alone: 302 MiB. An
# operator's own value wins. docker-compose.yml's triton service sets the same.
STUB_MALLOC = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
               "MALLOC_TRIM_THRESHOLD_": "131072"}
RESPONSE_CACHE_BYTES = 64 * 1024 * 1024
POLL_INTERVAL_S = 2
LOG_FORMAT = "ISO8601"

ControlMode = Literal["explicit", "poll"]
ALL_MODELS = ("*",)  # `--load-model=*`: every model of the repository

# Restricted admin APIs: Triton refuses these without the header ADMIN_KEY_HEADER carrying
# the admin key (HTTP 403, gRPC UNAVAILABLE). Inference, metadata and health stay open.
RESTRICTED_APIS = ("model-repository", "model-config", "shared-memory", "statistics", "trace",
                   "logging")
DEV_ADMIN_KEY = "tmr-dev-admin-key"  # the CPU dev server's key when TMR_ADMIN_KEY is unset


def admin_key() -> str:
    """The key this host's servers are started with: TMR_ADMIN_KEY, or the dev default
    (compose requires the variable). The operator tools (server/, perf/, cli/, the tests)
    pass it to the SDK explicitly; the SDK itself never falls back to it."""
    return os.environ.get(ADMIN_KEY_ENV) or DEV_ADMIN_KEY

# Traces (docs/observability.md "Traces"): Triton's OpenTelemetry mode, OTLP/HTTP.
TRACE_RATE = 100  # 1 request in TRACE_RATE; a request that carries a traceparent always
TRACE_EXPORT_DELAY_MS = 1000  # the batch span processor's export interval
TRACE_SERVICE = "tritonserver"  # the spans' service.name
# In a cluster (server/k8s/triton.yaml): an OpenTelemetry Collector, which takes Triton's
# OTLP/JSON as it is; rate 0 traces only the requests that arrive with a traceparent (the
# front door's TRACE_SAMPLING starts them), and the trace API changes the rate live.
CLUSTER_TRACE_URL = "http://otel-collector.observability.svc:4318/v1/traces"
CLUSTER_TRACE_RATE = 0


@dataclass(frozen=True)
class Ports:
    """The three listening ports of one server (by default, Triton's)."""

    http: int = HTTP_PORT
    grpc: int = GRPC_PORT
    metrics: int = METRICS_PORT

    def as_dict(self) -> dict[str, int]:
        return {"http": self.http, "grpc": self.grpc, "metrics": self.metrics}


@dataclass(frozen=True)
class ServerOptions:
    """Everything that varies between one server start and another."""

    repository: Path = DEFAULT_REPOSITORY
    ports: Ports = field(default_factory=Ports)
    control_mode: ControlMode = "explicit"
    variant: Variant = REVIEWED  # --model-config-name: core/variant.py (GPU: configs/gpu.pbtxt)
    # How the shared path yields the CPU to the lanes (core/cpu_policy.py); `tmr serve`
    # decides it on its host, a server started otherwise takes the one safe on any host.
    bulk_cpu: BulkCpu = UNDECIDED
    exit_timeout_s: int = EXIT_TIMEOUT_S
    cache_bytes: int = RESPONSE_CACHE_BYTES
    log_verbose: int = 0
    admin_key: str = field(default_factory=admin_key)
    extra: tuple[str, ...] = ()
    # The models explicit mode loads at start ("*": every one; core.startup.startup_models
    # is `tmr serve`'s rule). Poll mode loads every model whatever this says: it rescans.
    load_models: tuple[str, ...] = ALL_MODELS
    trace_url: str | None = None  # OTLP/HTTP traces endpoint; None: tracing off
    trace_rate: int = TRACE_RATE


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
    flags += control_mode_flags(opts.control_mode, opts.load_models)
    flags += restricted_api_flags(opts.admin_key)
    flags += opts.variant.flag()
    if opts.trace_url:
        flags += trace_flags(opts.trace_url, opts.trace_rate)
    return flags + list(opts.extra)


def trace_flags(url: str, rate: int) -> list[str]:
    """Triton's OpenTelemetry tracing to `url`: 1 request in `rate` (0: only the requests
    that carry a W3C traceparent, which Triton always traces), timestamps, no count limit."""
    if rate < 0:
        raise ValueError(f"the trace rate is 1 request in N, N >= 0; got {rate}")
    return [f"--trace-config={setting}" for setting in (
        "mode=opentelemetry", f"rate={rate}", "level=TIMESTAMPS", "count=-1",
        f"opentelemetry,url={url}", f"opentelemetry,resource=service.name={TRACE_SERVICE}",
        f"opentelemetry,bsp_schedule_delay={TRACE_EXPORT_DELAY_MS}")]


def control_mode_flags(mode: ControlMode, load_models: tuple[str, ...] = ALL_MODELS
                       ) -> list[str]:
    """Explicit mode loads `load_models` at start (one `--load-model` each) and the rest
    through the load API; poll mode loads every model and rescans the repository, so it
    takes no `--load-model` (Triton refuses one outside explicit mode)."""
    if "*" in load_models and len(load_models) > 1:  # Triton refuses the mix at start
        raise ValueError(f"load '*' alone or name the models, not both: {load_models}")
    if mode == "explicit":
        return ["--model-control-mode=explicit", *(f"--load-model={m}" for m in load_models)]
    if mode == "poll":
        return ["--model-control-mode=poll", f"--repository-poll-secs={POLL_INTERVAL_S}"]
    raise ValueError(f"unknown model control mode {mode!r}; expected 'explicit' or 'poll'")


def restricted_api_flags(key: str) -> list[str]:
    """Restrict the admin APIs on both protocols to requests carrying `admin-key: <key>`."""
    if not key:
        raise ValueError(f"the admin key is empty; set {ADMIN_KEY_ENV}")
    apis = ",".join(RESTRICTED_APIS)
    return [f"--http-restricted-api={apis}:{ADMIN_KEY_HEADER}={key}",
            f"--grpc-restricted-protocol={apis}:{ADMIN_KEY_HEADER}={key}"]


# The front door (nginx, server/front_door.py). Clients authenticate with API_KEY_HEADER;
# the keys come from TMR_API_KEYS ("name:key,name:key"), the dev default otherwise.
API_KEYS_ENV = "TMR_API_KEYS"
DEV_API_KEYS = "dev:tmr-dev-key"
# Request body limits: the SDK's (client/limits.py), which keep Triton 2.51's HTTP server
# under the size that kills it. tests/unit/test_front_door.py checks that they hold the
# largest valid request of every shipped front model: over HTTP, a full batch of the
# longest texts JSON-escaped (3 MiB and the envelope) or one image of about 2.9 MB as
# base64 (3.9 MB binary); over gRPC, one image at the largest max_image_bytes (16 MiB).
MAX_BODY_BYTES = HTTP_MAX_BODY_BYTES
MAX_GRPC_BODY_BYTES = GRPC_MAX_MESSAGE_BYTES
# A full batch of embeddings as JSON: 64 x 384 floats measured 517 KB (~21 bytes a float);
# 1 MiB holds the worst case (~26 bytes a float) with headroom.
MAX_RESPONSE_BYTES = 1024 * 1024
BURST_RATIO = 1.5  # the seeds' rule: room for 1.5x the average rate on top of it


@dataclass(frozen=True)
class FrontDoorSettings:
    """Ports, limits and timeouts of the front door; every template value but host paths."""

    http_port: int = 8080
    grpc_port: int = 8081
    rate_per_minute: int = 6000  # 100 requests/s per API key on average
    max_body_bytes: int = MAX_BODY_BYTES
    max_grpc_body_bytes: int = MAX_GRPC_BODY_BYTES
    max_response_bytes: int = MAX_RESPONSE_BYTES
    client_timeout_s: int = 30  # client header, body and send timeouts
    upstream_connect_timeout_s: int = 5
    upstream_timeout_s: int = int(PROXY_READ.seconds)  # Triton's answer (core/timeouts.py)
    # A fleet (server/fleet.py): a request whose replica refuses or drops the connection
    # goes to the next, at most this many replicas in all; a replica that failed is left
    # alone for replica_fail_timeout_s, then tried again with one request.
    upstream_tries: int = 3
    replica_fail_timeout_s: int = 2
    # Requests without a traceparent that the front door starts a trace for: 1 in
    # trace_rate (its request id as the trace id); 0: none (tracing off).
    trace_rate: int = 0

    @property
    def trace_sampling(self) -> str:
        """The body of the template's split_clients: 1 for the sampled share, else 0."""
        if self.trace_rate <= 0:
            return "* 0;"
        return f"{100 / self.trace_rate:.4g}% 1; * 0;"

    @property
    def burst(self) -> int:
        """Requests over the average a client may send at once: 1.5 s of its rate."""
        return max(1, math.ceil(self.rate_per_minute / 60 * BURST_RATIO))

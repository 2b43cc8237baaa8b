"""Run `perf_analyzer` 2.51 from the tritonclient wheel and parse its CSV into typed rows;
read a `tmr perf sweep`'s rows back, and Triton's statistics of the model it drove.

Product, not benchmark: `tmr perf plan --check` and `tmr perf capacity` (server/plan.py)
read these rows as `tmr perf sweep` (server/sweep.py) and `make bench` write them.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tmr_client.auth import key_headers

from server.settings import admin_key

LOG = logging.getLogger(__name__)  # progress the CLI may show (tmr --verbose)


@dataclass(frozen=True)
class PerfRow:
    """One concurrency level of a perf_analyzer CSV; latencies in milliseconds."""

    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    queue_ms: float
    compute_ms: float
    overhead_ms: float  # client send/receive and network + server send/receive


def parse_csv(text: str) -> list[PerfRow]:
    """Rows of `perf_analyzer -f` output (latency columns are microseconds)."""
    rows = []
    for rec in csv.DictReader(text.splitlines()):
        def ms(key: str, rec: dict[str, str] = rec) -> float:
            return float(rec[key]) / 1000.0

        compute = sum(ms(k) for k in ("Server Compute Input", "Server Compute Infer",
                                      "Server Compute Output"))
        overhead = sum(ms(k) for k in ("Client Send", "Network+Server Send/Recv",
                                        "Client Recv"))
        rows.append(PerfRow(
            concurrency=int(rec["Concurrency"]), throughput=float(rec["Inferences/Second"]),
            p50_ms=ms("p50 latency"), p90_ms=ms("p90 latency"), p95_ms=ms("p95 latency"),
            p99_ms=ms("p99 latency"), queue_ms=ms("Server Queue"), compute_ms=compute,
            overhead_ms=overhead,
        ))
    return rows


def binary() -> Path:
    return Path(sys.executable).parent / "perf_analyzer"


def environment() -> dict[str, str]:
    """perf_analyzer links libcudart.so.12: the nvidia-cuda-runtime-cu12 wheel's lib/."""
    cudart = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cuda_runtime" / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(cudart), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def header_flags(protocol: str) -> list[str]:
    """perf_analyzer reads the model config and statistics, both restricted: `-H` sends the
    admin key (and the API key, through the front door). `-H` works for gRPC too on 2.51,
    whatever `--help` says."""
    flags = []
    for name, value in key_headers(protocol, admin=True, admin_key=admin_key()).items():
        flags += ["-H", f"{name}:{value}"]
    return flags


def run(model: str, url: str, concurrency: int, input_data: Path | str, csv_path: Path,
        protocol: str = "grpc", interval_ms: int = 3000,
        extra: tuple[str, ...] = (), stability_pct: int = 20) -> PerfRow:
    """One measured concurrency level; raises CalledProcessError with perf_analyzer's output.
    When its windows never agree within `stability_pct` (exit 2, common on a shared
    machine), once more with twice the tolerance, said aloud."""
    cmd = [
        str(binary()), "-m", model, "-u", url, "-i", protocol,
        f"--concurrency-range={concurrency}:{concurrency}",
        f"--input-data={input_data}", "--measurement-mode=time_windows",
        f"--measurement-interval={interval_ms}", f"--stability-percentage={stability_pct}",
        "--max-trials=6", "-f", str(csv_path), *header_flags(protocol), *extra,
    ]
    proc = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=300)
    if proc.returncode == 2 and stability_pct < 100:
        wider = min(100, 2 * stability_pct)
        LOG.info(f"{model} c{concurrency}: unstable within {stability_pct}%; measuring "
                 f"again within {wider}%")
        return run(model, url, concurrency, input_data, csv_path, protocol, interval_ms, extra,
                   wider)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return parse_csv(csv_path.read_text())[0]


def load_rows(path: Path) -> tuple[dict, list[PerfRow]]:
    """A sweep result (a `tmr perf sweep` folder or its sweep.json): its data and rows."""
    data = json.loads((path / "sweep.json" if path.is_dir() else path).read_text())
    return data, [PerfRow(**r) for r in data["rows"]]


def model_stats(http_url: str, model: str = "") -> list[dict]:
    """Triton's statistics (a restricted API) of `model`, or of every loaded model."""
    import urllib.request

    path = f"/v2/models/{model}/stats" if model else "/v2/models/stats"
    request = urllib.request.Request(f"http://{http_url}{path}",
                                     headers=key_headers(admin=True, admin_key=admin_key()))
    with urllib.request.urlopen(request, timeout=10) as r:
        return json.loads(r.read())["model_stats"]


def counts(http_url: str, model: str) -> tuple[int, int]:
    """(inferences, executions) of a model so far, from Triton's statistics."""
    stats = model_stats(http_url, model)
    return (sum(int(s["inference_count"]) for s in stats),
            sum(int(s["execution_count"]) for s in stats))

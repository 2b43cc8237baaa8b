"""`tmr perf plan MODEL`: measure the model in-process, derive batching settings, show the diff;
`tmr perf capacity SWEEP`: replicas for a target peak.

    tmr perf plan ENCODER [--memory-budget-mb 2048] [--latency-budget-s 0.06]
                              [--arrival-rps 200] [--write] [--check]

The model runs in onnxruntime (or TorchScript) with the thread count of its config, at
32 tokens per row and batch 1..64; latency is the median, memory the rise of the
process's peak RSS (device memory on a GPU is not measured here). `--check` starts a
server with the proposal on a copy of the repository and sweeps it with perf_analyzer at
concurrency = the preferred batch, printing predicted and measured side by side
(throughput, p99, executed batch size).

    tmr perf capacity SWEEP --target-rps 1000 [--p99-budget-s 0.06] [--headroom 0.2]

Replicas for a target peak from a measured sweep of one replica (a `tmr perf sweep`
folder or its sweep.json): the arithmetic of `server.planning.capacity`, and the HPA's
minReplicas against server/k8s/triton.yaml. A sibling of `plan`, not an option of it:
`plan` measures a model in-process, `capacity` only reads a result.

Product, like `tmr tune` (server/tune.py): both write what the server runs with, so they
live here, not in perf/ (the rules are server/planning.py, perf_analyzer's rows
server/perf_analyzer.py).
"""

from __future__ import annotations

import difflib
import re
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import versions
from core.families.catalog import find
from core.files import write_atomically
from core.paths import PROJECT_ROOT
from runtime.served import served_runner
from server import perf_analyzer
from server.errors import ServerError
from server.perf_analyzer import PerfRow, counts, load_rows
from server.planning import (
    BatchPoint,
    CapacityError,
    Hpa,
    Plan,
    capacity,
    capacity_report,
    check_table,
    plan,
)

K8S_TRITON = PROJECT_ROOT / "server" / "k8s" / "triton.yaml"

BATCHES = (1, 2, 4, 8, 16, 32, 64)
TOKENS = 32


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(model_dir: Path, seconds: float = 1.0) -> list[BatchPoint]:
    model = find(model_dir.parent, model_dir.name)
    # the model as its reviewed config runs it: runtime/served.py, what its instances run
    forward = served_runner(versions.read_config_json(model_dir),
                            model_dir / str(versions.served_version(model_dir)))
    ids_name, mask_name = (t.name for t in model.family.contract.encoder_inputs)
    idle = peak_rss_mb()
    points = []
    for batch in BATCHES:
        ids = np.full((batch, TOKENS), 2000, dtype=np.int64)
        feeds = {ids_name: ids, mask_name: np.ones_like(ids)}
        forward(feeds)
        times = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times) < 3:
            began = time.perf_counter()
            forward(feeds)
            times.append((time.perf_counter() - began) * 1000)
        points.append(BatchPoint(batch, statistics.median(times), peak_rss_mb() - idle))
    return points


def proposed_config(text: str, proposal: Plan) -> str:
    """config.pbtxt with max_batch_size and the dynamic_batching settings replaced."""
    text = re.sub(r"max_batch_size: \d+", f"max_batch_size: {proposal.max_batch_size}", text)
    batching = (f"dynamic_batching {{ preferred_batch_size: [ {proposal.preferred_batch_size} ]"
                f" max_queue_delay_microseconds: {proposal.max_queue_delay_microseconds} }}")
    text, count = re.subn(r"dynamic_batching \{[^}]*\}", batching, text)
    if count != 1:
        raise ValueError("expected one single-line dynamic_batching block to replace")
    versions.parse_config(text)  # only propose what Triton would parse
    return text


def check_with_sweep(model: str, proposal_text: str) -> tuple[PerfRow, float]:
    """The proposal served on a copy of the repository and swept at concurrency = the
    preferred batch: perf_analyzer's row, and the executed batch size from statistics."""
    from server.served_copy import served_copy
    from server.sweep import input_file

    batch = int(re.search(r"preferred_batch_size: \[ (\d+)", proposal_text).group(1))

    def propose(repo: Path) -> None:
        write_atomically(repo / model / "config.pbtxt", proposal_text)

    # Served as the sweep and the benchmarks serve: what `tmr serve` serves on this host,
    # every model loaded, on three free ports; the proposal on a copy.
    with tempfile.TemporaryDirectory(prefix="tmr-plan-") as tmp, \
            served_copy(Path(tmp) / "triton.log", edit=propose) as server:
        before = counts(server.http_url, model)
        row = perf_analyzer.run(model, server.grpc_url, batch, input_file(model),
                                Path(tmp) / "check.csv")
        after = counts(server.http_url, model)
    return row, (after[0] - before[0]) / max(after[1] - before[1], 1)


@dataclass(frozen=True)
class PlanOptions:
    """`tmr perf plan MODEL`: the budgets and arrival rate a proposal must fit."""

    model: str
    repository: Path
    memory_budget_mb: float
    latency_budget_ms: float
    arrival_rps: float
    write: bool
    check: bool


@dataclass(frozen=True)
class CapacityOptions:
    """`tmr perf capacity RESULT`: a measured sweep and the peak to serve."""

    result: Path
    target_rps: float
    p99_budget_ms: float
    headroom: float


def plan_report(args: PlanOptions) -> str:
    """`tmr perf plan`: the model measured in-process, the proposal, its diff against the
    config (written with `write`), and with `check` the proposal served; as text."""
    model_dir = args.repository / args.model
    points = measure(model_dir)
    proposal = plan(points, args.memory_budget_mb, args.latency_budget_ms, args.arrival_rps)
    lines = ["| batch | ms | seq/s | peak MB |\n| ---: | ---: | ---: | ---: |"]
    lines += [f"| {p.batch} | {p.latency_ms:.1f} | {p.throughput:.0f} | {p.peak_mb:.0f} |"
              for p in points]
    lines.append(f"\n{proposal}\n")
    config_path = model_dir / "config.pbtxt"
    current = config_path.read_text()
    new = proposed_config(current, proposal)
    lines.append("".join(difflib.unified_diff(current.splitlines(True), new.splitlines(True),
                                              str(config_path), f"{config_path} (proposed)")))
    if args.write:
        write_atomically(config_path, new)
        lines.append(f"written to {config_path}")
    if args.check:
        row, batch = check_with_sweep(args.model, new)
        lines.append(f"\nthe proposal served, perf_analyzer gRPC at concurrency "
                     f"{proposal.preferred_batch_size}:\n")
        lines.append(check_table(proposal, args.latency_budget_ms, row.throughput,
                                 row.p99_ms, batch))
    return "\n".join(lines)


def manifest_hpa(path: Path = K8S_TRITON) -> Hpa:
    """The HPA and PDB figures of the `triton` manifest (pyyaml: the dev extras)."""
    import yaml

    docs = {d["kind"]: d["spec"] for d in yaml.safe_load_all(path.read_text()) if d}
    hpa, pdb = docs["HorizontalPodAutoscaler"], docs["PodDisruptionBudget"]
    target = hpa["metrics"][0]["pods"]["target"]["averageValue"]
    return Hpa(hpa["minReplicas"], hpa["maxReplicas"], int(target), pdb["maxUnavailable"])


class PlanInputError(ServerError):
    """Raised when a sweep result is missing, or it and the target give no capacity."""

    exit_code = 2


def capacity_text(args: CapacityOptions) -> str:
    """`tmr perf capacity`: the replicas for the target, as text; PlanInputError when the
    sweep or the target gives none."""
    try:
        meta, rows = load_rows(args.result)
        cap = capacity(rows, args.target_rps, args.p99_budget_ms, args.headroom)
    except FileNotFoundError as exc:
        raise PlanInputError(f"no sweep result at {exc.filename}") from exc
    except CapacityError as exc:
        raise PlanInputError(str(exc)) from exc
    return (f"{meta.get('model', '?')} over {meta.get('protocol', '?')}, one replica "
            f"({args.result}):\n\n{capacity_report(cap, manifest_hpa())}")

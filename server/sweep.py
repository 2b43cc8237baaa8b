"""`tmr perf sweep|compare|check`: perf_analyzer concurrency sweeps, reports and baselines.

    tmr perf sweep embed --concurrency 1 2 4 8 16 [--url host:port] [--protocol grpc]
    tmr perf compare perf/results/A perf/results/B
    tmr perf check perf/results/A [--baseline perf/baselines/embed_grpc.json]

Without `--url` the sweep starts its own server on free ports (server/served_copy.py).
Results go to `perf/results/sweep-<timestamp>/` (git-ignored): sweep.json, sweep.md, the CSVs
and PNG plots. Baselines are ratios' denominators, measured on this machine (the
checked-in ones in perf/baselines/); `check` exits 1 when a level's throughput falls
under, or its p99 rises over, the given ratio.

Product, like `tmr perf plan|capacity` (server/plan.py): users sweep their own servers.
`make bench` draws its sweep with `plot` and picks inputs with `input_file`.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from core.paths import DEFAULT_REPOSITORY, PROJECT_ROOT
from server import perf_analyzer
from server.errors import ServerError
from server.goodput import INPUTS
from server.knee import Knee, find_knee, ratios, regressions
from server.perf_analyzer import PerfRow, load_rows
from server.stamp import Stamp, run_dir, save_figure, subplots, write_report

BASELINES = PROJECT_ROOT / "perf" / "baselines"


def input_file(model: str, repository: Path = DEFAULT_REPOSITORY) -> Path | str:
    """perf/inputs/<model>.json; else, for a family's front, the family's input file; for
    an encoder, perf/inputs/<base>_encoder.json (every format of a model takes the same tensors:
    real token ids, which OpenVINO's and onnxruntime's checks accept) else perf_analyzer's
    `random` (an encoder's fixed-shape tensors); the text family's file for models
    outside the repository's families (the benchmark fixtures)."""
    from core.families import TEXT_EMBEDDING
    from core.families.catalog import catalog

    path = INPUTS / f"{model}.json"
    if path.exists():
        return path
    for family_model in catalog(repository):
        if model == family_model.front:
            return INPUTS / family_model.family.perf_inputs
        if model in family_model.models:
            base = INPUTS / f"{family_model.base}_encoder.json"
            return base if base.exists() else "random"
    return INPUTS / TEXT_EMBEDDING.perf_inputs


@contextlib.contextmanager
def server_for(url: str | None, protocol: str) -> Iterator[tuple[str, str]]:
    """(perf url, http url) of the given server, or of one started on free ports."""
    if url:
        yield url, url
        return
    from server.served_copy import free_port_server

    log = Path(tempfile.mkdtemp()) / "tritonserver.log"
    with free_port_server(log_path=log) as server:
        yield (server.grpc_url if protocol == "grpc" else server.http_url), server.http_url


def measure_level(model: str, url: str, level: int, out: Path, protocol: str,
                  interval_ms: int, stability_pct: int) -> PerfRow:
    """One level, its verbose CSV in `out` (perf_analyzer.run widens an unstable one)."""
    return perf_analyzer.run(model, url, level, input_file(model), out / f"{model}-c{level}.csv",
                             protocol, interval_ms, ("--verbose-csv",), stability_pct)


def run_sweep(model: str, levels: list[int], url: str, protocol: str, out: Path,
              interval_ms: int, stability_pct: int = 20) -> list[PerfRow]:
    from rich.progress import Progress

    rows = []
    with Progress(transient=True) as progress:
        task = progress.add_task(f"{model} over {protocol}", total=len(levels))
        for level in levels:
            rows.append(measure_level(model, url, level, out, protocol, interval_ms,
                                      stability_pct))
            progress.advance(task)
    return rows


def plot(rows: list[PerfRow], knee: Knee, out: Path, title: str,
         stamp: Stamp | None = None) -> None:
    c = [r.concurrency for r in rows]
    fig, (a, b, d) = subplots(1, 3, figsize=(14, 4))
    a.plot(c, [r.throughput for r in rows], marker="o")
    a.axvline(knee.concurrency, color="grey", linestyle="--", label="knee")
    a.set(xlabel="concurrency", ylabel="infer/s", title=f"{title}: throughput", xscale="log")
    a.legend()
    b.plot(c, [r.p50_ms for r in rows], marker="o", label="p50")
    b.plot(c, [r.p99_ms for r in rows], marker="o", label="p99")
    b.set(xlabel="concurrency", ylabel="ms", title="latency", xscale="log")
    b.legend()
    parts = {"queue": [r.queue_ms for r in rows], "compute": [r.compute_ms for r in rows],
             "overhead": [r.overhead_ms for r in rows]}
    bottom = [0.0] * len(rows)
    for name, values in parts.items():
        d.bar([str(x) for x in c], values, bottom=bottom, label=name)
        bottom = [x + y for x, y in zip(bottom, values)]
    d.set(xlabel="concurrency", ylabel="ms (average)", title="latency breakdown")
    d.legend()
    save_figure(fig, out / "sweep.png", 100, stamp)


def markdown(model: str, protocol: str, rows: list[PerfRow], knee: Knee) -> str:
    lines = [f"# {model} over {protocol}", "",
             "| c | infer/s | p50 ms | p90 ms | p95 ms | p99 ms | queue ms | compute ms | "
             "overhead ms |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r.concurrency} | {r.throughput:.0f} | {r.p50_ms:.1f} | {r.p90_ms:.1f} | "
              f"{r.p95_ms:.1f} | {r.p99_ms:.1f} | {r.queue_ms:.1f} | {r.compute_ms:.1f} | "
              f"{r.overhead_ms:.1f} |" for r in rows]
    lines += ["", f"Recommended concurrency: **{knee.concurrency}** ({knee.throughput:.0f} "
              f"infer/s, p99 {knee.p99_ms:.0f} ms): {knee.reason}.", "", "![sweep](sweep.png)"]
    return "\n".join(lines)


@dataclass(frozen=True)
class SweepOptions:
    """`tmr perf sweep`: one model, these concurrency levels; no url starts a server."""

    model: str
    protocol: str
    concurrency: list[int]
    url: str | None
    p99_budget_ms: float
    interval_ms: int
    stability_percentage: int


@dataclass(frozen=True)
class CompareOptions:
    """`tmr perf compare A B`: two sweep results."""

    a: Path
    b: Path


@dataclass(frozen=True)
class CheckOptions:
    """`tmr perf check RESULT`: a sweep against its baseline and the allowed ratios."""

    result: Path
    baseline: Path | None
    min_throughput_ratio: float
    max_p99_ratio: float


def sweep_report(args: SweepOptions) -> str:
    """`tmr perf sweep`: run it, write the report and plot; the report as text."""
    out = run_dir("sweep")
    with server_for(args.url, args.protocol) as (url, _):
        rows = run_sweep(args.model, args.concurrency, url, args.protocol, out,
                         args.interval_ms, args.stability_percentage)
    knee = find_knee(rows, args.p99_budget_ms)
    plot(rows, knee, out, args.model)
    return write_report(out, "sweep", markdown(args.model, args.protocol, rows, knee), {
        "model": args.model, "protocol": args.protocol, "p99_budget_ms": args.p99_budget_ms,
        "rows": [asdict(r) for r in rows], "knee": asdict(knee)})


def compare_text(args: CompareOptions) -> str:
    """`tmr perf compare`: B against A, level by level, as a table."""
    _, a = load_rows(args.a)
    _, b = load_rows(args.b)
    return "\n".join(["| c | throughput B/A | p99 B/A |\n| ---: | ---: | ---: |",
                      *(f"| {r.concurrency} | {r.throughput:.2f} | {r.p99:.2f} |"
                        for r in ratios(a, b))])


class CheckInputError(ServerError):
    """Raised when a result and its baseline share no concurrency level."""

    exit_code = 2


def check_result(args: CheckOptions) -> tuple[str, list[str]]:
    """`tmr perf check`: (each level's ratios as text, the regressions found)."""
    meta, rows = load_rows(args.result)
    baseline_path = args.baseline or BASELINES / f"{meta['model']}_{meta['protocol']}.json"
    _, base = load_rows(baseline_path)
    found = ratios(base, rows)
    if not found:
        raise CheckInputError(f"no concurrency level in common with {baseline_path}")
    problems = regressions(found, args.min_throughput_ratio, args.max_p99_ratio)
    return "\n".join(f"c{r.concurrency}: throughput {r.throughput:.2f}x, p99 {r.p99:.2f}x"
                     for r in found), problems

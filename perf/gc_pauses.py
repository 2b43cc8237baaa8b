"""Python GC pauses in the stubs under load, and what `gc_policy` does about them.

Serves the repository with every Python model at one `gc_policy`, drives the text model's front with
perf_analyzer (gRPC, concurrency 16) and reads the stubs' own GC counters
(`tmr_gc_collections_total`, `tmr_gc_pause_seconds_total`, `tmr_gc_longest_pause_seconds`,
python_backends/gc_pauses.py) beside perf_analyzer's p50/p99. The policies alternate
round by round on the same machine, so noise hits both alike.

    .venv/bin/python -m perf.gc_pauses [--rounds 2] [--interval-ms 5000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from client.prometheus import samples
from core.repository import put_parameter
from perf import harness, perf_analyzer
from perf.subjects import INPUTS, text_model


@dataclass(frozen=True)
class GcRun:
    """One policy, one round: latency under load and the stubs' GC in the same window."""

    policy: str
    throughput: float
    p50_ms: float
    p99_ms: float
    collections: dict[str, float]  # generation -> collections during the run
    pause_ms: dict[str, float]  # generation -> milliseconds in GC during the run
    longest_pause_ms: float

    @property
    def gc_ms_per_request(self) -> float:
        """GC milliseconds (all stubs) per served request."""
        return sum(self.pause_ms.values()) / max(self.throughput, 1e-9)


def gc_totals(metrics_url: str) -> tuple[dict[str, float], dict[str, float], float]:
    """(collections, pause seconds) per generation over every model, and the longest."""
    counts: dict[str, float] = {}
    seconds: dict[str, float] = {}
    longest = 0.0
    for s in samples(metrics_url):
        generation = s.labels.get("generation", "")
        if s.name in ("tmr_gc_collections_total", "tmr_gc_collections"):
            counts[generation] = counts.get(generation, 0.0) + s.value
        elif s.name in ("tmr_gc_pause_seconds_total", "tmr_gc_pause_seconds"):
            seconds[generation] = seconds.get(generation, 0.0) + s.value
        elif s.name == "tmr_gc_longest_pause_seconds":
            longest = max(longest, s.value)
    return counts, seconds, longest


def with_policy(policy: str) -> Callable[[Path], None]:
    """An edit setting `gc_policy` on the front and every CPU encoder (Python stubs all)."""
    def edit(repo: Path) -> None:
        for name in text_model(repo).models:
            put_parameter(repo, name, "gc_policy", policy)
    return edit


def measure(policy: str, out: Path, interval_ms: int) -> GcRun:
    model = text_model()
    inputs = INPUTS / model.family.perf_inputs
    with harness.served_copy(out / f"triton-{policy}.log", edit=with_policy(policy)) as server:
        perf_analyzer.run(model.front, server.grpc_url, 16, inputs, out / "warmup.csv",
                          interval_ms=2000, stability_pct=100)  # a warm-up: any window will do
        before = gc_totals(server.metrics_url)
        began = time.monotonic()
        row = perf_analyzer.run(model.front, server.grpc_url, 16, inputs,
                                out / f"{policy}.csv", interval_ms=interval_ms)
        seconds = time.monotonic() - began
        after = gc_totals(server.metrics_url)
    gens = sorted(set(after[0]) | set(after[1]))
    per_s = {g: (after[0].get(g, 0) - before[0].get(g, 0)) / seconds for g in gens}
    ms_per_s = {g: (after[1].get(g, 0) - before[1].get(g, 0)) * 1000 / seconds for g in gens}
    return GcRun(policy, row.throughput, row.p50_ms, row.p99_ms, per_s, ms_per_s,
                 after[2] * 1000)


def markdown(runs: list[GcRun]) -> str:
    lines = ["| policy | infer/s | p50 ms | p99 ms | collections/s (gen 0/1/2) | GC ms per s "
             "of load (gen 0/1/2) | GC ms per request | longest pause ms |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
    for r in runs:
        gens = ("0", "1", "2")
        lines.append(
            f"| {r.policy} | {r.throughput:.0f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{' / '.join(f'{r.collections.get(g, 0):.1f}' for g in gens)} | "
            f"{' / '.join(f'{r.pause_ms.get(g, 0):.2f}' for g in gens)} | "
            f"{r.gc_ms_per_request:.3f} | {r.longest_pause_ms:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=5000)
    args = parser.parse_args(argv)
    out = harness.run_dir("gc")
    runs = []
    for _ in range(args.rounds):
        for policy in ("default", "freeze"):
            runs.append(measure(policy, out, args.interval_ms))
            print(markdown(runs[-1:]).splitlines()[-1], flush=True)
    harness.write_report(out, "gc", markdown(runs), [asdict(r) for r in runs])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

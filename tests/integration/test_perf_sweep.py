"""One short real sweep against the session server: the CSV is produced and parsed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.paths import PROJECT_ROOT


def test_short_sweep_writes_parsed_rows_a_knee_and_plots(triton) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cli", "perf", "sweep", "embed",
         "--concurrency", "1", "2", "--url", triton.grpc_url, "--interval-s", "1",
         # A short check of the plumbing, not a measurement: any two windows will do.
         "--stability-percentage", "1000"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    folder = Path(out.stdout.strip().splitlines()[-1].removeprefix("results in "))
    data = json.loads((folder / "sweep.json").read_text())
    assert [r["concurrency"] for r in data["rows"]] == [1, 2]
    assert all(r["throughput"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 for r in data["rows"])
    assert data["knee"]["concurrency"] in (1, 2)
    assert (folder / "embed-c1.csv").read_text().startswith("Concurrency,Inferences/Second")
    assert (folder / "sweep.png").stat().st_size > 0
    check = subprocess.run(
        [sys.executable, "-m", "cli.main", "perf", "compare", str(folder), str(folder)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert "| 1 | 1.00 | 1.00 |" in check.stdout


@pytest.mark.parametrize("encoder", ["minilm_onnx", "minilm_openvino"])
def test_plan_measures_an_encoder_in_process_as_its_backend_runs_it(encoder) -> None:
    """`tmr perf plan`'s measurement (it imported a runner export.gate never had)."""
    from server.plan import BATCHES, measure

    points = measure(PROJECT_ROOT / "model_repository" / encoder, seconds=0.02)
    assert [p.batch for p in points] == list(BATCHES)
    assert all(p.latency_ms > 0 for p in points)

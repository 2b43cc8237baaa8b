"""`tmr perf check` against the checked-in baseline: ratios, not absolute times."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli.perf import check_command
from server.sweep import BASELINES

BASELINE = BASELINES / "embed_grpc.json"


def check(result: Path, **thresholds: float) -> int:
    args = argparse.Namespace(result=result, baseline=None, min_throughput_ratio=0.8,
                              max_p99_ratio=1.5, **thresholds)
    return check_command(args)


def test_the_checked_in_baseline_passes_against_itself(capsys) -> None:
    assert check(BASELINE) == 0
    assert "c16: throughput 1.00x, p99 1.00x" in capsys.readouterr().out


def test_a_slower_result_is_a_regression_with_a_nonzero_exit(tmp_path: Path, capsys) -> None:
    data = json.loads(BASELINE.read_text())
    for row in data["rows"]:
        row["throughput"] *= 0.7
        row["p99_ms"] *= 2.0
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    assert check(tmp_path) == 1
    err = capsys.readouterr().err
    assert "REGRESSION c16: throughput 0.70x < 0.8x" in err and "p99 2.00x > 1.5x" in err

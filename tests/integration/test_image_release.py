"""The image family's release gate: `tmr gate` judges an INT8 candidate of `digits` by top-1
on the MNIST test set (at most 1 point lost, the seeds' 4.2) against eager PyTorch and the
served version, in-process (no server needed), and refuses a degraded one."""

from __future__ import annotations

import json

import pytest

from core.repository import copy_repository
from tests.conftest import REPOSITORY
from tests.integration.helpers import add_version, noisy_copy, tmr

MODEL = "digits_int8"


@pytest.mark.timeout(300)
def test_the_int8_gate_passes_the_export_and_refuses_a_degraded_candidate(tmp_path) -> None:
    repo = copy_repository([REPOSITORY], tmp_path / "repository")
    folder = repo / MODEL
    add_version(folder, 2, (folder / "1" / "model.onnx").resolve())  # the same weights
    same = tmr("gate", MODEL, "2", "--repository", str(repo))
    assert same.returncode == 0, same.stdout + same.stderr
    report = json.loads((folder / "2" / "gate.json").read_text())
    reference = report["quality"]["reference"]
    assert reference["top1"] >= 0.98 and reference["top1_drop"] <= 0.01, reference
    assert report["quality"]["current"]["agreement"] == 1.0

    fp32 = (repo / "digits_onnx" / "1" / "model.onnx").resolve()
    add_version(folder, 3, noisy_copy(fp32, 1.0))
    refused = tmr("gate", MODEL, "3", "--repository", str(repo))
    assert refused.returncode == 1, refused.stdout
    report = json.loads((folder / "3" / "gate.json").read_text())
    assert report["passed"] is False
    assert any("points under the reference, over 1" in r for r in report["reasons"]), report

"""`tmr tune` where nothing meets the objective: real servers measured, a zero score written
as what it is, no inf or NaN anywhere, and `tmr serve`'s line saying the real reason.

The objective is forced out of reach (`objective_ms`, as `tmr tune --objective-ms` does); the
rounds are cut to one short point and the candidates to one (the fronts running onnxruntime
in their own stubs, which needs no fidelity gate), so two servers start: the measurement,
the decision, the record, the report and the line are the product's own."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from core import host_profile as hp
from core import tune_record as tr
from core.hardware import FP32
from server import tune
from server.profile import select
from tests.integration.helpers import repository_of

MODELS = ("embed", "embed_interactive", "minilm_onnx", "minilm_int8", "health")


def no_gate(folder: Path, precision: str) -> tuple[dict[str, float], str | None]:
    raise AssertionError(f"an FP32 candidate needs no gate ({folder}, {precision})")


@pytest.mark.timeout(300)
def test_an_unreachable_objective_is_reported_as_no_candidate_met_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = repository_of(tmp_path, *MODELS)
    monkeypatch.setitem(tune.MODES, "quick", tune.Mode(2, (1, 2), 0.5, False))
    monkeypatch.setattr(tune, "BUSY_SHARE", 1.0)  # the busy host's verdict: unit-tested
    host = hp.Host.current()
    inside = hp.Layout(1, host.cores, 2, idle_session=False, in_process=True)
    monkeypatch.setattr(tune, "kinds", lambda *_: [hp.Kind("onnx", FP32, inside)])
    record = tune.tune(repo, no_gate, "quick", objective_ms=0.01, logs=tmp_path)

    front = record.fronts["embed"]
    assert front.verdict == hp.Verdict.NONE_MET and front.chosen.reviewed
    assert front.objective_p99_ms == 0.01 and front.ratios == {}
    assert all(g == 0 for c in front.candidates for g in c.goodputs)
    assert len(front.candidates[0].goodputs) == 2  # both rounds were measured
    assert [p["concurrency"] for p in record.points if p["candidate"] == 0][:2] == [1, 2]
    assert tr.read_record(repo) == record  # the record reads back as written
    assert not (repo / "embed" / "configs" / "host.pbtxt").exists()

    text = (repo / tr.REPORT_FILE).read_text()
    assert "No candidate met the objective at any concurrency: no candidate met the " \
           "objective at any concurrency, the reviewed configs included" in text
    assert "p99 <= 0.01 ms (as `--objective-ms` asked)" in text
    assert not re.search(r"\b(inf|nan)\b", text, re.IGNORECASE), text
    raw = (repo / tr.RECORD_FILE).read_text()
    assert "Infinity" not in raw and "NaN" not in raw
    assert all(math.isfinite(p["p99_ms"]) for p in json.loads(raw)["points"])

    name, line = select(repo)
    assert name.reviewed
    assert line.startswith("serving the reviewed configs: `tmr tune` no candidate met the "
                           "objective at any concurrency (tuned "), line

"""The rollout's pure parts: steps, state in the config, the sticky split, the verdicts."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core import config_edit, rollout, versions
from core.paths import DEFAULT_REPOSITORY
from server import rollout_judge
from server.rollout import with_state

pytestmark = pytest.mark.timeout(30)

STEPS = rollout_judge.parse_steps(rollout_judge.DEFAULT_STEPS, rollout_judge.DEFAULT_CANARY_SHADOW)
STATE = rollout.RolloutState(version=2, stable=1, steps=STEPS, min_requests=100, min_seconds=10,
                             min_pairs=20, id="2026-12-02T00:00:00+00:00")
TEXT = rollout_judge.Thresholds(mean_agreement=0.9999, min_agreement=0.999, max_p99_ratio=1.5)


def test_default_steps_shadow_then_growing_canaries() -> None:
    assert [s.describe() for s in STEPS] == [
        "shadow 25%", "canary 1% (shadow 5%)", "canary 10% (shadow 5%)",
        "canary 50% (shadow 5%)"]


@pytest.mark.parametrize("text, error", [
    ("", "at least one step"), ("canary:10,canary:5", "must grow"),
    ("canary:100", "(0, 100)"), ("blue:5", "shadow:PERCENT or canary"),
    ("canary:x", "NAME:PERCENT"), ("canary:nan", "(0, 100)")])
def test_bad_steps_are_refused(text: str, error: str) -> None:
    with pytest.raises(rollout.RolloutError, match=error.replace("(", r"\(").replace(")", r"\)")):
        rollout_judge.parse_steps(text, 0.1)


def test_steps_that_never_shadow_are_refused() -> None:
    with pytest.raises(rollout.RolloutError, match="could not be judged"):
        rollout_judge.parse_steps("canary:10", 0.0)


def test_state_round_trips_through_json() -> None:
    assert rollout.RolloutState.from_json(STATE.to_json()) == STATE
    assert STATE.advanced().current == STEPS[1]
    assert not STATE.last_step and replace(STATE, step=3).last_step


@pytest.fixture
def encoder_dir(tmp_path: Path) -> Path:
    """A copy of minilm_onnx's configs (no artifacts) with version folders 1 and 2."""
    target = tmp_path / "minilm_onnx"
    shutil.copytree(DEFAULT_REPOSITORY / "minilm_onnx", target,
                    ignore=shutil.ignore_patterns("[0-9]*"))
    for version in (1, 2):
        (target / str(version)).mkdir()
    return target


def test_state_in_the_config_selects_both_versions_and_serves_the_stable(encoder_dir) -> None:
    for path in versions.config_files(encoder_dir):
        config_edit.edit_file(path, with_state(STATE))
    config = versions.read_config(encoder_dir)
    assert rollout.state_of(config) == STATE
    assert versions.selected_on_disk(encoder_dir) == [1, 2]
    assert versions.served_version(encoder_dir) == 1  # the candidate is not "served"
    assert "versions: [ 1, 2 ]" in (encoder_dir / "config.pbtxt").read_text()
    last = {"id": STATE.id, "version": 2, "served": 2, "outcome": rollout.PROMOTED}
    for path in versions.config_files(encoder_dir):
        config_edit.edit_file(path, with_state(None, last))
    config = versions.read_config(encoder_dir)
    assert rollout.state_of(config) is None
    assert rollout.last_of(config)["outcome"] == rollout.PROMOTED
    assert versions.selected_on_disk(encoder_dir) == [2]
    assert versions.served_version(encoder_dir) == 2
    gpu = versions.parse_config((encoder_dir / "configs" / "gpu.pbtxt").read_text())
    assert list(gpu.version_policy.specific.versions) == [2]


def test_an_unreadable_state_is_refused_not_guessed(encoder_dir) -> None:
    config_edit.edit_file(encoder_dir / "config.pbtxt",
                          config_edit.set_parameter(rollout.STATE_PARAMETER, "{broken", add=True))
    with pytest.raises(rollout.RolloutError, match="unreadable"):
        rollout.state_of(versions.read_config(encoder_dir))


def test_the_split_is_sticky_and_grows_monotonically() -> None:
    keys = [f"text {i}" for i in range(20000)]
    at = {share: rollout.to_candidate(keys, share, "2") for share in (0.01, 0.1, 0.5)}
    assert at[0.01] == rollout.to_candidate(keys, 0.01, "2")  # the same answer every time
    for small, large in ((0.01, 0.1), (0.1, 0.5)):
        assert all(b for a, b in zip(at[small], at[large]) if a)  # a canary row stays one
    for share, chosen in at.items():
        assert abs(sum(chosen) / len(keys) - share) < 0.01 + share * 0.1
    assert rollout.to_candidate(keys[:5], 0.0, "2") == [False] * 5
    assert at[0.5] != rollout.to_candidate(keys, 0.5, "3")  # another candidate, other rows


def test_agreement_metrics() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert np.allclose(rollout.row_cosine(a, a), 1.0)
    assert np.allclose(rollout.row_cosine(a, a[::-1]), 0.0)
    logits = np.array([[0.1, 0.9], [0.8, 0.2]])
    assert rollout.top1_agreement(logits, logits[::-1]).tolist() == [0.0, 0.0]
    assert rollout.top1_agreement(logits, logits * 2).tolist() == [1.0, 1.0]


def test_percentile_of_cumulative_buckets() -> None:
    buckets = {0.01: 50.0, 0.02: 98.0, 0.05: 99.0, 0.1: 100.0}
    assert rollout_judge.percentile(buckets, 0.5) == 0.01
    assert rollout_judge.percentile(buckets, 0.99) == 0.05
    assert rollout_judge.percentile({}, 0.99) is None


def window(**values: float) -> rollout_judge.Window:
    base = dict(candidate_calls=50, candidate_rows=200, shadow_rows=100, agreement_rows=100,
                disagreement_sum=0.0, paired_calls=25)
    w = rollout_judge.Window(**{**base, **values})
    w.stable_paired = {0.01: 24.0, 0.02: 25.0}
    w.candidate_shadow = {0.01: 24.0, 0.02: 25.0}
    return w


def test_a_good_step_advances_once_long_and_large_enough() -> None:
    assert rollout_judge.judge(STATE, window(), TEXT, elapsed_s=11).action == "advance"
    assert rollout_judge.judge(STATE, window(), TEXT, elapsed_s=5).action == "wait"
    assert rollout_judge.judge(STATE, window(candidate_rows=50), TEXT,
                               elapsed_s=11).action == "wait"
    assert rollout_judge.judge(STATE, window(paired_calls=5), TEXT, elapsed_s=11).action == "wait"
    paused = replace(STATE, paused=True)
    assert rollout_judge.judge(paused, window(), TEXT, elapsed_s=11).reason == "paused"


def test_breaches_roll_back_at_once() -> None:
    errors = rollout_judge.judge(STATE, window(candidate_errors=2), TEXT, elapsed_s=1)
    assert errors.action == "rollback" and "error rate 4.0%" in errors.reason
    below = rollout_judge.judge(STATE, window(below_min_rows=1), TEXT, elapsed_s=1)
    assert below.action == "rollback" and "under 0.999" in below.reason
    drift = rollout_judge.judge(STATE, window(disagreement_sum=0.1), TEXT, elapsed_s=1)
    assert drift.action == "rollback" and "mean agreement 0.99900" in drift.reason
    slow = window()
    slow.candidate_shadow = {0.01: 0.0, 0.02: 0.0, 0.05: 25.0}
    before_min_seconds = rollout_judge.judge(STATE, slow, TEXT, elapsed_s=1)
    assert before_min_seconds.action == "wait"
    first = rollout_judge.judge(STATE, slow, TEXT, elapsed_s=11)
    assert first.action == "recheck" and "5.00x" in first.reason  # one stall is no verdict
    verdict = rollout_judge.judge(STATE, slow, TEXT, elapsed_s=11, rechecking=True)
    assert verdict.action == "rollback" and "5.00x" in verdict.reason
    lenient = replace(STATE, max_p99_ratio=6.0)  # an operator's limit over the gate's
    assert rollout_judge.judge(lenient, slow, TEXT, elapsed_s=11).action == "advance"
    assert verdict.figures["p99_ratio"] == pytest.approx(5.0)  # at q = 1 - 1/25
    # paused holds the step, not the breach
    paused = rollout_judge.judge(replace(STATE, paused=True), slow, TEXT, 11, True)
    assert paused.action == "rollback"


def test_a_canary_step_compares_the_calls_each_version_answered() -> None:
    canary = STATE.advanced()
    slow_shadow = window()  # paired calls slow: a shadow step's comparison, not a canary's
    slow_shadow.candidate_shadow = {0.01: 0.0, 0.02: 0.0, 0.05: 25.0}
    slow_shadow.stable_served = slow_shadow.candidate_served = {0.01: 30.0}
    assert rollout_judge.judge(canary, slow_shadow, TEXT, elapsed_s=11).action == "advance"
    slow_served = window()
    slow_served.stable_served = {0.01: 29.0, 0.02: 30.0}
    slow_served.candidate_served = {0.01: 0.0, 0.02: 0.0, 0.05: 30.0}
    verdict = rollout_judge.judge(canary, slow_served, TEXT, elapsed_s=11, rechecking=True)
    assert verdict.action == "rollback" and "the calls each answered" in verdict.reason


def test_mean_and_p99_wait_for_enough_pairs() -> None:
    few = window(paired_calls=3, disagreement_sum=1.0)
    assert rollout_judge.judge(STATE, few, TEXT, elapsed_s=1).action == "wait"


def test_a_step_never_judged_rolls_back_at_its_timeout() -> None:
    verdict = rollout_judge.judge(STATE, rollout_judge.Window(), TEXT,
                                  elapsed_s=STATE.step_timeout_s + 1)
    assert verdict.action == "rollback" and "not judged" in verdict.reason


def test_images_judge_no_row_minimum() -> None:
    images = rollout_judge.Thresholds(mean_agreement=0.99, min_agreement=None, max_p99_ratio=1.5)
    assert rollout_judge.judge(STATE, window(below_min_rows=5), images,
                               elapsed_s=11).action == "advance"


def sample(name: str, value: float, version: str, role: str = "", path: str = "",
           le: str = "", encoder: str = "minilm_onnx") -> str:
    """One line of Prometheus text, as a front model exports it."""
    labels = {"model": "embed", "encoder": encoder, "version": version, "role": role,
              "path": path, "le": le}
    text = ",".join(f'{k}="{v}"' for k, v in labels.items() if v)
    return f"{name}{{{text}}} {value}"


METRICS = "\n".join([
    "# TYPE tmr_rollout_calls_total counter",
    sample("tmr_rollout_calls_total", 30, "2", "candidate", "shadow"),
    sample("tmr_rollout_calls_total", 10, "2", "candidate", "served"),
    sample("tmr_rollout_calls_total", 30, "1", "stable", "paired"),
    sample("tmr_rollout_calls_total", 99, "2", "candidate", "served", encoder="other_onnx"),
    "# TYPE tmr_rollout_call_errors_total counter",
    sample("tmr_rollout_call_errors_total", 1, "2", "candidate", "served"),
    "# TYPE tmr_rollout_rows_total counter",
    sample("tmr_rollout_rows_total", 120, "2", "candidate", "shadow"),
    sample("tmr_rollout_rows_total", 12, "2", "candidate", "served"),
    "# TYPE tmr_rollout_disagreement_sum counter",
    sample("tmr_rollout_disagreement_sum", 0.5, "2"),
    "# TYPE tmr_rollout_agreement_rows_total counter",
    sample("tmr_rollout_agreement_rows_total", 120, "2"),
    "# TYPE tmr_rollout_agreement_below_total counter",
    sample("tmr_rollout_agreement_below_total", 1, "2"),
    "# TYPE tmr_rollout_call_seconds_bucket counter",
    sample("tmr_rollout_call_seconds_bucket", 29, "1", "stable", "paired", "0.01"),
    sample("tmr_rollout_call_seconds_bucket", 30, "1", "stable", "paired", "0.02"),
    sample("tmr_rollout_call_seconds_bucket", 3, "2", "candidate", "shadow", "0.01"),
    sample("tmr_rollout_call_seconds_bucket", 30, "2", "candidate", "shadow", "0.02"),
]) + "\n"


def parsed(text: str) -> list:
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def test_the_window_is_read_from_prometheus_samples() -> None:
    w = rollout_judge.window_from(parsed(METRICS), "minilm_onnx", STATE)
    assert (w.candidate_calls, w.candidate_errors, w.candidate_rows) == (40, 1, 132)
    assert (w.shadow_rows, w.paired_calls, w.below_min_rows) == (120, 30, 1)
    assert w.disagreement_sum == 0.5 and w.agreement_rows == 120
    assert w.stable_paired == {0.01: 29, 0.02: 30} and w.candidate_shadow[0.02] == 30
    assert w.figures()["p99_ratio"] == 2.0  # at q = 1 - 1/30: 0.02 s against 0.01 s


def test_minus_gives_the_step_and_notices_a_restart() -> None:
    now = rollout_judge.window_from(parsed(METRICS), "minilm_onnx", STATE)
    earlier = parsed(METRICS.replace("} 30\n", "} 10\n"))
    base = rollout_judge.window_from(earlier, "minilm_onnx", STATE)
    delta = rollout_judge.minus(now, base)
    assert delta.candidate_calls == 20 and delta.stable_paired[0.02] == 20
    assert rollout_judge.minus(base, now) is None  # counters went down: a server restarted

"""The batch- and capacity-planning arithmetic (server/planning.py) and `tmr perf plan` and
`tmr perf capacity` (server/plan.py), on the seeds' worked example, synthetic curves and the
sweep figures of perf/README.md."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from server.perf_analyzer import PerfRow
from server.planning import (
    BatchPoint,
    CapacityError,
    Hpa,
    Plan,
    capacity,
    capacity_report,
    check_table,
    max_batch_from_memory,
    per_sample_mb,
    plan,
    preferred_batch,
    queue_delay_us,
)


def test_seeds_example_20_gb_at_1_2_gb_a_sample_with_20_percent_headroom_is_13() -> None:
    # 20 GB / 1.2 GB = 16.7 in theory; keeping 20% free leaves 16 GB -> 13 samples.
    assert max_batch_from_memory(20_000, 1_200, headroom=0.2) == 13
    assert max_batch_from_memory(100, 1_000) == 1  # never below one


def test_seeds_queue_delay_example_keeps_the_p99_budget() -> None:
    # p99 budget 500 ms, a batch computes in 200 ms: at most 300 ms of queueing...
    assert queue_delay_us(500, 200, arrival_rps=10, batch=12) == 300_000
    # ...and never longer than the arrivals need to fill the batch (50/s x 12 = 240 ms).
    assert queue_delay_us(500, 200, arrival_rps=50, batch=12) == 240_000
    assert queue_delay_us(100, 200, arrival_rps=50, batch=12) == 0


CURVE = [BatchPoint(1, 6.5, 10), BatchPoint(4, 20.0, 25), BatchPoint(8, 30.0, 45),
         BatchPoint(16, 62.0, 85), BatchPoint(32, 100.0, 165), BatchPoint(64, 205.0, 325)]


def test_preferred_batch_is_the_smallest_within_5_percent_of_the_best_throughput() -> None:
    assert preferred_batch(CURVE) == 32  # 320 seq/s; the dip at 16 does not stop the search
    assert preferred_batch(CURVE, min_gain=0.2) == 8  # 267 is within 20% of 320


def test_per_sample_memory_is_the_conservative_slope_of_the_curve() -> None:
    assert per_sample_mb(CURVE) == 325 / 64  # the slopes are 5 MB; batch 64 averages 5.08


def test_plan_respects_memory_and_latency_budgets() -> None:
    proposal = plan(CURVE, memory_budget_mb=500, latency_budget_ms=150, arrival_rps=400)
    assert proposal.max_batch_size == 64  # 500 x 0.8 / 5.08 = 78, capped at the largest measured
    small = plan(CURVE, memory_budget_mb=100, latency_budget_ms=150, arrival_rps=400)
    assert small.max_batch_size == 15  # 100 x 0.8 / 5.08
    assert proposal.preferred_batch_size == 32  # the knee among batches under 150 ms
    assert proposal.max_queue_delay_microseconds == 50_000  # 150 - 100 ms, < 80 ms to fill
    tight = plan(CURVE, memory_budget_mb=500, latency_budget_ms=50, arrival_rps=400)
    assert tight.preferred_batch_size == 8


def test_the_proposal_is_a_config_triton_parses_with_the_planned_values() -> None:
    from core import versions
    from core.paths import DEFAULT_REPOSITORY
    from server.plan import proposed_config

    text = (DEFAULT_REPOSITORY / "minilm_onnx" / "config.pbtxt").read_text()
    new = proposed_config(text, Plan(48, 16, 20_000, 5.0, 60.0, 266.0))
    config = versions.parse_config(new)
    assert config.max_batch_size == 48
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 20_000


def test_check_table_puts_predicted_and_measured_side_by_side_with_ratios() -> None:
    proposal = Plan(max_batch_size=64, preferred_batch_size=8,
                    max_queue_delay_microseconds=16000, per_sample_mb=1.0,
                    predicted_latency_ms=44.0, predicted_throughput=181.0)
    table = check_table(proposal, 60.0, measured_rps=128.0, measured_p99_ms=75.0,
                        measured_batch=4.0)
    assert "| throughput (infer/s) | 181.0 | 128.0 | 0.71 |" in table
    assert "| p99 latency (ms) | 60.0 | 75.0 | 1.25 |" in table
    assert "| executed batch size | 8.0 | 4.0 | 0.50 |" in table
    assert table.endswith("measured p99 is over the 60 ms budget")


# -- capacity: replicas for a target peak ---------------------------------------------------


def row(c: int, rps: float, p99: float) -> PerfRow:
    return PerfRow(c, rps, p99 / 2, p99 * 0.8, p99 * 0.9, p99, 1.0, 2.0, 0.5)


# perf/README.md "Figures from this machine": embed over gRPC, c4 is the last level in 60 ms.
SWEEP = [row(1, 82, 20.9), row(2, 143, 24.4), row(4, 196, 44.6), row(8, 231, 72.9),
         row(16, 233, 150.1), row(32, 266, 245.0)]
HPA = Hpa(min_replicas=2, max_replicas=8, queue_target_us=20_000, pdb_max_unavailable=1)


def test_goodput_is_the_highest_concurrency_within_the_p99_objective() -> None:
    cap = capacity(SWEEP, target_rps=1000)
    assert (cap.concurrency, cap.goodput_rps, cap.p99_ms) == (4, 196, 44.6)
    assert capacity(SWEEP, target_rps=1000, p99_budget_ms=80).concurrency == 8
    # Noise that dips back under the objective at a higher level counts: it was measured.
    assert capacity([*SWEEP, row(64, 300, 59.0)], target_rps=1000).concurrency == 64


def test_a_fractional_replica_count_rounds_up() -> None:
    cap = capacity(SWEEP, target_rps=1000)  # 1000 x 1.2 / 196 = 6.12
    assert cap.replicas == 7
    assert cap.share(7) == pytest.approx(1000 / 7 / 196)


def test_an_exact_multiple_does_not_round_up_on_float_error() -> None:
    assert capacity(SWEEP, target_rps=980).replicas == 6  # 980 x 1.2 / 196 = 6 exactly
    assert capacity([row(1, 196, 30)], target_rps=196 * 5 / 1.2).replicas == 5  # 4.999999...


def test_a_small_target_needs_one_replica_but_the_hpa_minimum_stays_above_the_pdb() -> None:
    cap = capacity(SWEEP, target_rps=10)
    assert cap.replicas == 1
    assert cap.hpa_min_replicas(HPA) == 2
    assert "HPA minReplicas: 2 (the PDB lets a drain take 1)" in capacity_report(cap, HPA)


@pytest.mark.parametrize("target", [0, -5, float("nan")])
def test_a_target_of_zero_or_less_is_refused(target: float) -> None:
    with pytest.raises(CapacityError, match="target must be above 0 requests/s"):
        capacity(SWEEP, target_rps=target)


def test_a_sweep_with_no_level_within_the_objective_names_its_best_p99() -> None:
    with pytest.raises(CapacityError, match=r"no level is within the 15 ms p99 objective: "
                                            r"the best is concurrency 1 at p99 20.9 ms"):
        capacity(SWEEP, target_rps=100, p99_budget_ms=15)
    with pytest.raises(CapacityError, match="the sweep has no rows"):
        capacity([], target_rps=100)


def test_the_report_shows_the_arithmetic_one_replica_fewer_and_the_hpa_minimum() -> None:
    report = capacity_report(capacity(SWEEP, target_rps=1000), HPA)
    assert report.splitlines()[:4] == [
        "goodput of one replica: 196 req/s (concurrency 4, p99 44.6 ms within the 60 ms "
        "objective)",
        "target 1000 req/s + 20% headroom = 1200 req/s",
        "replicas: ceil(1200 / 196.0 = 6.12) = 7, each at 73% of its goodput",
        "one replica fewer (6): each at 85% of its goodput, within it, but under the 20% "
        "headroom",
    ]
    assert "HPA minReplicas: 7; the manifest has 2, maxReplicas 8" in report
    assert "target 20000 us (20 ms of the 60 ms objective)" in report
    assert "raise maxReplicas" not in report


def test_a_plan_over_the_hpa_maximum_says_to_raise_it_and_one_fewer_overloads() -> None:
    cap = capacity([row(1, 100, 30)], target_rps=1000, headroom=0.0)  # exactly 10
    report = capacity_report(cap, HPA)
    assert "one replica fewer (9): each at 111% of its goodput, over its goodput" in report
    assert report.endswith("raise maxReplicas to at least 10: the manifest's is under the plan")


def test_the_hpa_figures_are_read_from_the_triton_manifest() -> None:
    from server.plan import manifest_hpa

    assert manifest_hpa() == HPA


def test_tmr_perf_capacity_reads_a_sweep_folder_and_exits_2_on_a_refusal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import build_parser, run

    def main(argv: list[str]) -> int:  # cli.main.main without its logging set-up
        return run(build_parser().parse_args(argv))

    folder = tmp_path / "20261130-034600"
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(
        {"model": "embed", "protocol": "grpc", "rows": [asdict(r) for r in SWEEP]}))
    assert main(["perf", "capacity", str(folder), "--target-rps", "1000"]) == 0
    assert "replicas: ceil(1200 / 196.0 = 6.12) = 7" in capsys.readouterr().out
    assert main(["perf", "capacity", str(folder), "--target-rps", "-1"]) == 2
    assert "error: the target must be above 0" in capsys.readouterr().err
    assert main(["perf", "capacity", str(tmp_path), "--target-rps", "1"]) == 2
    assert "error: no sweep result at" in capsys.readouterr().err

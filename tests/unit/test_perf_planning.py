"""The batch-planning arithmetic, on the seeds' worked example and synthetic curves."""

from __future__ import annotations

from perf.planning import (
    BatchPoint,
    Plan,
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
    from perf.plan_cli import proposed_config
    from perf.planning import Plan
    from python_backends import versions as v
    from server.settings import DEFAULT_REPOSITORY

    text = (DEFAULT_REPOSITORY / "minilm_onnx" / "config.pbtxt").read_text()
    new = proposed_config(text, Plan(48, 16, 20_000, 5.0, 60.0, 266.0))
    config = v.parse_config(new)
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

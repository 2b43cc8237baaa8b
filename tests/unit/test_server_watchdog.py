"""The watchdog's decisions: dead stubs at once, stalls and repeated failures after a while."""

from __future__ import annotations

from server.watchdog import Sample, StallDetector

OK = Sample(ok=True, error="", pending=0, executions=10)
DEAD = ("[503] Failed to process the request(s) for model instance 'minilm_onnx_0_0', "
        "message: Stub process 'minilm_onnx_0_0' is not healthy.")


def test_a_dead_stub_is_reloaded_at_the_first_sample() -> None:
    reason = StallDetector().decide("minilm_onnx", Sample(False, DEAD, 0, 10))
    assert reason.startswith("dead Python stub") and "is not healthy" in reason


def test_pending_requests_without_new_executions_are_a_stall_after_n_intervals() -> None:
    detector = StallDetector(stall_intervals=3)
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    reason = detector.decide("embed", Sample(True, "", pending=5, executions=10))
    assert reason == "stalled: 5 pending, no execution for 3 intervals"


def test_progress_or_an_empty_queue_resets_the_stall_count() -> None:
    detector = StallDetector(stall_intervals=2)
    detector.decide("embed", Sample(True, "", 5, 10))
    detector.decide("embed", Sample(True, "", 5, 10))
    assert detector.decide("embed", Sample(True, "", 5, 11)) is None  # it executed
    assert detector.decide("embed", Sample(True, "", 0, 11)) is None  # nothing pending
    assert detector.decide("embed", Sample(True, "", 5, 11)) is None


def test_repeated_probe_failures_trigger_a_reload_and_success_resets_them() -> None:
    detector = StallDetector(failures_to_reload=2)
    failing = Sample(False, "[500] onnxruntime error", 0, 10)
    assert detector.decide("m", failing) is None
    assert detector.decide("m", OK) is None
    assert detector.decide("m", failing) is None
    assert detector.decide("m", failing) == "2 failed probes: [500] onnxruntime error"


def test_a_router_that_refuses_work_on_purpose_is_not_a_fault() -> None:
    detector = StallDetector(failures_to_reload=1)
    refused = Sample(False, "[503] embed is degraded to level 4 (unavailable): out of "
                            "service", 0, 10)
    assert detector.decide("embed", refused) is None

"""The watchdog's decisions: dead stubs at once, stalls and repeated failures after a while.

The failures fed in are the producers' own messages where the project writes them (the
router's refusal, core.messages.degraded_refusal), so a rewording cannot break the
watchdog; the metric label is the decision's kind, never a piece of its text."""

from __future__ import annotations

import pytest

from core.messages import degraded_refusal
from server.admin_client import AdminClient
from server.watchdog import Reload, ReloadKind, Sample, StallDetector, Watchdog

OK = Sample(ok=True, error="", pending=0, executions=10)
DEAD = ("[503] Failed to process the request(s) for model instance 'minilm_onnx_0_0', "
        "message: Stub process 'minilm_onnx_0_0' is not healthy.")


def test_a_dead_stub_is_reloaded_at_the_first_sample() -> None:
    decision = StallDetector().decide("minilm_onnx", Sample(False, DEAD, 0, 10))
    assert decision == Reload(ReloadKind.DEAD_STUB, DEAD)
    assert str(decision).startswith("dead Python stub: ") and "is not healthy" in str(decision)


def test_pending_requests_without_new_executions_are_a_stall_after_n_intervals() -> None:
    detector = StallDetector(stall_intervals=3)
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    assert detector.decide("embed", Sample(True, "", pending=5, executions=10)) is None
    decision = detector.decide("embed", Sample(True, "", pending=5, executions=10))
    assert decision == Reload(ReloadKind.STALLED, "5 pending, no execution for 3 intervals")


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
    decision = detector.decide("m", failing)
    assert decision is not None and decision.kind is ReloadKind.FAILED_PROBES
    assert decision.detail == "2 in a row, the last: [500] onnxruntime error"


@pytest.mark.parametrize("level", [3, 4])
def test_a_router_that_refuses_work_on_purpose_is_not_a_fault(level: int) -> None:
    detector = StallDetector(failures_to_reload=1)
    refusal = degraded_refusal("embed", level, "some_level", "any reason, in any words")
    refused = Sample(False, f"[503] {refusal}", 0, 10)
    assert detector.decide("embed", refused) is None


@pytest.mark.parametrize(("sample", "label"), [
    (Sample(False, DEAD, 0, 10), "dead_stub"),
    (Sample(True, "", 5, 10), "stalled"),
    (Sample(False, "[500] boom", 0, 10), "probes"),
])
def test_the_reloads_metric_is_labelled_by_the_decisions_kind(sample: Sample, label: str) -> None:
    """The label values the alert rules and dashboards see (docs/observability.md); the
    reload itself fails here (nothing listens) and is logged, not raised."""
    detector = StallDetector(stall_intervals=1, failures_to_reload=1)
    decision = detector.decide("m", sample) or detector.decide("m", sample)
    assert decision is not None
    watchdog = Watchdog("localhost:1", "http://localhost:1/metrics")
    with AdminClient("localhost:1") as admin:
        watchdog._reload(admin, "m", decision)
    assert watchdog.registry.get_sample_value("tmr_watchdog_reloads_total",
                                              {"model": "m", "reason": label}) == 1.0
    assert [e[1:] for e in watchdog.events] == [("m", str(decision))]


@pytest.mark.parametrize(("ok", "error", "outcome"), [
    (True, None, "served"),
    (False, "QueueFullError", "refused"),  # Exceeds maximum queue size
    (False, "DeadlineExceededError", "refused"),  # Request timeout expired in the queue
    (False, "UnavailableError", "refused"),  # the router out of service
    (False, "ServerError", "failed"),
    (False, None, "failed"),  # answered, but not sanely
])
def test_a_probe_is_served_refused_or_failed(ok: bool, error: str | None, outcome: str) -> None:
    import tmr_client

    from server.admin_client import Check
    from server.watchdog import probe_outcome

    typed = getattr(tmr_client, error)("message", "503") if error else None
    assert probe_outcome(Check("embed", ok, 1.0, "detail", typed)).value == outcome


def test_a_model_with_priority_levels_is_probed_at_each_highest_first() -> None:
    from core.probes import ProbeTarget

    def target(levels: int) -> ProbeTarget:
        return ProbeTarget("m", None, {}, {}, [], levels)  # type: ignore[arg-type]

    assert target(2).priorities == [1, 2]
    assert target(0).priorities == [0]  # an encoder: its default

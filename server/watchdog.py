"""A watchdog beside Triton: reload a model whose Python stub died or whose queue stalled.

Triton 2.51 does not restart a dead Python stub, and `/v2/health/ready` stays 200 while
every request fails with "Stub process ... is not healthy". A stall (requests pending
while no execution completes) does not show in readiness either. Every `interval_s`
the watchdog sends each model one real inference and reads its pending and execution
counters from /metrics; `decide()` turns that into a reload through the load API.
Reloads are logged with their reason and counted in `tmr_watchdog_reloads_total` on the
watchdog's own metrics port.

A model with priority levels is probed at each level, highest first, and the highest
decides its health (a priority-2 probe refused while priority 1 fills the queue is the
starvation rule at work, not a fault). Neither Triton 2.51 nor the Python stub can tell a
real request's priority, so these probes are the server side's per-priority view:
`tmr_priority_probe_latency_seconds{model,priority}` (served probes) and
`tmr_priority_probes_total{model,priority,outcome}` (served, refused with 503 /
UNAVAILABLE or a queue timeout, failed), on the same port (docs/observability.md).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from tmr_client import DeadlineExceededError, TritonClientError, UnavailableError

from core import messages
from core.messages import FailureKind
from core.probes import ProbeTarget
from server.admin_client import AdminClient, Check, IndexEntry, ModelState
from server.prometheus import samples

log = logging.getLogger("tmr.watchdog")


class ReloadKind(StrEnum):
    """Why the watchdog reloads a model; the value is the `reason` label of
    `tmr_watchdog_reloads_total`."""

    DEAD_STUB = "dead_stub"
    FAILED_PROBES = "probes"
    STALLED = "stalled"


@dataclass(frozen=True)
class Reload:
    """The detector's decision: reload a model, of this kind, with a detail for the log."""

    kind: ReloadKind
    detail: str

    def __str__(self) -> str:
        what = {ReloadKind.DEAD_STUB: "dead Python stub", ReloadKind.FAILED_PROBES: "failed probes",
                ReloadKind.STALLED: "stalled"}[self.kind]
        return f"{what}: {self.detail}"


@dataclass(frozen=True)
class Sample:
    """One model at one instant: a probe result and Triton's counters."""

    ok: bool
    error: str
    pending: float
    executions: float

    @property
    def failure(self) -> FailureKind | None:
        """The failure's kind (core.messages), None when the probe succeeded or says none."""
        if self.ok:
            return None
        if messages.degraded_level(self.error) is not None:
            return FailureKind.DEGRADED
        return messages.kind_of(self.error)


@dataclass
class StallDetector:
    """Pure decision logic: which model needs a reload, and why."""

    stall_intervals: int = 3  # pending > 0 with no new execution for this many samples
    failures_to_reload: int = 3  # probe failures in a row (other than a dead stub)
    _last_exec: dict[str, float] = field(default_factory=dict)
    _stalled: dict[str, int] = field(default_factory=dict)
    _failed: dict[str, int] = field(default_factory=dict)

    def decide(self, model: str, sample: Sample) -> Reload | None:
        """The reload `model` needs now, or None."""
        if sample.failure == FailureKind.STUB_UNHEALTHY:
            return self._reset(model, Reload(ReloadKind.DEAD_STUB, sample.error))
        # The router refusing work at its degradation level is not a fault.
        healthy = sample.ok or sample.failure == FailureKind.DEGRADED
        self._failed[model] = 0 if healthy else self._failed.get(model, 0) + 1
        if self._failed[model] >= self.failures_to_reload:
            return self._reset(model, Reload(ReloadKind.FAILED_PROBES,
                                             f"{self._failed[model]} in a row, the last: "
                                             f"{sample.error}"))
        progressed = sample.executions > self._last_exec.get(model, -1)
        self._last_exec[model] = sample.executions
        stuck = sample.pending > 0 and not progressed
        self._stalled[model] = self._stalled.get(model, 0) + 1 if stuck else 0
        if self._stalled[model] >= self.stall_intervals:
            return self._reset(model, Reload(ReloadKind.STALLED,
                                             f"{sample.pending:.0f} pending, no execution for "
                                             f"{self._stalled[model]} intervals"))
        return None

    def _reset(self, model: str, decision: Reload) -> Reload:
        self._stalled[model] = self._failed[model] = 0
        return decision


PROBE_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProbeOutcome(StrEnum):
    """How one probe ended; the value is the `outcome` label of tmr_priority_probes_total."""

    SERVED = "served"
    REFUSED = "refused"  # 503 / UNAVAILABLE or a queue timeout: the server said "not now"
    FAILED = "failed"


def probe_outcome(check: Check) -> ProbeOutcome:
    """Served, refused (the caller may retry later) or failed."""
    if check.ok:
        return ProbeOutcome.SERVED
    if isinstance(check.error, UnavailableError | DeadlineExceededError):
        return ProbeOutcome.REFUSED
    return ProbeOutcome.FAILED


def triton_counters(metrics_url: str) -> dict[str, tuple[float, float]]:
    """Per model: (pending requests, executions) from Triton's /metrics."""
    pending: dict[str, float] = {}
    executions: dict[str, float] = {}
    for s in samples(metrics_url):
        model = s.labels.get("model")
        if s.name == "nv_inference_pending_request_count":
            pending[model] = pending.get(model, 0) + s.value
        elif s.name in ("nv_inference_exec_count", "nv_inference_exec_count_total"):
            executions[model] = executions.get(model, 0) + s.value
    return {m: (pending.get(m, 0.0), executions.get(m, 0.0)) for m in executions}


class Watchdog(threading.Thread):
    """Runs the probe/decide/reload loop until `stop()`; reloads only in explicit mode."""

    def __init__(self, http_url: str, metrics_url: str, models: list[str] | None = None,
                 interval_s: float = 2.0, metrics_port: int | None = None,
                 detector: StallDetector | None = None) -> None:
        super().__init__(name="tmr-watchdog", daemon=True)
        self.http_url, self.metrics_url = http_url, metrics_url
        self.only = models  # None: every family model the server loaded (see `watched`)
        self.targets: dict[str, ProbeTarget] = {}
        self.interval_s = interval_s
        self.detector = detector or StallDetector()
        self.registry = CollectorRegistry()
        self.reloads = Counter("tmr_watchdog_reloads", "Model reloads by the watchdog",
                               ["model", "reason"], registry=self.registry)
        self.probe_latency = Histogram(
            "tmr_priority_probe_latency_seconds", "Latency of the watchdog's served probes",
            ["model", "priority"], buckets=PROBE_BUCKETS_S, registry=self.registry)
        self.probes = Counter("tmr_priority_probes", "The watchdog's probes by how they ended",
                              ["model", "priority", "outcome"], registry=self.registry)
        self.events: list[tuple[float, str, str]] = []  # (time, model, reason)
        self._stop_event = threading.Event()
        if metrics_port is not None:
            start_http_server(metrics_port, registry=self.registry)

    def stop(self) -> None:
        self._stop_event.set()

    def watched(self, admin: AdminClient) -> list[ProbeTarget]:
        """The family models to watch: each one the server has loaded (READY) since the
        watchdog started, until an operator unloads it (state "unloaded")."""
        for entry in admin.index():
            if self.only is not None and entry.name not in self.only:
                continue
            self._follow(admin, entry)
        return list(self.targets.values())

    def _follow(self, admin: AdminClient, entry: IndexEntry) -> None:
        if entry.state == ModelState.READY and entry.name not in self.targets:
            found = admin.probe_targets([entry.name])
            if found:
                self.targets[entry.name] = found[0]
        elif entry.unloaded:
            self.targets.pop(entry.name, None)

    def run(self) -> None:
        with AdminClient(self.http_url) as admin:
            while not self._stop_event.wait(self.interval_s):
                try:
                    counters = triton_counters(self.metrics_url)
                    targets = self.watched(admin)
                except (TritonClientError, OSError) as err:  # restarting, key refused...
                    log.warning("watchdog cannot read the server's state: %s", err)
                    continue
                for target in targets:
                    self._watch(admin, target, counters.get(target.model, (0.0, 0.0)))

    def _watch(self, admin: AdminClient, target: ProbeTarget,
               counters: tuple[float, float]) -> None:
        checks = [self._probe(admin, target, priority) for priority in target.priorities]
        check = checks[0]  # the highest priority decides whether the model serves
        sample = Sample(check.ok, "" if check.ok else check.detail, *counters)
        decision = self.detector.decide(target.model, sample)
        if decision is not None:
            self._reload(admin, target.model, decision)

    def _probe(self, admin: AdminClient, target: ProbeTarget, priority: int) -> Check:
        check = admin.probe(target, priority=priority)
        outcome = probe_outcome(check)
        labels = {"model": target.model, "priority": str(priority)}
        self.probes.labels(outcome=outcome.value, **labels).inc()
        if outcome is ProbeOutcome.SERVED:
            self.probe_latency.labels(**labels).observe(check.ms / 1000)
        return check

    def _reload(self, admin: AdminClient, model: str, decision: Reload) -> None:
        log.warning("watchdog reloads %s: %s", model, decision)
        self.reloads.labels(model=model, reason=decision.kind.value).inc()
        self.events.append((time.monotonic(), model, str(decision)))
        try:
            admin.reload(model)  # its config sent back: new instances, new stubs
        except TritonClientError as err:  # keep watching
            log.error("watchdog could not reload %s: %s", model, err)

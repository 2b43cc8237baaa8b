"""A watchdog beside Triton: reload a model whose Python stub died or whose queue stalled.

Triton 2.51 does not restart a dead Python stub, and `/v2/health/ready` stays 200 while
every request fails with "Stub process ... is not healthy". A stall (requests pending
while no execution completes) does not show in readiness either. Every `interval_s`
the watchdog sends each model one real inference and reads its pending and execution
counters from /metrics; `decide()` turns that into a reload through the load API.
Reloads are logged with their reason and counted in `tmr_watchdog_reloads_total` on the
watchdog's own metrics port.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

import tritonclient.http as httpclient
from prometheus_client import CollectorRegistry, Counter, start_http_server

from client.auth import key_headers
from client.prometheus import samples
from server.admin import ProbeTarget, probe, probe_targets

log = logging.getLogger("tmr.watchdog")
DEAD_STUB = "is not healthy"
DEGRADED_ON_PURPOSE = "is degraded to level"  # the router refusing work is not a fault


@dataclass(frozen=True)
class Sample:
    """One model at one instant: a probe result and Triton's counters."""

    ok: bool
    error: str
    pending: float
    executions: float


@dataclass
class StallDetector:
    """Pure decision logic: which model needs a reload, and why."""

    stall_intervals: int = 3  # pending > 0 with no new execution for this many samples
    failures_to_reload: int = 3  # probe failures in a row (other than a dead stub)
    _last_exec: dict[str, float] = field(default_factory=dict)
    _stalled: dict[str, int] = field(default_factory=dict)
    _failed: dict[str, int] = field(default_factory=dict)

    def decide(self, model: str, sample: Sample) -> str | None:
        """The reason to reload `model` now, or None."""
        if not sample.ok and DEAD_STUB in sample.error:
            return self._reset(model, f"dead Python stub: {sample.error}")
        healthy = sample.ok or DEGRADED_ON_PURPOSE in sample.error
        self._failed[model] = 0 if healthy else self._failed.get(model, 0) + 1
        if self._failed[model] >= self.failures_to_reload:
            return self._reset(model, f"{self._failed[model]} failed probes: {sample.error}")
        progressed = sample.executions > self._last_exec.get(model, -1)
        self._last_exec[model] = sample.executions
        stuck = sample.pending > 0 and not progressed
        self._stalled[model] = self._stalled.get(model, 0) + 1 if stuck else 0
        if self._stalled[model] >= self.stall_intervals:
            return self._reset(model, f"stalled: {sample.pending:.0f} pending, no execution "
                                      f"for {self._stalled[model]} intervals")
        return None

    def _reset(self, model: str, reason: str) -> str:
        self._stalled[model] = self._failed[model] = 0
        return reason


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
        self.events: list[tuple[float, str, str]] = []  # (time, model, reason)
        self._stop_event = threading.Event()
        if metrics_port is not None:
            start_http_server(metrics_port, registry=self.registry)

    def stop(self) -> None:
        self._stop_event.set()

    def watched(self, client: httpclient.InferenceServerClient) -> list[ProbeTarget]:
        """The family models to watch: each one the server has loaded (READY) since the
        watchdog started, until an operator unloads it (state "unloaded")."""
        index = client.get_model_repository_index(headers=key_headers(admin=True))
        for entry in index:
            name, state = entry["name"], entry.get("state", "")
            if self.only is not None and name not in self.only:
                continue
            if state == "READY" and name not in self.targets:
                found = probe_targets(client, [name])
                if found:
                    self.targets[name] = found[0]
            elif state == "UNAVAILABLE" and entry.get("reason") == "unloaded":
                self.targets.pop(name, None)
        return list(self.targets.values())

    def run(self) -> None:
        client = httpclient.InferenceServerClient(self.http_url)
        try:
            while not self._stop_event.wait(self.interval_s):
                try:
                    counters = triton_counters(self.metrics_url)
                    targets = self.watched(client)
                except Exception as err:  # the server restarting, the admin key refused...
                    log.warning("watchdog cannot read the server's state: %s", err)
                    continue
                for target in targets:
                    model = target.model
                    check = probe(client, target)
                    pending, execs = counters.get(model, (0.0, 0.0))
                    reason = self.detector.decide(
                        model, Sample(check.ok, "" if check.ok else check.detail, pending, execs))
                    if reason:
                        self._reload(client, model, reason)
        finally:
            client.close()

    def _reload(self, client: httpclient.InferenceServerClient, model: str, reason: str) -> None:
        log.warning("watchdog reloads %s: %s", model, reason)
        label = "dead_stub" if reason.startswith("dead") else reason.split(":")[0].split()[-1]
        self.reloads.labels(model=model, reason=label).inc()
        self.events.append((time.monotonic(), model, reason))
        try:
            # A plain load of an unchanged model is a no-op on 2.51; sending its config
            # forces new instances (and new stubs).
            config = client.get_model_config(model, headers=key_headers(admin=True))
            client.load_model(model, config=json.dumps(config), headers=key_headers(admin=True))
        except Exception as err:  # tritonclient raises several types; keep watching
            log.error("watchdog could not reload %s: %s", model, err)

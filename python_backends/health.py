"""`health`: a deep health check from inside Triton, one real inference per loaded model.

`/v2/health/ready` stays 200 while a dead Python stub fails every request (Triton 2.51
does not restart stubs), so readiness alone proves nothing. At initialize this model
finds every family model of its repository (their configs say which family) and builds
each one's probe as its family describes it; any request then gets REPORT, the JSON of
{"healthy": bool, "models": {name: {"ok": bool, "loaded": bool, "ms": float, "error": str}},
 "memory": {"total": {...}, "by_model": {name: {"processes", "rss_mib", "pss_mib"}}},
 "profile_changes": [what changed since `tmr tune` measured the repository]}:
the server's memory as /proc shows it here, a child of the server (core/process_memory.py).

Only loaded models are probed: a server loads some encoders on demand, and `tmr serve
--models` serves some fronts only (core.startup). A model that is not loaded is reported
`"loaded": false`, and ok, unless a loaded front needs it (its front or lane, or an encoder
it calls over BLS): then it is a failure.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from core.families.catalog import catalog
from core.probes import lane_front, probe_target
from core.process_memory import server_memory, total
from core.startup import repository_parameters, required_models
from core.tune_record import changes_here
from core.versions import served_config
from python_backends import metrics
from python_backends.base import BaseModel, ok_response
from python_backends.bls import bls_infer, is_loaded
from runtime.errors import ModelError

NEEDED = "not loaded, yet a loaded front needs it (its front or lane, or its BLS encoder)"


def memory_report(server_pid: int) -> dict[str, Any]:
    """The server's memory, its total and each model's stubs (tritonserver's own row too)."""
    table = server_memory(server_pid)
    return {"total": total(table).to_json(),
            "by_model": {name: usage.to_json() for name, usage in table.items()}}


def not_loaded(name: str, required: set[str]) -> dict[str, Any]:
    """The report entry of a model that is not loaded: a failure only if it is required."""
    needed = name in required
    return {"ok": not needed, "loaded": False, "ms": 0.0, "error": NEEDED if needed else ""}


class HealthModel(BaseModel):
    """Any request gets REPORT: the JSON result of probing every loaded family model."""

    yields_cpu = False  # a deep check answers at normal priority, whatever bulk work runs

    def setup(self, args: dict[str, str]) -> None:
        repository = self.model_dir.parent
        self.probes = {}
        for model in catalog(repository, self.variant):
            for name in model.models:
                config = served_config(repository / name, self.variant)
                front = lane_front(config)
                target = probe_target(config, front and served_config(repository / front,
                                                                      self.variant))
                if target is not None:
                    self.probes[name] = target
        self.parameters = repository_parameters(repository, self.variant)
        self.log.info(f"probes {sorted(self.probes)} when loaded")
        # What operations changed since the host profile was tuned, which it serves on
        # (server/profile.py): set at each deep check (the watchdog's and `tmr health`).
        self.changes = metrics.Gauge(
            "tmr_host_profile_changes", "Changes since `tmr tune` measured the repository "
            "(served versions, added models) that the host profile serves on; 0: none",
            {"model": self.name})

    def check(self, name: str, loaded: set[str], required: set[str]) -> dict[str, Any]:
        if name not in loaded:
            return not_loaded(name, required)
        target = self.probes[name]
        began = time.monotonic()
        try:
            problem = target.problem(bls_infer(name, target.inputs, target.outputs)[
                target.outputs[0]])
        except ModelError as err:
            problem = str(err)
        return {"ok": problem is None, "loaded": True,
                "ms": round((time.monotonic() - began) * 1000, 1), "error": problem or ""}

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        loaded = {name for name in self.probes if is_loaded(name)}
        required = required_models(self.parameters, loaded)
        models = {name: self.check(name, loaded, required) for name in self.probes}
        report = {"healthy": all(m["ok"] for m in models.values()), "models": models,
                  "memory": memory_report(os.getppid()),
                  "profile_changes": changes_here(self.model_dir.parent)}
        self.changes.set(len(report["profile_changes"]))
        array = np.array([json.dumps(report).encode()], dtype=np.object_)
        return [ok_response({"REPORT": array}) for _ in requests]

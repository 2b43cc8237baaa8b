"""`health`: a deep health check from inside Triton, one real inference per model.

`/v2/health/ready` stays 200 while a dead Python stub fails every request (Triton 2.51
does not restart stubs), so readiness alone proves nothing. At initialize this model
finds every family model of its repository (their configs say which family) and builds
each one's probe as its family describes it; any request then gets REPORT, the JSON of
{"healthy": bool, "models": {name: {"ok": bool, "ms": float, "error": str}}}.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from core.families.catalog import catalog
from core.probes import probe_target
from core.versions import read_config
from python_backends.base import BaseModel, ok_response
from python_backends.bls import bls_infer
from python_backends.errors import ModelError


class HealthModel(BaseModel):
    """Any request gets REPORT: the JSON result of probing every family model."""

    def setup(self, args: dict[str, str]) -> None:
        repository = self.model_dir.parent
        self.probes = {}
        for model in catalog(repository):
            for name in model.models:
                target = probe_target(read_config(repository / name))
                if target is not None:
                    self.probes[name] = target
        self.log.info(f"probes {sorted(self.probes)}")

    def check(self, name: str) -> dict[str, Any]:
        target = self.probes[name]
        began = time.monotonic()
        try:
            problem = target.problem(bls_infer(name, target.inputs, target.outputs)[
                target.outputs[0]])
        except ModelError as err:
            problem = str(err)
        return {"ok": problem is None, "ms": round((time.monotonic() - began) * 1000, 1),
                "error": problem or ""}

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        models = {name: self.check(name) for name in self.probes}
        report = {"healthy": all(m["ok"] for m in models.values()), "models": models}
        array = np.array([json.dumps(report).encode()], dtype=np.object_)
        return [ok_response({"REPORT": array}) for _ in requests]

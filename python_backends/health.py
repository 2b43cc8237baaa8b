"""`health`: a deep health check from inside Triton, one real inference per model.

`/v2/health/ready` stays 200 while a dead Python stub fails every request (Triton 2.51
does not restart stubs), so readiness alone proves nothing. This model sends a tiny real
request to each model named in its `check_models` parameter and answers with a JSON
report: {"healthy": bool, "models": {name: {"ok": bool, "ms": float, "error": str}}}.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from python_backends import contracts
from python_backends.base import BaseModel, ok_response
from python_backends.bls import bls_infer
from python_backends.errors import ModelError
from python_backends.params import parameter

# "health check" tokenized by the MiniLM tokenizer: [CLS] health check [SEP]
PROBE_IDS = np.array([[101, 2740, 4638, 102]], dtype=np.int64)


def probe(model: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """A minimal valid request for `model` and the outputs to ask for."""
    if model in contracts.ENCODER_OUTPUTS:
        feeds = dict(zip(contracts.ENCODER_INPUTS, (PROBE_IDS, np.ones_like(PROBE_IDS))))
        return feeds, [contracts.ENCODER_OUTPUTS[model]]
    text = np.array([[b"health check"]], dtype=np.object_)
    return {contracts.TEXT_INPUT: text}, [contracts.EMBEDDING_OUTPUT]


class HealthModel(BaseModel):
    """Any request gets REPORT: the JSON result of probing every checked model."""

    def setup(self, args: dict[str, str]) -> None:
        names = parameter(self.config, "check_models", "embed", str)
        self.models = [n.strip() for n in names.split(",") if n.strip()]

    def check(self, model: str) -> dict[str, Any]:
        began = time.monotonic()
        try:
            feeds, outputs = probe(model)
            bls_infer(model, feeds, outputs)
        except ModelError as err:
            return {"ok": False, "ms": round((time.monotonic() - began) * 1000, 1),
                    "error": str(err)}
        return {"ok": True, "ms": round((time.monotonic() - began) * 1000, 1), "error": ""}

    def execute_requests(self, requests: list[Any]) -> list[Any]:
        models = {name: self.check(name) for name in self.models}
        report = {"healthy": all(m["ok"] for m in models.values()), "models": models}
        array = np.array([json.dumps(report).encode()], dtype=np.object_)
        return [ok_response({"REPORT": array}) for _ in requests]

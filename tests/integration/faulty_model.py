"""A Python model that fails on purpose, to test BaseModel's one error path on a real server.

Each request's QUERY says what execute_requests does: "ok" answers, "raise" raises
RuntimeError, "none" answers None, "nothing" returns no responses at all, "full" refuses
as a full queue does (python_backends/workers.py) and "unavailable" as a stopping model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from python_backends.base import BaseModel, input_array, ok_response
from python_backends.workers import QUEUE_FULL
from runtime.errors import UnavailableError


class FaultyModel(BaseModel):
    def execute_requests(self, requests: list[Any]) -> list[Any]:
        asks = [input_array(r, "QUERY").reshape(-1)[0].decode() for r in requests]
        if "raise" in asks:
            raise RuntimeError("boom, on purpose")
        if "full" in asks:
            raise UnavailableError(f"{QUEUE_FULL}: faulty holds no requests, on purpose")
        if "unavailable" in asks:
            raise UnavailableError("faulty is stopping, on purpose")
        if "nothing" in asks:
            return []
        return [None if ask == "none" else
                ok_response({"REPORT": np.array([b"ok"], dtype=np.object_)}) for ask in asks]

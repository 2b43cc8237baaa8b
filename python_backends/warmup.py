"""An instance's warmup as the Python models see it (core/families/warmup.py has the samples).

Triton runs a config's `model_warmup` samples on each instance right after `initialize`
and before the model reports READY, on that instance's own thread and before any request
(core r24.10, `TritonModelInstance::WarmUp`). So the first `executions(config)` batches an
instance executes are its warmup: `WarmupRuns` counts them and logs one line for each
("warmup 1/4 on minilm_onnx_0_1: ..."), the record of each instance warmed before READY.
What a model does differently for them: an encoder with an idle session runs both of its
sessions (python_backends/tensor_model.py), a front stops before its encoder
(python_backends/front_warmup.py).
"""

from __future__ import annotations

from core.families.warmup import executions
from python_backends.pb import Log


class WarmupRuns:
    """Which executions of this instance are its warmup, and the log line of each."""

    def __init__(self, config: dict, log: Log, instance: str) -> None:
        self.total = executions(config)
        self.done = 0
        self.log, self.instance = log, instance
        self.note = ""  # what the execution under way warmed, when the model says

    @property
    def active(self) -> bool:
        """The execution under way is a warmup sample (asked before `finished`)."""
        return self.done < self.total

    def finished(self, requests: int, took_s: float) -> None:
        """One warmup execution done: counted and logged, with its `note`."""
        self.done += 1
        detail = f" ({self.note})" if self.note else ""
        self.note = ""
        self.log.info(f"warmup {self.done}/{self.total} on {self.instance}: {requests} "
                      f"request(s) in {took_s * 1000:.1f} ms{detail}")

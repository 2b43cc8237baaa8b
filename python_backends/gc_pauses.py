"""Python GC pauses: measured with `gc.callbacks`, tuned by a config parameter.

The seeds (000_*.txt section 5.2) warn that automatic collections during peaks cause
latency spikes. `GcPauses` times every collection of the process that installs it (the
soak's load client does). `gc_policy` chooses what a model does after its setup:

    default   CPython's automatic GC as is
    freeze    gc.freeze() once setup is done: the objects built by `initialize` (the
              tokenizer, onnxruntime, numpy, the whole import graph) move to a permanent
              generation that no collection traverses again, so a full collection walks
              only what requests allocate

docs/reliability.md has the measurement that chose the shipped policy.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

from core.settings import GC_POLICIES

POLICIES = GC_POLICIES  # core/settings.py, where a config's gc_policy is read


@dataclass
class GcPauses:
    """Count and total duration of this process's collections, per generation."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    seconds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    longest_s: float = 0.0
    _started: float = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = int(info.get("generation", 0))
        self.collections[generation] += 1
        self.seconds[generation] += took
        self.longest_s = max(self.longest_s, took)

    def install(self) -> GcPauses:
        if self not in gc.callbacks:
            gc.callbacks.append(self)
        return self

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


def apply_policy(policy: str) -> None:
    """What the model does once its setup is done (see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"gc_policy {policy!r} is not one of {', '.join(POLICIES)}")
    if policy == "freeze":
        gc.collect()
        gc.freeze()
